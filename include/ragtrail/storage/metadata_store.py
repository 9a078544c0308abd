"""The metadata store: one facade over every aggregate of the metadata database.

Each aggregate has its own module and store — corpora and snapshots
(:mod:`~ragtrail.storage.corpus_store`), documents, chunks and snapshot change logs
(:mod:`~ragtrail.storage.document_store`), quarantine (:mod:`~ragtrail.storage.quarantine_store`)
and the embedding cache (:mod:`~ragtrail.storage.embedding_cache`). :class:`SqlMetadataStore`
combines them (plus runs and metrics) so that one object on one engine serves the pipeline.
Every method runs in its own transaction, and the write methods are idempotent so that a retried
pipeline task leaves the same rows as a single successful one. Reads return frozen typed records
(runs and metrics: plain dicts keyed by column name); datetimes are always timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from sqlalchemy import delete, select, update

from ragtrail.records import QuarantineRecord
from ragtrail.storage import tables as t
from ragtrail.storage.corpus_store import (
    COMPLETE,
    FAILED,
    RUNNING,
    SNAPSHOT_COUNT_COLUMNS,
    SNAPSHOT_STATUSES,
    CorpusStore,
    SnapshotRecord,
)
from ragtrail.storage.db import utcnow
from ragtrail.storage.document_store import (
    ChunkRecord,
    DocumentRecord,
    DocumentStore,
    SnapshotDocumentRecord,
)
from ragtrail.storage.embedding_cache import SqlEmbeddingCache
from ragtrail.storage.quarantine_store import QuarantineEntry, QuarantineStore
from ragtrail.storage.sql import BATCH_SIZE, Row
from ragtrail.storage.sql import as_dict as _as_dict
from ragtrail.storage.sql import checked_row as _checked_row
from ragtrail.storage.sql import insert as _insert
from ragtrail.storage.sql import upsert as _upsert


@runtime_checkable
class MetadataStore(Protocol):
    """What the pipeline needs from the metadata database."""

    def ensure_corpus(self, name: str) -> None: ...

    def start_snapshot(
        self,
        snapshot_id: str,
        corpus: str,
        source_uri: str,
        parent_snapshot_id: str | None,
        embedding_model: str,
        index_backend: str,
        index_name: str | None,
    ) -> None: ...

    def finish_snapshot(
        self, snapshot_id: str, *, status: str, counts: Mapping[str, int], manifest_uri: str | None
    ) -> None: ...

    def latest_snapshot(
        self, corpus: str, status: str | None = COMPLETE
    ) -> SnapshotRecord | None: ...

    def get_snapshot(self, snapshot_id: str) -> SnapshotRecord | None: ...

    def list_snapshots(self, corpus: str) -> list[SnapshotRecord]: ...

    def get_documents(self, corpus: str) -> dict[str, DocumentRecord]: ...

    def count_documents(self, corpus: str) -> int: ...

    def upsert_document(
        self, corpus: str, doc_row: Mapping[str, Any], chunk_rows: Sequence[Mapping[str, Any]]
    ) -> None: ...

    def delete_documents(self, corpus: str, doc_ids: Iterable[str]) -> int: ...

    def get_chunks(self, corpus: str, doc_id: str | None = None) -> list[ChunkRecord]: ...

    def count_chunks(self, corpus: str) -> int: ...

    def get_chunk_texts(self, corpus: str, chunk_ids: Iterable[str]) -> dict[str, str]: ...

    def record_snapshot_documents(
        self, snapshot_id: str, rows: Sequence[Mapping[str, Any]]
    ) -> None: ...

    def get_snapshot_documents(self, snapshot_id: str) -> list[SnapshotDocumentRecord]: ...

    def record_quarantine(
        self, corpus: str, snapshot_id: str, records: Sequence[QuarantineRecord]
    ) -> None: ...

    def list_quarantine(
        self, corpus: str, snapshot_id: str | None = None
    ) -> list[QuarantineEntry]: ...

    def get_cached_embeddings(
        self, model_id: str, content_hashes: Iterable[str]
    ) -> dict[str, np.ndarray]: ...

    def put_cached_embeddings(self, model_id: str, mapping: Mapping[str, np.ndarray]) -> None: ...

    def start_run(self, run_id: str, kind: str, params: Mapping[str, Any]) -> None: ...

    def finish_run(self, run_id: str, status: str, report_uri: str | None = None) -> None: ...

    def get_run(self, run_id: str) -> Row | None: ...

    def replace_metrics(self, run_id: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def metrics_history(
        self, metric: str | None = None, label: str | None = None, limit: int = 10_000
    ) -> list[Row]: ...


class SqlMetadataStore(CorpusStore, DocumentStore, QuarantineStore, SqlEmbeddingCache):
    """:class:`MetadataStore` on a SQLAlchemy engine (SQLite or PostgreSQL), Core only.

    The schema must already be migrated: use :meth:`from_url`, or call
    :func:`ragtrail.storage.db.upgrade` first.
    """

    # -- runs and metrics ------------------------------------------------------------------

    def start_run(self, run_id: str, kind: str, params: Mapping[str, Any]) -> None:
        """Register a running run; starting it again resets it (retries are idempotent)."""
        row = {
            "run_id": run_id,
            "kind": kind,
            "status": RUNNING,
            "started_at": utcnow(),
            "finished_at": None,
            "params": dict(params),
            "report_uri": None,
        }
        with self.engine.begin() as conn:
            _upsert(conn, t.runs, [row], ["run_id"])

    def finish_run(self, run_id: str, status: str, report_uri: str | None = None) -> None:
        """Record a run's final status and report location; KeyError for an unknown run."""
        r = t.runs
        values = {"status": status, "finished_at": utcnow(), "report_uri": report_uri}
        with self.engine.begin() as conn:
            result = conn.execute(update(r).where(r.c.run_id == run_id).values(values))
            if result.rowcount == 0:
                raise KeyError(f"no run {run_id!r}")

    def get_run(self, run_id: str) -> Row | None:
        r = t.runs
        with self.engine.connect() as conn:
            row = conn.execute(select(r).where(r.c.run_id == run_id)).mappings().first()
        return _as_dict(row) if row is not None else None

    def replace_metrics(self, run_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Replace all metric points of ``run_id`` with ``rows`` in one transaction.

        Each row holds the metrics_history columns except ``id`` (``run_id`` is filled in,
        ``created_at`` defaults to now). (metric, label, text_weight) must be unique per run —
        checked here too, because the database does not enforce it when text_weight is NULL.
        """
        now = utcnow()
        checked = [_checked_row(t.metrics_history, r, run_id=run_id) for r in rows]
        seen: set[tuple[Any, ...]] = set()
        for row in checked:
            if "id" in row:
                raise ValueError("metric rows must not set 'id'")
            row.setdefault("created_at", now)
            key = (row.get("metric"), row.get("label"), row.get("text_weight"))
            if key in seen:
                raise ValueError(f"duplicate metric point {key} in run {run_id!r}")
            seen.add(key)
        m = t.metrics_history
        with self.engine.begin() as conn:
            conn.execute(delete(m).where(m.c.run_id == run_id))
            _insert(conn, m, checked)

    def metrics_history(
        self, metric: str | None = None, label: str | None = None, limit: int = 10_000
    ) -> list[Row]:
        """The most recent ``limit`` metric points (optionally one metric / label), oldest first."""
        m = t.metrics_history
        query = select(m)
        if metric is not None:
            query = query.where(m.c.metric == metric)
        if label is not None:
            query = query.where(m.c.label == label)
        query = query.order_by(m.c.created_at.desc(), m.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = [_as_dict(r) for r in conn.execute(query).mappings()]
        rows.reverse()
        return rows


__all__ = [
    "BATCH_SIZE",
    "COMPLETE",
    "FAILED",
    "RUNNING",
    "SNAPSHOT_COUNT_COLUMNS",
    "SNAPSHOT_STATUSES",
    "ChunkRecord",
    "DocumentRecord",
    "MetadataStore",
    "QuarantineEntry",
    "Row",
    "SnapshotDocumentRecord",
    "SnapshotRecord",
    "SqlMetadataStore",
]
