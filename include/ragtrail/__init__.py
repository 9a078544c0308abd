"""ragtrail: keeps RAG systems honest every night.

Layering (top to bottom; a module imports only from its own package and from lower layers;
packages joined by ``|`` are siblings that do not import each other). `make lint` enforces it
with import-linter (``[tool.importlinter]`` in pyproject.toml)::

    dags/, plugins/          Airflow adapters, outside the package: airflow.sdk plus
                             ragtrail.pipeline / paths / records only (tests/dags checks them)
    cli                      the command line
    pipeline                 one definition of the night: steps, tasks, quality gates
    runtime                  composition root: builds the configured backends lazily, and
                             imports what registers itself (train -> the generator: LLM kind)
    report                   HTML evaluation and test-set reports
    evaluate | testset | generate | train
                             retrieval metrics, test-set store/dedup/quotas/export, the QA
                             generation funnel, fine-tuning of the small generator
    ingest | index | embed | llm | quality
                             loaders/chunking, search indices, embedders, LLM backends and
                             client, GX suites as code
    models                   the one local model cache and S3 mirror (every model kind)
    storage                  metadata DB, artifact store, the s3:// URI parser
    config | paths | jsonsafe | text | records
                             settings, shipped paths, strict JSON, text normalisation, records
                             and closed vocabularies

An upper layer adds to a lower one by registration, never by the lower layer importing it (e.g.
``ragtrail.train`` registers the ``generator:`` spec with :func:`ragtrail.llm.register_llm_backend`).
The core package never imports Airflow.
"""

__version__ = "0.1.0"
