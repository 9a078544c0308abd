"""Incremental corpus ingestion: plan -> shards -> finalize.

The three steps map one-to-one onto Airflow tasks (the shard step is mapped), and the CLI runs them in
process. Every step is idempotent, and the write order makes a killed run recoverable:

1. ``plan_ingest`` lists the source, hashes every file, diffs it against the last *published*
   (complete) snapshot, refuses a mass removal, claims the corpus's ingest lock by starting a
   running snapshot and writes the snapshot manifest. Nothing is parsed yet.
2. ``ingest_shard`` parses, chunks and embeds the added/updated files of one shard, writes them to the
   index and commits it, and only then records them in the metadata DB. A crash between the two leaves
   documents the DB does not know about; the next run sees them as new and upserts them again, which
   replaces (never duplicates) their chunks.
3. ``finalize_ingest`` removes deleted documents (and those a never-published snapshot left
   behind), reconciles the index with the DB (the DB is the source of truth) and closes the
   snapshot with its counts.

What an ingest refuses (README, "What ragtrail refuses and why"):

- **Mass removal.** A run that would remove more than ``ingest.max_removal_share`` of the
  published documents, or all of them, stops in the plan with :class:`MassRemovalError` before
  anything is written: an empty, unmounted or mistyped source must not empty the live corpus.
  ``allow_mass_removal`` (CLI ``--allow-mass-removal``, DAG Param, setting) lets it through.
- **A second ingest of the corpus** while one runs: the running snapshot is the lock
  (:mod:`ragtrail.storage.corpus_store`); the second plan raises
  :class:`~ragtrail.storage.corpus_store.IngestLockedError`. A snapshot whose ingest died is
  marked ``abandoned`` by the next plan, and its steps may no longer write
  (:class:`~ragtrail.storage.corpus_store.SnapshotClosedError`).

Counts are always relative to the last published snapshot: documents a killed (abandoned) run
wrote to the documents table count as added or updated again, never as unchanged.
"""

from ragtrail.pipeline.ingest.finalize import IngestSummary, finalize_ingest
from ragtrail.pipeline.ingest.plan import (
    IngestPlan,
    MassRemovalError,
    PublishedDocument,
    plan_ingest,
    published_documents,
)
from ragtrail.pipeline.ingest.run import ingest
from ragtrail.pipeline.ingest.shard import ingest_shard
from ragtrail.storage.corpus_store import IngestLockedError, SnapshotClosedError, SnapshotOwner

__all__ = [
    "IngestLockedError",
    "IngestPlan",
    "IngestSummary",
    "MassRemovalError",
    "PublishedDocument",
    "SnapshotClosedError",
    "SnapshotOwner",
    "finalize_ingest",
    "ingest",
    "ingest_shard",
    "plan_ingest",
    "published_documents",
]
