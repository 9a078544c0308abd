"""The shard step of an ingest: parse, chunk and embed one shard's added or updated files, write
them to the index, commit it, then record them in the metadata DB (the order that makes a killed
run recoverable)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ragtrail.artifact_keys import shard_counts_prefix
from ragtrail.ingest.chunk import chunk_document
from ragtrail.ingest.formats.common import QuarantineError
from ragtrail.ingest.loaders import parse_document
from ragtrail.ingest.sources import read_source_file
from ragtrail.jsonsafe import JsonObject
from ragtrail.languages import LIBRARY, LanguageGuess, detect_language
from ragtrail.pipeline.ingest.plan import published_documents
from ragtrail.records import (
    ChangeKind,
    Chunk,
    ParsedDocument,
    QuarantineReason,
    QuarantineRecord,
    SourceFile,
    sha256_bytes,
    sha256_text,
)
from ragtrail.runtime import Runtime
from ragtrail.storage.corpus_store import (
    RUNNING,
    SnapshotRecord,
    check_open,
)
from ragtrail.storage.db import utcnow

log = logging.getLogger(__name__)


Progress = Callable[[int], None]


HEARTBEAT_EVERY_S = 30.0
"""A shard reports that its ingest is alive at most this often while it parses files."""


def _parse(rt: Runtime, src: SourceFile) -> ParsedDocument | QuarantineRecord:
    try:
        return parse_document(src, max_bytes=rt.settings.max_file_bytes)
    except QuarantineError as exc:
        return QuarantineRecord(
            uri=src.uri,
            rel_path=src.rel_path,
            reason=exc.reason,
            detail=exc.detail,
            content_hash=sha256_bytes(src.data),
        )


def _document_row(
    doc: ParsedDocument,
    src: SourceFile,
    chunks: Sequence[Chunk],
    version: int,
    first: str,
    sid: str,
    language: LanguageGuess,
) -> JsonObject:
    detection = {
        "code": language.code,
        "confidence": language.confidence,
        "method": language.method,
        "detector": LIBRARY,
    }
    return {
        "doc_id": doc.doc_id,
        "uri": doc.uri,
        "format": doc.format.value,
        "title": doc.title,
        "content_hash": doc.content_hash,
        "raw_hash": sha256_bytes(src.data),
        "version": version,
        "size_bytes": src.size,
        "n_chunks": len(chunks),
        "doc_metadata": {**doc.metadata, "language": detection},
        "language": language.code,
        "first_snapshot_id": first,
        "last_changed_snapshot_id": sid,
        "updated_at": utcnow(),
    }


def chunk_rows(chunks: Sequence[Chunk]) -> list[JsonObject]:
    return [
        {
            "chunk_id": c.chunk_id,
            "doc_id": c.doc_id,
            "ordinal": c.ordinal,
            "text": c.text,
            "headings": list(c.headings),
            "kind": c.kind,
            "n_tokens": c.n_tokens,
            "content_hash": c.content_hash,
        }
        for c in chunks
    ]


def open_snapshot(rt: Runtime, snapshot_id: str) -> SnapshotRecord:
    """The snapshot a shard or finalize step works on, after a heartbeat; refuses an unknown,
    abandoned or failed one (:class:`SnapshotClosedError`)."""
    snapshot = rt.store.get_snapshot(snapshot_id)
    if snapshot is None:
        raise ValueError(f"unknown snapshot {snapshot_id!r}: run plan_ingest first")
    check_open(snapshot)
    if snapshot.status == RUNNING:
        rt.store.heartbeat_snapshot(snapshot_id)
    return snapshot


def ingest_shard(
    rt: Runtime,
    corpus: str,
    snapshot_id: str,
    rel_paths: Sequence[str],
    *,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Parse, chunk, embed and index one shard of added/updated files. Safe to retry.

    Changes are relative to the published snapshot (:func:`published_documents`). A file that
    cannot be used this time (quarantined, vanished, unreadable) keeps its published version when
    the documents table still holds it, and is recorded as removed when it does not.
    """
    store = rt.store
    snapshot = open_snapshot(rt, snapshot_id)
    published = published_documents(store, corpus)
    in_table = store.get_documents(corpus)
    index = rt.index(corpus)
    index.begin_snapshot(snapshot_id, resume=True)
    embedder = rt.cached_embedder
    encoded_before = embedder.encoded

    parsed: list[tuple[SourceFile, ParsedDocument, list[Chunk], LanguageGuess]] = []
    quarantined: list[QuarantineRecord] = []
    snapshot_rows: list[dict[str, Any]] = []

    def not_ingested(rel_path: str) -> None:
        """Keep the published version of a file that could not be used, or record it removed."""
        base = published.get(rel_path)
        if base is None:
            return  # never published: finalize drops what an abandoned run left of it
        kept = base.raw_hash is not None
        snapshot_rows.append(
            {
                "doc_id": rel_path,
                "change": (ChangeKind.UNCHANGED if kept else ChangeKind.REMOVED).value,
                "content_hash": base.content_hash if kept else None,
                "version": base.version if kept else None,
                "language": base.language,
            }
        )

    last_beat = time.monotonic()
    for rel_path in rel_paths:
        if time.monotonic() - last_beat > HEARTBEAT_EVERY_S:
            store.heartbeat_snapshot(snapshot_id)
            last_beat = time.monotonic()
        src = read_source_file(
            snapshot.source_uri,
            rel_path,
            s3_endpoint_url=rt.settings.s3_endpoint_url,
            on_skip=quarantined.append,
        )
        if src is None:  # vanished or unreadable since the snapshot was planned
            log.warning("%s could not be read since the snapshot was planned; skipped", rel_path)
            not_ingested(rel_path)
            if progress:
                progress(1)
            continue
        result = _parse(rt, src)
        base = published.get(rel_path)
        if isinstance(result, QuarantineRecord):
            quarantined.append(result)
            not_ingested(rel_path)
            if progress:
                progress(1)
            continue
        language = detect_language(result.text, configured=rt.settings.ingest.language)
        if (
            base is not None
            and base.raw_hash is not None
            and base.content_hash == result.content_hash
            and base.language == language.code
        ):
            # Bytes changed but the normalised text and its language did not (a re-saved file).
            snapshot_rows.append(
                {
                    "doc_id": rel_path,
                    "change": ChangeKind.UNCHANGED.value,
                    "content_hash": base.content_hash,
                    "version": base.version,
                    "language": base.language,
                }
            )
        else:
            chunks = chunk_document(result, embedder.tokenizer, rt.settings.chunking, language.code)
            if chunks:
                parsed.append((src, result, chunks, language))
            else:
                quarantined.append(
                    QuarantineRecord(
                        uri=src.uri,
                        rel_path=rel_path,
                        reason=QuarantineReason.NO_TEXT,
                        detail="parsed but produced no chunks",
                        content_hash=sha256_bytes(src.data),
                    )
                )
                not_ingested(rel_path)
        if progress:
            progress(1)

    all_chunks = [c for _, _, chunks, _ in parsed for c in chunks]
    vectors = (
        embedder.encode_chunks([c.index_text() for c in all_chunks])
        if all_chunks
        else np.zeros((0, rt.embedder.dim), dtype=np.float32)
    )
    store.heartbeat_snapshot(snapshot_id)  # still ours? Nothing is written if it was abandoned
    if parsed:
        index.upsert_documents([doc.doc_id for _, doc, _, _ in parsed], all_chunks, vectors)
        index.commit()
    for src, doc, chunks, language in parsed:
        base = published.get(doc.doc_id)
        version = 1 if base is None else base.version + 1
        first = snapshot_id if base is None else (base.first_snapshot_id or snapshot_id)
        row = in_table.get(doc.doc_id)
        if base is None and row is not None:
            log.info("%s was written by a snapshot never published: counted as added", doc.doc_id)
        store.upsert_document(
            corpus,
            _document_row(doc, src, chunks, version, first, snapshot_id, language),
            chunk_rows(chunks),
        )
        snapshot_rows.append(
            {
                "doc_id": doc.doc_id,
                "change": (ChangeKind.ADDED if base is None else ChangeKind.UPDATED).value,
                "content_hash": doc.content_hash,
                "version": version,
                "language": language.code,
            }
        )
    store.record_snapshot_documents(snapshot_id, snapshot_rows)
    store.record_quarantine(corpus, snapshot_id, quarantined)
    counts = {
        "documents": len(parsed),
        "chunks": len(all_chunks),
        "quarantined": len(quarantined),
        "embedded": embedder.encoded - encoded_before,
    }
    # Keyed by the shard's files: a retried shard overwrites its own counts instead of adding.
    shard_key = sha256_text("\n".join(sorted(rel_paths)))[:16]
    rt.artifacts.put_bytes(
        f"{shard_counts_prefix(corpus, snapshot_id)}{shard_key}.json", json.dumps(counts).encode()
    )
    return counts
