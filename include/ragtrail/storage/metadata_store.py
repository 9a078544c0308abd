"""The metadata store: one facade over every aggregate of the metadata database.

Each aggregate has its own module and store — corpora and snapshots
(:mod:`~ragtrail.storage.corpus_store`), documents, chunks and snapshot change logs
(:mod:`~ragtrail.storage.document_store`), quarantine (:mod:`~ragtrail.storage.quarantine_store`)
and the embedding cache (:mod:`~ragtrail.storage.embedding_cache`). :class:`SqlMetadataStore`
combines them so that one object on one engine serves the pipeline; runs, metrics history and
per-query results live in :mod:`ragtrail.storage.runs_store`.
Every method runs in its own transaction, and the write methods are idempotent so that a retried
pipeline task leaves the same rows as a single successful one. Reads return frozen typed records;
datetimes are always timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ragtrail.records import QuarantineRecord
from ragtrail.storage.corpus_store import (
    ABANDONED,
    COMPLETE,
    FAILED,
    RUNNING,
    SNAPSHOT_COUNT_COLUMNS,
    SNAPSHOT_STATUSES,
    CorpusStore,
    IngestLockedError,
    SnapshotClosedError,
    SnapshotOwner,
    SnapshotRecord,
)
from ragtrail.storage.document_store import (
    ChunkRecord,
    DocumentRecord,
    DocumentStore,
    SnapshotDocumentRecord,
)
from ragtrail.storage.embedding_cache import SqlEmbeddingCache
from ragtrail.storage.quarantine_store import QuarantineEntry, QuarantineStore
from ragtrail.storage.sql import BATCH_SIZE, Row


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

    def settle_running_snapshots(
        self, corpus: str, owner: SnapshotOwner, stale_after: timedelta
    ) -> list[SnapshotRecord]: ...

    def claim_snapshot(
        self,
        snapshot_id: str,
        corpus: str,
        source_uri: str,
        parent_snapshot_id: str | None,
        embedding_model: str,
        index_backend: str,
        *,
        owner: SnapshotOwner,
        stale_after: timedelta,
    ) -> list[SnapshotRecord]: ...

    def heartbeat_snapshot(self, snapshot_id: str, *, index_name: str | None = None) -> None: ...

    def close_snapshot(self, snapshot_id: str, *, status: str, detail: str) -> bool: ...

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


class SqlMetadataStore(CorpusStore, DocumentStore, QuarantineStore, SqlEmbeddingCache):
    """:class:`MetadataStore` on a SQLAlchemy engine (SQLite or PostgreSQL), Core only.

    The schema must already be migrated: use :meth:`from_url`, or call
    :func:`ragtrail.storage.db.upgrade` first.
    """


__all__ = [
    "ABANDONED",
    "BATCH_SIZE",
    "COMPLETE",
    "FAILED",
    "RUNNING",
    "SNAPSHOT_COUNT_COLUMNS",
    "SNAPSHOT_STATUSES",
    "ChunkRecord",
    "DocumentRecord",
    "IngestLockedError",
    "MetadataStore",
    "QuarantineEntry",
    "Row",
    "SnapshotClosedError",
    "SnapshotDocumentRecord",
    "SnapshotOwner",
    "SnapshotRecord",
    "SqlMetadataStore",
]
