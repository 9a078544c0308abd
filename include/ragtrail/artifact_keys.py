"""Every key under which ragtrail writes to the artifact store, in one place.

The artifact store (a local folder or an S3 prefix) is laid out as::

    corpora/<corpus>/snapshots/<snapshot>/manifest.json        what a snapshot holds (ingest plan)
    corpora/<corpus>/snapshots/<snapshot>/shards/<hash>.json   counts of one ingested shard
    corpora/<corpus>/snapshots/<snapshot>/quality/...          GX validations and Data Docs
    testsets/<corpus>/<version>/{items.parquet,items.jsonl,generation.json,quality.json}
    testsets/<corpus>/runs/<generation run>/plan.json          a generation run's shard plan
    golden/<corpus>/<name>/<version>/quality.json              a golden set's GX checks
    golden/<corpus>/evaluated/<snapshot>/<settings>.json       golden runs handed to the night
    runs/<run>/metrics.json                                    one evaluation run's summary
    runs/<run>/{retrieval_*,citation_queries,sufficiency_queries,evidence_queries}.parquet
    runs/<run>/{citations,sufficiency,selective_policy,evidence}.json
    runs/<night>/{citation_metrics,sufficiency_metrics,evidence_metrics}.json
                                                               the night's announced headlines
    runs/<run>/report/...                                      the HTML report and Data Docs
    judges/<judge>/<version>/<reference>.json                  one calibration's verdicts
    retrain/<run>/split.json                                   a retraining run's data split
    retrain/<run>/evidence_split.json                          ... of the evidence extractor
    <registry prefix>/<model>/{bundles,versions,mlflow}/...    the model registry

A reader who wants to know where something lives reads this module, and a writer who adds an
artifact adds its key here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ragtrail.paths import safe_name

# ------------------------------------------------------------------------------------ corpora


def snapshot_prefix(corpus: str, snapshot_id: str) -> str:
    return f"corpora/{corpus}/snapshots/{snapshot_id}"


def manifest_key(corpus: str, snapshot_id: str) -> str:
    """The ingest plan of a snapshot: every file with its hash and change kind."""
    return f"{snapshot_prefix(corpus, snapshot_id)}/manifest.json"


def shard_counts_prefix(corpus: str, snapshot_id: str) -> str:
    """Where each ingested shard leaves its counts (one JSON file per shard)."""
    return f"{snapshot_prefix(corpus, snapshot_id)}/shards/"


def corpus_quality_prefix(corpus: str, snapshot_id: str) -> str:
    """The snapshot's GX validations and Data Docs."""
    return f"{snapshot_prefix(corpus, snapshot_id)}/quality"


def corpus_quality_key(corpus: str, snapshot_id: str) -> str:
    return f"{corpus_quality_prefix(corpus, snapshot_id)}/validations.json"


# ---------------------------------------------------------------------------------- QA sets


def testset_prefix(corpus: str, version: str) -> str:
    """A generated test-set version: items (Parquet, JSONL), generation summary, GX checks."""
    return f"testsets/{corpus}/{version}"


def generation_summary_key(corpus: str, version: str) -> str:
    return f"{testset_prefix(corpus, version)}/generation.json"


def testset_quality_key(corpus: str, version: str) -> str:
    return f"{testset_prefix(corpus, version)}/quality.json"


def generation_draft_key(corpus: str, run_id: str, chunk_ids: Sequence[str]) -> str:
    """One shard's drafted candidates (statements and questions), read back by its judging."""
    shard = hashlib.sha256(",".join(chunk_ids).encode()).hexdigest()[:16]
    return f"testsets/{corpus}/runs/{run_id}/drafts/{shard}.json"


def generation_baseline_key(corpus: str, run_id: str) -> str:
    """The single-prompt baseline's items of one generation run (read back by its finalize)."""
    return f"testsets/{corpus}/runs/{run_id}/baseline.json"


def generation_plan_key(corpus: str, run_id: str) -> str:
    """The shard plan of one generation run (read back by its shards and its finalize step)."""
    return f"testsets/{corpus}/runs/{run_id}/plan.json"


def golden_quality_key(corpus: str, name: str, version: str) -> str:
    """The GX checks of one golden-set version, stored beside it when it is registered."""
    return f"golden/{corpus}/{name}/{version}/quality.json"


def golden_runs_key(corpus: str, snapshot_id: str, fingerprint: str) -> str:
    """The golden sets' runs evaluated on a snapshot with the settings ``fingerprint``, handed
    over to the night's evaluation (:class:`~ragtrail.summaries.qa_sets.GoldenRuns`)."""
    return f"golden/{corpus}/evaluated/{snapshot_id}/{fingerprint}.json"


def golden_started_key(corpus: str, snapshot_id: str, fingerprint: str) -> str:
    """The golden sets' runs an evaluation of a snapshot with the settings ``fingerprint`` has
    started (:class:`~ragtrail.summaries.qa_sets.GoldenRuns`), for the night's evaluation to
    wait for their hand-over."""
    return f"golden/{corpus}/evaluating/{snapshot_id}/{fingerprint}.json"


# ------------------------------------------------------------------------- evaluation runs


def run_prefix(run_id: str) -> str:
    return f"runs/{run_id}"


def run_summary_key(run_id: str) -> str:
    """A run's ``metrics.json``: a set's retrieval summary, or a night's document of all sets."""
    return f"{run_prefix(run_id)}/metrics.json"


def retrieval_table_key(run_id: str, table: str) -> str:
    """The retrieval scan's tables: ``metrics``, ``best`` and ``per_query``."""
    return f"{run_prefix(run_id)}/retrieval_{table}.parquet"


def citations_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/citations.json"


def citation_queries_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/citation_queries.parquet"


def sufficiency_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/sufficiency.json"


def sufficiency_queries_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/sufficiency_queries.parquet"


def evidence_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/evidence.json"


def evidence_queries_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/evidence_queries.parquet"


def selective_policy_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/selective_policy.json"


def headlines_key(night_run_id: str, document: str) -> str:
    """A night's announced headlines of every set (``citation_metrics``, ``sufficiency_metrics``)."""
    return f"{run_prefix(night_run_id)}/{document}.json"


def report_prefix(run_id: str) -> str:
    """The uploaded HTML report with its plots and Data Docs."""
    return f"{run_prefix(run_id)}/report"


# ------------------------------------------------------------------------ judges and models


def calibration_key(judge: str, version: str, reference: str) -> str:
    """The verdicts one judge version gave on one calibration reference."""
    return f"judges/{judge}/{version}/{reference.replace(':', '-')}.json"


def retrain_split_key(run_id: str) -> str:
    """A retraining run's split of the QA sets into training prompts and frozen mixtures."""
    return f"retrain/{run_id}/split.json"


def retrain_evidence_split_key(run_id: str) -> str:
    """A retraining run's split of the QA sets for the evidence extractor (by question and
    document) into training prompts and frozen gate items."""
    return f"retrain/{run_id}/evidence_split.json"


def registry_key(prefix: str, model: str, *parts: str) -> str:
    """A model registry's files: ``<prefix>/<model>/bundles/<digest>/...``,
    ``<prefix>/<model>/versions/<n>/{lineage.json,gates/...}``; ``model`` is made key-safe."""
    return "/".join([prefix, safe_name(model), *parts])


def bundle_key(prefix: str, digest: str) -> str:
    """One uploaded model bundle, addressed by the digest of its files."""
    return f"{prefix}/{digest}"
