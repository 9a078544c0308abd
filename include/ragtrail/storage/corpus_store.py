"""Corpora and their snapshots (one ingest run of a corpus each), as :class:`SnapshotRecord`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, select, update
from sqlalchemy.engine import RowMapping

from ragtrail.storage import tables as t
from ragtrail.storage.db import utcnow, write_transaction
from ragtrail.storage.sql import Row, SqlStore, as_dict, upsert

RUNNING, COMPLETE, FAILED = "running", "complete", "failed"
SNAPSHOT_STATUSES = frozenset({RUNNING, COMPLETE, FAILED})
SNAPSHOT_COUNT_COLUMNS = (
    "added",
    "updated",
    "unchanged",
    "removed",
    "quarantined",
    "n_documents",
    "n_chunks",
)


@dataclass(frozen=True)
class SnapshotRecord:
    """One row of ``snapshots``; datetimes are timezone-aware UTC."""

    snapshot_id: str
    corpus: str
    parent_snapshot_id: str | None
    source_uri: str
    status: str  # running | complete | failed
    created_at: datetime
    finished_at: datetime | None
    added: int
    updated: int
    unchanged: int
    removed: int
    quarantined: int
    n_documents: int
    n_chunks: int
    embedding_model: str
    index_backend: str
    index_name: str | None
    manifest_uri: str | None

    @classmethod
    def from_row(cls, row: RowMapping) -> SnapshotRecord:
        return cls(**as_dict(row))


class CorpusStore(SqlStore):
    """Corpora and snapshots in the metadata database."""

    def ensure_corpus(self, name: str) -> None:
        """Create the corpus row if it does not exist yet."""
        with write_transaction(self.engine) as conn:
            ensure_corpus(conn, name)

    def start_snapshot(
        self,
        snapshot_id: str,
        corpus: str,
        source_uri: str,
        parent_snapshot_id: str | None,
        embedding_model: str,
        index_backend: str,
        index_name: str | None,
    ) -> None:
        """Register a running snapshot (creating the corpus if needed).

        Idempotent: starting an existing snapshot again resets it to running with zero counts and
        deletes its snapshot_documents and quarantine rows, so a retried task starts clean.
        """
        row: Row = {
            "snapshot_id": snapshot_id,
            "corpus": corpus,
            "parent_snapshot_id": parent_snapshot_id,
            "source_uri": source_uri,
            "status": RUNNING,
            "created_at": utcnow(),
            "finished_at": None,
            "embedding_model": embedding_model,
            "index_backend": index_backend,
            "index_name": index_name,
            "manifest_uri": None,
            **dict.fromkeys(SNAPSHOT_COUNT_COLUMNS, 0),
        }
        keep = {"snapshot_id", "created_at"}
        with write_transaction(self.engine) as conn:
            ensure_corpus(conn, corpus)
            upsert(conn, t.snapshots, [row], ["snapshot_id"], [c for c in row if c not in keep])
            sd, q = t.snapshot_documents, t.quarantine
            conn.execute(delete(sd).where(sd.c.snapshot_id == snapshot_id))
            conn.execute(delete(q).where(q.c.snapshot_id == snapshot_id))

    def finish_snapshot(
        self, snapshot_id: str, *, status: str, counts: Mapping[str, int], manifest_uri: str | None
    ) -> None:
        """Close a snapshot with its final status, counts and manifest location.

        ``counts`` may hold any of :data:`SNAPSHOT_COUNT_COLUMNS`; raises KeyError for an unknown
        snapshot and ValueError for an unknown status or count name.
        """
        if status not in SNAPSHOT_STATUSES:
            raise ValueError(f"unknown snapshot status {status!r}")
        unknown = set(counts) - set(SNAPSHOT_COUNT_COLUMNS)
        if unknown:
            raise ValueError(f"unknown snapshot counts {sorted(unknown)}")
        values: dict[str, Any] = {
            "status": status,
            "finished_at": utcnow(),
            "manifest_uri": manifest_uri,
            **{k: int(v) for k, v in counts.items()},
        }
        s = t.snapshots
        with write_transaction(self.engine) as conn:
            result = conn.execute(update(s).where(s.c.snapshot_id == snapshot_id).values(values))
            if result.rowcount == 0:
                raise KeyError(f"no snapshot {snapshot_id!r}")

    def latest_snapshot(self, corpus: str, status: str | None = COMPLETE) -> SnapshotRecord | None:
        """The most recently created snapshot of ``corpus`` with ``status`` (None: any status)."""
        with self.engine.connect() as conn:
            return latest_snapshot(conn, corpus, status)

    def get_snapshot(self, snapshot_id: str) -> SnapshotRecord | None:
        s = t.snapshots
        with self.engine.connect() as conn:
            row = conn.execute(select(s).where(s.c.snapshot_id == snapshot_id)).mappings().first()
        return SnapshotRecord.from_row(row) if row is not None else None

    def list_snapshots(self, corpus: str) -> list[SnapshotRecord]:
        """All snapshots of ``corpus``, newest first."""
        s = t.snapshots
        query = (
            select(s).where(s.c.corpus == corpus).order_by(s.c.created_at.desc(), s.c.snapshot_id)
        )
        with self.engine.connect() as conn:
            return [SnapshotRecord.from_row(r) for r in conn.execute(query).mappings()]


def ensure_corpus(conn: Connection, name: str) -> None:
    """Insert the corpus row unless it exists (inside the caller's transaction)."""
    upsert(conn, t.corpora, [{"name": name, "created_at": utcnow()}], ["name"], [])


def latest_snapshot(conn: Connection, corpus: str, status: str | None) -> SnapshotRecord | None:
    """The newest snapshot of ``corpus`` with ``status`` (None: any), read on ``conn``."""
    s = t.snapshots
    query = select(s).where(s.c.corpus == corpus)
    if status is not None:
        query = query.where(s.c.status == status)
    query = query.order_by(s.c.created_at.desc(), s.c.snapshot_id.desc()).limit(1)
    row = conn.execute(query).mappings().first()
    return SnapshotRecord.from_row(row) if row is not None else None
