"""ragtrail: keeps RAG systems honest every night.

Layering, top to bottom: a module imports only from its own package and from lower layers;
packages joined by ``|`` are siblings that do not import each other. `make lint` enforces it with
import-linter (``[tool.importlinter]`` in pyproject.toml), and ``tests/contract/test_layout.py``
checks that this list is the contract's and that no two modules import each other, even through a
function-local import::

    cli                      the command line, one module per command group
    pipeline                 one definition of the night (night.py), its steps and tasks; inside
                             it its own layers: tasks | nightly, publish, retrain, the feature
                             steps, the judges they share, run I/O | night, the Asset events
    runtime                  composition root: builds the configured backends lazily, and
                             imports what registers itself (train -> the generator: LLM kind)
    report                   HTML evaluation and test-set reports
    train                    fine-tuning: the question generator, the citation model, the
                             evidence extractor
    evaluate | testset | generate
                             evaluations by concern (retrieval, citations, attribution,
                             sufficiency, comparison), the test-set store, the QA generation funnel
    judges                   judge contract, calibration, gates, the judges themselves
    ingest | index | embed | llm | quality
                             parsers per format and chunking, search indices, embedders, LLM
                             backends and client, GX suites as code
    models                   the one local model cache and S3 mirror (every model kind)
    storage                  metadata DB, artifact store, the s3:// URI parser
    artifact_keys | summaries
                             every key of the artifact store; the typed summaries each step hands
                             on and the report and CLI read
    config | paths | evaluation_records
                             settings, shipped paths, evaluation results as data
    records | text | languages | progress | input_files | config_checks | failures
                             typed records and closed vocabularies, text normalisation, progress
                             events, reading user files safely, checks on what users configure
                             (unknown keys, bad YAML), when a step's model calls mostly failed
    jsonsafe | redact | stats | library_logs | hardware
                             strict JSON: no NaN leaves the process, undefined values with
                             reasons; credentials in URLs hidden before anything is written;
                             intervals valid at their n and the power behind every MDE; third-
                             party log chatter kept out of task logs; whether the CPU computes
                             in bf16

dags/ and plugins/ are Airflow adapters outside the package: airflow.sdk plus
ragtrail.pipeline / paths / records only (tests/dags checks them); the reports view's web app
(plugins/ragtrail_reports_app.py) also imports FastAPI, the API server's authentication,
ragtrail.report.catalog* and ragtrail.runtime.

An upper layer adds to a lower one by registration, never by the lower layer importing it (e.g.
``ragtrail.train`` registers the ``generator:`` spec with :func:`ragtrail.llm.register_llm_backend`).
The core package never imports Airflow.
"""

__version__ = "0.1.0"
