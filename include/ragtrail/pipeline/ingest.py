"""Incremental corpus ingestion: plan -> shards -> finalize.

The three steps map one-to-one onto Airflow tasks (the shard step is mapped), and the CLI runs them in
process. Every step is idempotent, and the write order makes a killed run recoverable:

1. ``plan_ingest`` lists the source, hashes every file, diffs it against the documents table and
   writes the snapshot manifest. Nothing is parsed yet.
2. ``ingest_shard`` parses, chunks and embeds the added/updated files of one shard, writes them to the
   index and commits it, and only then records them in the metadata DB. A crash between the two leaves
   documents the DB does not know about; the next run sees them as new and upserts them again, which
   replaces (never duplicates) their chunks.
3. ``finalize_ingest`` removes deleted documents, reconciles the index with the DB (the DB is the
   source of truth) and closes the snapshot with its counts.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from ragtrail.artifact_keys import manifest_key, shard_counts_prefix
from ragtrail.ingest.chunk import chunk_document
from ragtrail.ingest.formats.common import QuarantineError
from ragtrail.ingest.loaders import parse_document
from ragtrail.ingest.sources import iter_source, read_source_file
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
from ragtrail.storage.corpus_store import SnapshotRecord
from ragtrail.storage.db import utcnow

Progress = Callable[[int], None]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestPlan:
    """The snapshot to fill and the shards of changed files.

    ``changed`` is False when the source is byte-for-byte what the latest complete snapshot was
    built from (same files, embedding model and index backend): then no snapshot is started,
    ``snapshot_id`` is that latest snapshot and there are no shards.
    """

    snapshot_id: str
    corpus: str
    source_uri: str
    shards: list[list[str]]
    manifest_uri: str
    counts: dict[str, int]
    changed: bool = True


@dataclass
class IngestSummary:
    """What the ``--json`` output and the corpus Asset event carry."""

    snapshot: str
    corpus: str
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    quarantined: int = 0
    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    manifest_uri: str = ""
    changed: bool = True
    changed_doc_ids: list[str] = field(default_factory=list)
    removed_doc_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def new_snapshot_id() -> str:
    """Sortable, unique snapshot id: UTC timestamp plus a random suffix."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def _shards(paths: Sequence[str], size: int) -> list[list[str]]:
    return [list(paths[i : i + size]) for i in range(0, len(paths), size)]


def plan_ingest(
    rt: Runtime,
    source_uri: str,
    corpus: str,
    *,
    shard_size: int = 25,
    snapshot_id: str | None = None,
) -> IngestPlan:
    """Diff the source against the corpus and record the snapshot's manifest."""
    if shard_size < 1:
        raise ValueError("shard_size must be >= 1")
    store, settings = rt.store, rt.settings
    store.ensure_corpus(corpus)
    previous = store.latest_snapshot(corpus)
    known = store.get_documents(corpus)

    files: list[dict[str, Any]] = []
    first_path_by_hash: dict[str, str] = {}
    duplicates: list[QuarantineRecord] = []
    for src in iter_source(source_uri, s3_endpoint_url=settings.s3_endpoint_url):
        raw_hash = sha256_bytes(src.data)
        entry = {"rel_path": src.rel_path, "raw_hash": raw_hash, "size": src.size}
        original = first_path_by_hash.get(raw_hash)
        if original is not None and src.size > 0:
            entry["planned"] = "quarantined"
            duplicates.append(
                QuarantineRecord(
                    uri=src.uri,
                    rel_path=src.rel_path,
                    reason=QuarantineReason.DUPLICATE_CONTENT,
                    detail=f"same bytes as {original}",
                    content_hash=raw_hash,
                )
            )
        else:
            first_path_by_hash.setdefault(raw_hash, src.rel_path)
            row = known.get(src.rel_path)
            if row is None:
                entry["planned"] = ChangeKind.ADDED.value
            elif row.raw_hash == raw_hash:
                entry["planned"] = ChangeKind.UNCHANGED.value
            else:
                entry["planned"] = ChangeKind.UPDATED.value
        files.append(entry)

    listed = {f["rel_path"] for f in files if f["planned"] != "quarantined"}
    removed = sorted(set(known) - listed)
    if previous is not None and _same_as_snapshot(rt, previous, source_uri, files):
        log.info("source unchanged since snapshot %s: no new snapshot", previous.snapshot_id)
        return IngestPlan(
            snapshot_id=previous.snapshot_id,
            corpus=corpus,
            source_uri=source_uri,
            shards=[],
            manifest_uri=rt.artifacts.uri_for(manifest_key(corpus, previous.snapshot_id)),
            counts={"unchanged": len(files)},
            changed=False,
        )

    snapshot_id = snapshot_id or new_snapshot_id()
    index = rt.index(corpus)
    index_name = index.begin_snapshot(snapshot_id) or index.name
    store.start_snapshot(
        snapshot_id,
        corpus,
        source_uri,
        previous.snapshot_id if previous else None,
        settings.embedding_model,
        settings.index_backend,
        index_name,
    )
    unchanged_rows = [
        {
            "doc_id": f["rel_path"],
            "change": ChangeKind.UNCHANGED.value,
            "content_hash": known[f["rel_path"]].content_hash,
            "version": known[f["rel_path"]].version,
        }
        for f in files
        if f["planned"] == ChangeKind.UNCHANGED.value
    ]
    removed_rows = [
        {"doc_id": d, "change": ChangeKind.REMOVED.value, "content_hash": None, "version": None}
        for d in removed
    ]
    store.record_snapshot_documents(snapshot_id, unchanged_rows + removed_rows)
    store.record_quarantine(corpus, snapshot_id, duplicates)

    to_process = sorted(f["rel_path"] for f in files if f["planned"] in {"added", "updated"})
    counts = dict(Counter(f["planned"] for f in files))
    counts["removed"] = len(removed)
    manifest = {
        "snapshot_id": snapshot_id,
        "corpus": corpus,
        "source_uri": source_uri,
        "parent_snapshot_id": previous.snapshot_id if previous else None,
        "embedding_model": settings.embedding_model,
        "index_backend": settings.index_backend,
        "files": files,
        "removed": removed,
    }
    manifest_uri = rt.artifacts.put_bytes(
        manifest_key(corpus, snapshot_id), json.dumps(manifest, indent=1, sort_keys=True).encode()
    )
    return IngestPlan(
        snapshot_id=snapshot_id,
        corpus=corpus,
        source_uri=source_uri,
        shards=_shards(to_process, shard_size),
        manifest_uri=manifest_uri,
        counts=counts,
    )


def _same_as_snapshot(
    rt: Runtime, snapshot: SnapshotRecord, source_uri: str, files: list[dict[str, Any]]
) -> bool:
    """True when ``files`` are exactly the files (paths and bytes) the snapshot was built from,
    read from the same source with the same embedding model and index backend."""
    settings = rt.settings
    if (snapshot.source_uri, snapshot.embedding_model, snapshot.index_backend) != (
        source_uri,
        settings.embedding_model,
        settings.index_backend,
    ):
        return False
    key = manifest_key(snapshot.corpus, snapshot.snapshot_id)
    if not rt.artifacts.exists(key):
        return False
    manifest = json.loads(rt.artifacts.get_bytes(key))
    before = sorted((f["rel_path"], f["raw_hash"]) for f in manifest["files"])
    return before == sorted((f["rel_path"], f["raw_hash"]) for f in files)


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
) -> dict[str, Any]:
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
        "doc_metadata": doc.metadata,
        "first_snapshot_id": first,
        "last_changed_snapshot_id": sid,
        "updated_at": utcnow(),
    }


def chunk_rows(chunks: Sequence[Chunk]) -> list[dict[str, Any]]:
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


def ingest_shard(
    rt: Runtime,
    corpus: str,
    snapshot_id: str,
    rel_paths: Sequence[str],
    *,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Parse, chunk, embed and index one shard of added/updated files. Safe to retry."""
    store = rt.store
    snapshot = store.get_snapshot(snapshot_id)
    if snapshot is None:
        raise ValueError(f"unknown snapshot {snapshot_id!r}: run plan_ingest first")
    known = store.get_documents(corpus)
    index = rt.index(corpus)
    index.begin_snapshot(snapshot_id, resume=True)
    embedder = rt.cached_embedder
    encoded_before = embedder.encoded

    parsed: list[tuple[SourceFile, ParsedDocument, list[Chunk]]] = []
    quarantined: list[QuarantineRecord] = []
    snapshot_rows: list[dict[str, Any]] = []
    for rel_path in rel_paths:
        src = read_source_file(
            snapshot.source_uri, rel_path, s3_endpoint_url=rt.settings.s3_endpoint_url
        )
        if src is None:  # deleted since planning: the next ingest records it as removed
            log.warning("%s vanished since the snapshot was planned; skipped", rel_path)
            continue
        result = _parse(rt, src)
        if isinstance(result, QuarantineRecord):
            quarantined.append(result)
        else:
            old = known.get(rel_path)
            if old is not None and old.content_hash == result.content_hash:
                # Bytes changed but the normalised text did not (e.g. a re-saved file).
                snapshot_rows.append(
                    {
                        "doc_id": rel_path,
                        "change": ChangeKind.UNCHANGED.value,
                        "content_hash": old.content_hash,
                        "version": old.version,
                    }
                )
            else:
                chunks = chunk_document(result, embedder.tokenizer, rt.settings.chunking)
                if chunks:
                    parsed.append((src, result, chunks))
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
        if progress:
            progress(1)

    all_chunks = [c for _, _, chunks in parsed for c in chunks]
    vectors = (
        embedder.encode_chunks([c.index_text() for c in all_chunks])
        if all_chunks
        else np.zeros((0, rt.embedder.dim), dtype=np.float32)
    )
    if parsed:
        index.upsert_documents([doc.doc_id for _, doc, _ in parsed], all_chunks, vectors)
        index.commit()
    for src, doc, chunks in parsed:
        old = known.get(doc.doc_id)
        version = 1 if old is None else old.version + 1
        first = snapshot_id if old is None else old.first_snapshot_id
        store.upsert_document(
            corpus,
            _document_row(doc, src, chunks, version, first, snapshot_id),
            chunk_rows(chunks),
        )
        snapshot_rows.append(
            {
                "doc_id": doc.doc_id,
                "change": (ChangeKind.ADDED if old is None else ChangeKind.UPDATED).value,
                "content_hash": doc.content_hash,
                "version": version,
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


def _embedded_in_snapshot(rt: Runtime, corpus: str, snapshot_id: str) -> int:
    """Chunks embedded by the snapshot's shards (a retried shard counts once, as it last ran)."""
    keys = rt.artifacts.list(shard_counts_prefix(corpus, snapshot_id))
    return sum(int(json.loads(rt.artifacts.get_bytes(key))["embedded"]) for key in keys)


def _reconcile_index(rt: Runtime, corpus: str) -> dict[str, int]:
    """Make the index hold exactly the DB's documents (after a crash or a removal)."""
    index = rt.index(corpus)
    db_docs = set(rt.store.get_documents(corpus))
    in_index = index.document_ids()
    extra = sorted(in_index - db_docs)
    missing = sorted((db_docs - in_index) | (index.docs_to_repair() & db_docs))
    if extra:
        index.delete_documents(extra)
    if missing:
        chunks = [
            row.to_chunk() for doc_id in missing for row in rt.store.get_chunks(corpus, doc_id)
        ]
        vectors = rt.cached_embedder.encode_chunks([c.index_text() for c in chunks])
        index.upsert_documents(missing, chunks, vectors)
    if extra or missing:
        index.commit()
    return {"removed_from_index": len(extra), "restored_to_index": len(missing)}


def finalize_ingest(
    rt: Runtime, corpus: str, snapshot_id: str, *, changed: bool = True
) -> IngestSummary:
    """Apply removals, reconcile index and DB, and close the snapshot with its counts.

    With ``changed=False`` (the plan found the source unchanged and reused ``snapshot_id``) nothing
    is written: the summary reports every document as unchanged and nothing embedded.
    """
    store = rt.store
    snapshot = store.get_snapshot(snapshot_id)
    if snapshot is None:
        raise ValueError(f"unknown snapshot {snapshot_id!r}")
    if not changed:
        documents = store.count_documents(corpus)
        return IngestSummary(
            snapshot=snapshot_id,
            corpus=corpus,
            unchanged=documents,
            quarantined=len(store.list_quarantine(corpus, snapshot_id)),
            documents=documents,
            chunks=store.count_chunks(corpus),
            manifest_uri=rt.artifacts.uri_for(manifest_key(corpus, snapshot_id)),
            changed=False,
        )
    changes = store.get_snapshot_documents(snapshot_id)
    removed = sorted(r.doc_id for r in changes if r.change == ChangeKind.REMOVED.value)
    if snapshot.status != "complete":  # a retried finalize after success changes nothing
        index = rt.index(corpus)
        index.begin_snapshot(snapshot_id, resume=True)
        if removed:
            index.delete_documents(removed)
            index.commit()
            store.delete_documents(corpus, removed)
        _reconcile_index(rt, corpus)
        index.publish()

    by_change = Counter(r.change for r in changes)
    quarantined = store.list_quarantine(corpus, snapshot_id)
    summary = IngestSummary(
        snapshot=snapshot_id,
        corpus=corpus,
        added=by_change[ChangeKind.ADDED.value],
        updated=by_change[ChangeKind.UPDATED.value],
        unchanged=by_change[ChangeKind.UNCHANGED.value],
        removed=len(removed),
        quarantined=len(quarantined),
        documents=store.count_documents(corpus),
        chunks=store.count_chunks(corpus),
        embedded=_embedded_in_snapshot(rt, corpus, snapshot_id),
        manifest_uri=rt.artifacts.uri_for(manifest_key(corpus, snapshot_id)),
        changed_doc_ids=sorted(
            r.doc_id
            for r in changes
            if r.change in {ChangeKind.ADDED.value, ChangeKind.UPDATED.value}
        ),
        removed_doc_ids=removed,
    )
    counts = {
        k: getattr(summary, k) for k in ("added", "updated", "unchanged", "removed", "quarantined")
    }
    counts.update(n_documents=summary.documents, n_chunks=summary.chunks)
    store.finish_snapshot(
        snapshot_id, status="complete", counts=counts, manifest_uri=summary.manifest_uri
    )
    return summary


def ingest(
    rt: Runtime,
    source_uri: str,
    corpus: str,
    *,
    shard_size: int = 25,
    progress_factory: Callable[[int], Progress] | None = None,
) -> IngestSummary:
    """The whole ingest in process (CLI, nightly); Airflow runs the same three steps as tasks."""
    plan = plan_ingest(rt, source_uri, corpus, shard_size=shard_size)
    total = sum(len(s) for s in plan.shards)
    progress = progress_factory(total) if progress_factory else None
    for shard in plan.shards:
        ingest_shard(rt, corpus, plan.snapshot_id, shard, progress=progress)
    return finalize_ingest(rt, corpus, plan.snapshot_id, changed=plan.changed)
