"""Documents, their chunks, and each snapshot's change log of documents, as typed records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.engine import RowMapping

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import Chunk
from ragtrail.storage import tables as t
from ragtrail.storage.corpus_store import ensure_corpus
from ragtrail.storage.db import utcnow, write_transaction
from ragtrail.storage.sql import (
    BATCH_SIZE,
    SqlStore,
    as_dict,
    batches,
    checked_row,
    count_in_corpus,
    insert,
    upsert,
)


@dataclass(frozen=True)
class DocumentRecord:
    """One row of ``documents``: the current version of a source document."""

    corpus: str
    doc_id: str
    uri: str
    format: str
    title: str
    content_hash: str
    raw_hash: str
    version: int
    size_bytes: int
    n_chunks: int
    doc_metadata: JsonObject
    first_snapshot_id: str
    last_changed_snapshot_id: str
    updated_at: datetime
    language: str = "und"

    @classmethod
    def from_row(cls, row: RowMapping) -> DocumentRecord:
        return cls(**as_dict(row))


@dataclass(frozen=True)
class ChunkRecord:
    """One row of ``chunks``; ``headings`` is the heading path, outermost first."""

    corpus: str
    chunk_id: str
    doc_id: str
    ordinal: int
    text: str
    headings: tuple[str, ...]
    kind: str
    n_tokens: int
    content_hash: str

    def to_chunk(self, language: str) -> Chunk:
        """The stored chunk as the pipeline's record (e.g. to re-index or re-embed it), in its
        document's ``language``."""
        return Chunk(
            chunk_id=self.chunk_id,
            doc_id=self.doc_id,
            ordinal=self.ordinal,
            text=self.text,
            headings=self.headings,
            n_tokens=self.n_tokens,
            kind=self.kind,
            language=language,
        )

    @classmethod
    def from_row(cls, row: RowMapping) -> ChunkRecord:
        values = dict(row)
        values["headings"] = tuple(values["headings"] or ())
        return cls(**values)


@dataclass(frozen=True)
class SnapshotDocumentRecord:
    """One row of ``snapshot_documents``: what a snapshot did to one document."""

    snapshot_id: str
    doc_id: str
    change: str  # added | updated | unchanged | removed
    content_hash: str | None
    version: int | None
    language: str = "und"

    @classmethod
    def from_row(cls, row: RowMapping) -> SnapshotDocumentRecord:
        return cls(**dict(row))


class DocumentStore(SqlStore):
    """Documents, chunks and snapshot change logs in the metadata database."""

    def get_documents(self, corpus: str) -> dict[str, DocumentRecord]:
        """Every document of ``corpus`` as doc_id -> record."""
        d = t.documents
        with self.engine.connect() as conn:
            rows = conn.execute(select(d).where(d.c.corpus == corpus)).mappings()
            return {r["doc_id"]: DocumentRecord.from_row(r) for r in rows}

    def count_documents(self, corpus: str) -> int:
        return count_in_corpus(self.engine, t.documents, corpus)

    def upsert_document(
        self, corpus: str, doc_row: Mapping[str, Any], chunk_rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Insert or replace one document and all of its chunks, atomically.

        ``doc_row`` holds the documents columns (``corpus`` is filled in; ``updated_at`` defaults to
        now and ``n_chunks`` to ``len(chunk_rows)``). Each chunk row holds the chunks columns
        (``corpus`` and ``doc_id`` are filled in). The document's previous chunks are deleted.
        """
        doc = checked_row(t.documents, doc_row, corpus=corpus)
        doc.setdefault("updated_at", utcnow())
        doc.setdefault("n_chunks", len(chunk_rows))
        doc_id = doc["doc_id"]
        chunks = [checked_row(t.chunks, c, corpus=corpus, doc_id=doc_id) for c in chunk_rows]
        c = t.chunks
        with write_transaction(self.engine) as conn:
            ensure_corpus(conn, corpus)
            upsert(conn, t.documents, [doc], ["corpus", "doc_id"])
            conn.execute(delete(c).where(c.c.corpus == corpus, c.c.doc_id == doc_id))
            insert(conn, t.chunks, chunks)

    def delete_documents(self, corpus: str, doc_ids: Iterable[str]) -> int:
        """Delete documents and their chunks in one transaction; returns documents deleted."""
        d, c = t.documents, t.chunks
        deleted = 0
        with write_transaction(self.engine) as conn:
            for batch in batches(list(dict.fromkeys(doc_ids)), BATCH_SIZE):
                conn.execute(delete(c).where(c.c.corpus == corpus, c.c.doc_id.in_(batch)))
                result = conn.execute(delete(d).where(d.c.corpus == corpus, d.c.doc_id.in_(batch)))
                deleted += result.rowcount
        return deleted

    def get_chunks(self, corpus: str, doc_id: str | None = None) -> list[ChunkRecord]:
        """Chunks of ``corpus`` (or of one document), ordered by doc_id then ordinal."""
        c = t.chunks
        query = select(c).where(c.c.corpus == corpus)
        if doc_id is not None:
            query = query.where(c.c.doc_id == doc_id)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(c.c.doc_id, c.c.ordinal)).mappings()
            return [ChunkRecord.from_row(r) for r in rows]

    def count_chunks(self, corpus: str) -> int:
        return count_in_corpus(self.engine, t.chunks, corpus)

    def get_chunk_texts(self, corpus: str, chunk_ids: Iterable[str]) -> dict[str, str]:
        """chunk_id -> text for the given ids; unknown ids are simply absent."""
        c = t.chunks
        out: dict[str, str] = {}
        with self.engine.connect() as conn:
            for batch in batches(list(dict.fromkeys(chunk_ids)), BATCH_SIZE):
                query = select(c.c.chunk_id, c.c.text).where(
                    c.c.corpus == corpus, c.c.chunk_id.in_(batch)
                )
                out.update({r.chunk_id: r.text for r in conn.execute(query)})
        return out

    # -- per-snapshot change log -----------------------------------------------------------

    def record_snapshot_documents(
        self, snapshot_id: str, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Upsert (snapshot_id, doc_id) -> change / content_hash / version rows."""
        checked = [checked_row(t.snapshot_documents, r, snapshot_id=snapshot_id) for r in rows]
        with write_transaction(self.engine) as conn:
            upsert(conn, t.snapshot_documents, checked, ["snapshot_id", "doc_id"])

    def get_snapshot_documents(self, snapshot_id: str) -> list[SnapshotDocumentRecord]:
        """The change log of one snapshot, ordered by doc_id."""
        sd = t.snapshot_documents
        query = select(sd).where(sd.c.snapshot_id == snapshot_id).order_by(sd.c.doc_id)
        with self.engine.connect() as conn:
            return [SnapshotDocumentRecord.from_row(r) for r in conn.execute(query).mappings()]
