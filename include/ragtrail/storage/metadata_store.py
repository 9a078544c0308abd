"""The metadata store: corpora, snapshots, documents, chunks, quarantine and caches.

Runs, metrics history and per-query results live in :mod:`ragtrail.storage.runs_store`.

:class:`SqlMetadataStore` implements :class:`MetadataStore` with SQLAlchemy Core on SQLite or
PostgreSQL. Every method runs in its own transaction, and the write methods are idempotent so that a
retried pipeline task leaves the same rows as a single successful one. Rows come back as plain
dicts keyed by column name; datetimes are always timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
from sqlalchemy import Connection, Engine, Table, delete, func, select, update
from sqlalchemy.engine import URL, RowMapping

from ragtrail.records import QuarantineRecord
from ragtrail.storage import tables as t
from ragtrail.storage.db import make_engine, upgrade, utcnow, write_transaction

Row = dict[str, Any]
T = TypeVar("T")

BATCH_SIZE = 500
"""Largest IN list / executemany batch sent in one statement."""

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

    def latest_snapshot(self, corpus: str, status: str | None = COMPLETE) -> Row | None: ...

    def get_snapshot(self, snapshot_id: str) -> Row | None: ...

    def list_snapshots(self, corpus: str) -> list[Row]: ...

    def get_documents(self, corpus: str) -> dict[str, Row]: ...

    def count_documents(self, corpus: str) -> int: ...

    def upsert_document(
        self, corpus: str, doc_row: Mapping[str, Any], chunk_rows: Sequence[Mapping[str, Any]]
    ) -> None: ...

    def delete_documents(self, corpus: str, doc_ids: Iterable[str]) -> int: ...

    def get_chunks(self, corpus: str, doc_id: str | None = None) -> list[Row]: ...

    def count_chunks(self, corpus: str) -> int: ...

    def get_chunk_texts(self, corpus: str, chunk_ids: Iterable[str]) -> dict[str, str]: ...

    def record_snapshot_documents(
        self, snapshot_id: str, rows: Sequence[Mapping[str, Any]]
    ) -> None: ...

    def get_snapshot_documents(self, snapshot_id: str) -> list[Row]: ...

    def record_quarantine(
        self, corpus: str, snapshot_id: str, records: Sequence[QuarantineRecord]
    ) -> None: ...

    def list_quarantine(self, corpus: str, snapshot_id: str | None = None) -> list[Row]: ...

    def get_cached_embeddings(
        self, model_id: str, content_hashes: Iterable[str]
    ) -> dict[str, np.ndarray]: ...

    def put_cached_embeddings(self, model_id: str, mapping: Mapping[str, np.ndarray]) -> None: ...


class SqlMetadataStore:
    """:class:`MetadataStore` on a SQLAlchemy engine (SQLite or PostgreSQL), Core only.

    The schema must already be migrated: use :meth:`from_url`, or call
    :func:`ragtrail.storage.db.upgrade` first.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def from_url(cls, url: str | URL, *, migrate: bool = True) -> SqlMetadataStore:
        """Open the database at ``url``, migrating it to the latest schema unless told not to."""
        engine = make_engine(url)
        if migrate:
            upgrade(engine)
        return cls(engine)

    # -- corpora and snapshots -------------------------------------------------------------

    def ensure_corpus(self, name: str) -> None:
        """Create the corpus row if it does not exist yet."""
        with write_transaction(self.engine) as conn:
            _ensure_corpus(conn, name)

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
            _ensure_corpus(conn, corpus)
            _upsert(conn, t.snapshots, [row], ["snapshot_id"], [c for c in row if c not in keep])
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
        values = {
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

    def latest_snapshot(self, corpus: str, status: str | None = COMPLETE) -> Row | None:
        """The most recently created snapshot of ``corpus`` with ``status`` (None: any status)."""
        with self.engine.connect() as conn:
            return _latest_snapshot(conn, corpus, status)

    def get_snapshot(self, snapshot_id: str) -> Row | None:
        s = t.snapshots
        with self.engine.connect() as conn:
            row = conn.execute(select(s).where(s.c.snapshot_id == snapshot_id)).mappings().first()
        return _as_dict(row) if row is not None else None

    def list_snapshots(self, corpus: str) -> list[Row]:
        """All snapshots of ``corpus``, newest first."""
        s = t.snapshots
        query = (
            select(s).where(s.c.corpus == corpus).order_by(s.c.created_at.desc(), s.c.snapshot_id)
        )
        with self.engine.connect() as conn:
            return [_as_dict(r) for r in conn.execute(query).mappings()]

    # -- documents and chunks --------------------------------------------------------------

    def get_documents(self, corpus: str) -> dict[str, Row]:
        """Every document of ``corpus`` as doc_id -> row."""
        d = t.documents
        with self.engine.connect() as conn:
            rows = conn.execute(select(d).where(d.c.corpus == corpus)).mappings()
            return {r["doc_id"]: _as_dict(r) for r in rows}

    def count_documents(self, corpus: str) -> int:
        return self._count(t.documents, corpus)

    def upsert_document(
        self, corpus: str, doc_row: Mapping[str, Any], chunk_rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Insert or replace one document and all of its chunks, atomically.

        ``doc_row`` holds the documents columns (``corpus`` is filled in; ``updated_at`` defaults to
        now and ``n_chunks`` to ``len(chunk_rows)``). Each chunk row holds the chunks columns
        (``corpus`` and ``doc_id`` are filled in). The document's previous chunks are deleted.
        """
        doc = _checked_row(t.documents, doc_row, corpus=corpus)
        doc.setdefault("updated_at", utcnow())
        doc.setdefault("n_chunks", len(chunk_rows))
        doc_id = doc["doc_id"]
        chunks = [_checked_row(t.chunks, c, corpus=corpus, doc_id=doc_id) for c in chunk_rows]
        c = t.chunks
        with write_transaction(self.engine) as conn:
            _ensure_corpus(conn, corpus)
            _upsert(conn, t.documents, [doc], ["corpus", "doc_id"])
            conn.execute(delete(c).where(c.c.corpus == corpus, c.c.doc_id == doc_id))
            _insert(conn, t.chunks, chunks)

    def delete_documents(self, corpus: str, doc_ids: Iterable[str]) -> int:
        """Delete documents and their chunks in one transaction; returns documents deleted."""
        d, c = t.documents, t.chunks
        deleted = 0
        with write_transaction(self.engine) as conn:
            for batch in _batches(list(dict.fromkeys(doc_ids)), BATCH_SIZE):
                conn.execute(delete(c).where(c.c.corpus == corpus, c.c.doc_id.in_(batch)))
                result = conn.execute(delete(d).where(d.c.corpus == corpus, d.c.doc_id.in_(batch)))
                deleted += result.rowcount
        return deleted

    def get_chunks(self, corpus: str, doc_id: str | None = None) -> list[Row]:
        """Chunks of ``corpus`` (or of one document), ordered by doc_id then ordinal."""
        c = t.chunks
        query = select(c).where(c.c.corpus == corpus)
        if doc_id is not None:
            query = query.where(c.c.doc_id == doc_id)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(c.c.doc_id, c.c.ordinal)).mappings()
            return [_as_dict(r) for r in rows]

    def count_chunks(self, corpus: str) -> int:
        return self._count(t.chunks, corpus)

    def get_chunk_texts(self, corpus: str, chunk_ids: Iterable[str]) -> dict[str, str]:
        """chunk_id -> text for the given ids; unknown ids are simply absent."""
        c = t.chunks
        out: dict[str, str] = {}
        with self.engine.connect() as conn:
            for batch in _batches(list(dict.fromkeys(chunk_ids)), BATCH_SIZE):
                query = select(c.c.chunk_id, c.c.text).where(
                    c.c.corpus == corpus, c.c.chunk_id.in_(batch)
                )
                out.update({r.chunk_id: r.text for r in conn.execute(query)})
        return out

    # -- per-snapshot change log and quarantine --------------------------------------------

    def record_snapshot_documents(
        self, snapshot_id: str, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Upsert (snapshot_id, doc_id) -> change / content_hash / version rows."""
        checked = [_checked_row(t.snapshot_documents, r, snapshot_id=snapshot_id) for r in rows]
        with write_transaction(self.engine) as conn:
            _upsert(conn, t.snapshot_documents, checked, ["snapshot_id", "doc_id"])

    def get_snapshot_documents(self, snapshot_id: str) -> list[Row]:
        """The change log of one snapshot, ordered by doc_id."""
        sd = t.snapshot_documents
        query = select(sd).where(sd.c.snapshot_id == snapshot_id).order_by(sd.c.doc_id)
        with self.engine.connect() as conn:
            return [_as_dict(r) for r in conn.execute(query).mappings()]

    def record_quarantine(
        self, corpus: str, snapshot_id: str, records: Sequence[QuarantineRecord]
    ) -> None:
        """Upsert quarantined files of a snapshot, keyed by (snapshot_id, rel_path)."""
        now = utcnow()
        rows = [
            {
                "corpus": corpus,
                "snapshot_id": snapshot_id,
                "rel_path": r.rel_path,
                "uri": r.uri,
                "reason": str(r.reason),
                "detail": r.detail,
                "content_hash": r.content_hash,
                "created_at": now,
            }
            for r in records
        ]
        updated = ["corpus", "uri", "reason", "detail", "content_hash"]
        with write_transaction(self.engine) as conn:
            _upsert(conn, t.quarantine, rows, ["snapshot_id", "rel_path"], updated)

    def list_quarantine(self, corpus: str, snapshot_id: str | None = None) -> list[Row]:
        """Quarantined files of one snapshot (default: the corpus's latest, any status)."""
        q = t.quarantine
        with self.engine.connect() as conn:
            if snapshot_id is None:
                latest = _latest_snapshot(conn, corpus, None)
                if latest is None:
                    return []
                snapshot_id = latest["snapshot_id"]
            query = (
                select(q)
                .where(q.c.corpus == corpus, q.c.snapshot_id == snapshot_id)
                .order_by(q.c.rel_path)
            )
            return [_as_dict(r) for r in conn.execute(query).mappings()]

    # -- embedding cache -------------------------------------------------------------------

    def get_cached_embeddings(
        self, model_id: str, content_hashes: Iterable[str]
    ) -> dict[str, np.ndarray]:
        """content_hash -> float32 vector for the cached hashes; misses are absent."""
        ec = t.embedding_cache
        out: dict[str, np.ndarray] = {}
        with self.engine.connect() as conn:
            for batch in _batches(list(dict.fromkeys(content_hashes)), BATCH_SIZE):
                query = select(ec.c.content_hash, ec.c.dim, ec.c.vector).where(
                    ec.c.model_id == model_id, ec.c.content_hash.in_(batch)
                )
                for r in conn.execute(query):
                    out[r.content_hash] = _decode_vector(r.vector, r.dim, r.content_hash)
        return out

    def put_cached_embeddings(self, model_id: str, mapping: Mapping[str, np.ndarray]) -> None:
        """Cache vectors as little-endian float32; hashes already cached are left untouched."""
        rows = []
        for content_hash, vector in mapping.items():
            arr = np.ascontiguousarray(vector, dtype="<f4")
            if arr.ndim != 1:
                raise ValueError(f"embedding for {content_hash} must be 1-D, got {arr.shape}")
            rows.append(
                {
                    "model_id": model_id,
                    "content_hash": content_hash,
                    "dim": int(arr.size),
                    "vector": arr.tobytes(),
                }
            )
        with write_transaction(self.engine) as conn:
            _upsert(conn, t.embedding_cache, rows, ["model_id", "content_hash"], [])

    # -- helpers ---------------------------------------------------------------------------

    def _count(self, table: Table, corpus: str) -> int:
        query = select(func.count()).select_from(table).where(table.c.corpus == corpus)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())


def _upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    key_cols: Sequence[str],
    update_cols: Sequence[str] | None = None,
) -> None:
    """Insert ``rows``, updating ``update_cols`` on a key conflict (default: all non-key columns;
    an empty list means "do nothing" on conflict). Later rows with the same key win.
    """
    uniform = _uniform_rows(rows)
    if not uniform:
        return
    deduped = list({tuple(r[k] for k in key_cols): r for r in uniform}.values())
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise NotImplementedError(f"upsert is not implemented for {conn.dialect.name}")
    stmt = insert(table)
    if update_cols is None:
        update_cols = [c for c in deduped[0] if c not in key_cols]
    if update_cols:
        stmt = stmt.on_conflict_do_update(
            index_elements=list(key_cols), set_={c: stmt.excluded[c] for c in update_cols}
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(key_cols))
    for batch in _batches(deduped, BATCH_SIZE):
        conn.execute(stmt, batch)


def _insert(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Plain batched insert of ``rows``."""
    for batch in _batches(_uniform_rows(rows), BATCH_SIZE):
        conn.execute(table.insert(), batch)


def _ensure_corpus(conn: Connection, name: str) -> None:
    _upsert(conn, t.corpora, [{"name": name, "created_at": utcnow()}], ["name"], [])


def _latest_snapshot(conn: Connection, corpus: str, status: str | None) -> Row | None:
    s = t.snapshots
    query = select(s).where(s.c.corpus == corpus)
    if status is not None:
        query = query.where(s.c.status == status)
    query = query.order_by(s.c.created_at.desc(), s.c.snapshot_id.desc()).limit(1)
    row = conn.execute(query).mappings().first()
    return _as_dict(row) if row is not None else None


def _checked_row(table: Table, row: Mapping[str, Any], **fixed: Any) -> Row:
    """Copy ``row``, reject unknown columns and set ``fixed`` columns (which must not disagree)."""
    out = dict(row)
    unknown = set(out) - set(table.c.keys())
    if unknown:
        raise ValueError(f"unknown {table.name} columns {sorted(unknown)}")
    for key, value in fixed.items():
        if out.get(key, value) != value:
            raise ValueError(f"{table.name} row has {key}={out[key]!r}, expected {value!r}")
        out[key] = value
    return out


def _uniform_rows(rows: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Give every row the same keys (missing ones become NULL) and plain values for enums."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return [{k: _plain(r.get(k)) for k in keys} for r in rows]


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _as_dict(row: RowMapping) -> Row:
    """A result row as a dict, with datetimes made timezone-aware UTC (SQLite drops the zone)."""
    return {k: _utc(v) if isinstance(v, datetime) else v for k, v in row.items()}


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _decode_vector(blob: bytes, dim: int, content_hash: str) -> np.ndarray:
    vector = np.frombuffer(blob, dtype="<f4")
    if vector.size != dim:
        raise ValueError(
            f"cached embedding {content_hash} has {vector.size} values, expected {dim}"
        )
    return vector.astype(np.float32)


def _batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
