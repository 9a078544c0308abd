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

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from ragtrail.artifact_keys import manifest_key, shard_counts_prefix
from ragtrail.ingest.chunk import chunk_document
from ragtrail.ingest.formats.common import QuarantineError
from ragtrail.ingest.loaders import parse_document
from ragtrail.ingest.sources import iter_source, read_source_file
from ragtrail.jsonsafe import JsonObject
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
from ragtrail.redact import redact
from ragtrail.runtime import Runtime
from ragtrail.storage.corpus_store import (
    COMPLETE,
    FAILED,
    RUNNING,
    IngestLockedError,
    SnapshotClosedError,
    SnapshotOwner,
    SnapshotRecord,
    check_open,
)
from ragtrail.storage.db import utcnow
from ragtrail.storage.metadata_store import MetadataStore

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

Progress = Callable[[int], None]
log = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 30.0
"""A shard reports that its ingest is alive at most this often while it parses files."""


class MassRemovalError(ValueError):
    """The ingest would remove more of the corpus than ``ingest.max_removal_share`` allows."""


@dataclass(frozen=True)
class PublishedDocument:
    """A document as the last published (complete) snapshot of its corpus holds it.

    ``raw_hash`` is None when the documents table no longer holds that version (an ingest that
    was never published overwrote it): the file is then processed again whatever its bytes.
    """

    doc_id: str
    version: int
    content_hash: str
    raw_hash: str | None
    first_snapshot_id: str | None


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

    def as_dict(self) -> JsonObject:
        return asdict(self)


def new_snapshot_id() -> str:
    """Sortable, unique snapshot id: UTC timestamp plus a random suffix."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def _shards(paths: Sequence[str], size: int) -> list[list[str]]:
    return [list(paths[i : i + size]) for i in range(0, len(paths), size)]


def published_documents(store: MetadataStore, corpus: str) -> dict[str, PublishedDocument]:
    """The documents of the corpus's last published snapshot: the baseline every diff is made
    against, so that documents a never-published (killed) ingest wrote count as new again.

    A row of the documents table is the published version when a complete snapshot last changed
    it, or when the latest complete snapshot recorded exactly its version and text. A document
    the latest complete snapshot holds in another version than the table has no raw hash.
    """
    latest = store.latest_snapshot(corpus)
    if latest is None:
        return {}
    complete = {s.snapshot_id for s in store.list_snapshots(corpus) if s.status == COMPLETE}
    recorded = {
        r.doc_id: r
        for r in store.get_snapshot_documents(latest.snapshot_id)
        if r.change != ChangeKind.REMOVED.value and r.content_hash is not None
    }
    out: dict[str, PublishedDocument] = {}
    for doc_id, row in store.get_documents(corpus).items():
        rec = recorded.get(doc_id)
        same = rec is not None and (rec.version, rec.content_hash) == (
            row.version,
            row.content_hash,
        )
        if row.last_changed_snapshot_id in complete or same:
            out[doc_id] = PublishedDocument(
                doc_id, row.version, row.content_hash, row.raw_hash, row.first_snapshot_id
            )
        elif rec is not None and rec.content_hash is not None:
            out[doc_id] = PublishedDocument(
                doc_id, rec.version or row.version, rec.content_hash, None, row.first_snapshot_id
            )
    for doc_id, rec in recorded.items():
        if doc_id not in out and rec.content_hash is not None:
            out[doc_id] = PublishedDocument(doc_id, rec.version or 1, rec.content_hash, None, None)
    return out


def _warn_abandoned(abandoned: Iterable[SnapshotRecord]) -> None:
    for snapshot in abandoned:
        log.warning(
            "snapshot %s of corpus %r was left running: marked abandoned (%s); its documents "
            "count as new or changed again",
            snapshot.snapshot_id,
            snapshot.corpus,
            snapshot.status_detail,
        )


def _kept_for(doc_id: str, skipped: Sequence[QuarantineRecord]) -> bool:
    """Whether a skipped entry names ``doc_id``: the file itself, or a folder holding it."""
    return any(
        r.rel_path == doc_id or (r.rel_path.endswith("/") and doc_id.startswith(r.rel_path))
        for r in skipped
    )


def _check_removals(
    rt: Runtime,
    source_uri: str,
    corpus: str,
    *,
    removed: int,
    published: int,
    listed: int,
    previous: SnapshotRecord | None,
    allowed: bool,
) -> None:
    """Raise :class:`MassRemovalError` when removing ``removed`` of ``published`` documents is
    more than ``ingest.max_removal_share`` (or is all of them) and nobody allowed it."""
    limit = rt.settings.ingest.max_removal_share
    if allowed or not removed or not published:
        return
    if removed < published and removed / published <= limit:
        return
    what = "every document it has" if removed == published else f"more than {limit:.0%}"
    live = f"snapshot {previous.snapshot_id} stays live" if previous else "nothing is live"
    raise MassRemovalError(
        f"ingest of corpus {corpus!r} stopped: it would remove {removed} of {published} "
        f"documents ({removed / published:.0%}, {what}); the source {source_uri} lists "
        f"{listed} files. Is it empty, unmounted or the wrong one? Nothing was changed and "
        f"{live}. Pass --allow-mass-removal (DAG Param allow_mass_removal) or set "
        "ingest.allow_mass_removal to proceed"
    )


def plan_ingest(
    rt: Runtime,
    source_uri: str,
    corpus: str,
    *,
    shard_size: int = 25,
    snapshot_id: str | None = None,
    allow_mass_removal: bool = False,
    owner: SnapshotOwner | None = None,
) -> IngestPlan:
    """Diff the source against the corpus's published snapshot, claim the corpus's ingest lock
    and record the snapshot's manifest.

    Raises :class:`MassRemovalError` (see :func:`_check_removals`) and
    :class:`~ragtrail.storage.corpus_store.IngestLockedError` before writing anything. ``owner``
    (default: this process, holding the whole run) identifies the run in the lock.
    """
    if shard_size < 1:
        raise ValueError("shard_size must be >= 1")
    store, settings = rt.store, rt.settings
    owner = owner or SnapshotOwner.this_process()
    stale_after = timedelta(seconds=settings.ingest.stale_after_s)
    store.ensure_corpus(corpus)
    _warn_abandoned(store.settle_running_snapshots(corpus, owner, stale_after))
    previous = store.latest_snapshot(corpus)
    published = published_documents(store, corpus)
    in_table = set(store.get_documents(corpus))

    files: list[JsonObject] = []
    first_path_by_hash: dict[str, str] = {}
    duplicates: list[QuarantineRecord] = []
    skipped: list[QuarantineRecord] = []
    for src in iter_source(
        source_uri, s3_endpoint_url=settings.s3_endpoint_url, on_skip=skipped.append
    ):
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
            base = published.get(src.rel_path)
            if base is None:
                entry["planned"] = ChangeKind.ADDED.value
            elif base.raw_hash == raw_hash:
                entry["planned"] = ChangeKind.UNCHANGED.value
            else:
                entry["planned"] = ChangeKind.UPDATED.value
        files.append(entry)

    listed = {f["rel_path"] for f in files if f["planned"] != "quarantined"}
    # A published document the source could not read this time keeps its published version.
    kept = sorted(
        d
        for d, base in published.items()
        if d not in listed and base.raw_hash is not None and _kept_for(d, skipped)
    )
    removed = sorted(set(published) - listed - set(kept))
    _check_removals(
        rt,
        source_uri,
        corpus,
        removed=len(removed),
        published=len(published),
        listed=len(files),
        previous=previous,
        allowed=allow_mass_removal or settings.ingest.allow_mass_removal,
    )
    table_is_published = in_table == set(published) and all(
        p.raw_hash is not None for p in published.values()
    )
    if (
        previous is not None
        and table_is_published
        and _same_as_snapshot(rt, previous, source_uri, files, skipped)
    ):
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
    abandoned = store.claim_snapshot(
        snapshot_id,
        corpus,
        source_uri,
        previous.snapshot_id if previous else None,
        settings.embedding_model,
        settings.index_backend,
        owner=owner,
        stale_after=stale_after,
    )
    _warn_abandoned(abandoned)
    index = rt.index(corpus)
    store.heartbeat_snapshot(
        snapshot_id, index_name=index.begin_snapshot(snapshot_id) or index.name
    )
    unchanged_rows = [
        {
            "doc_id": doc_id,
            "change": ChangeKind.UNCHANGED.value,
            "content_hash": published[doc_id].content_hash,
            "version": published[doc_id].version,
        }
        for doc_id in sorted(
            [f["rel_path"] for f in files if f["planned"] == ChangeKind.UNCHANGED.value] + kept
        )
    ]
    removed_rows = [
        {"doc_id": d, "change": ChangeKind.REMOVED.value, "content_hash": None, "version": None}
        for d in removed
    ]
    store.record_snapshot_documents(snapshot_id, unchanged_rows + removed_rows)
    store.record_quarantine(corpus, snapshot_id, duplicates + skipped)

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
        "skipped": _skipped_entries(skipped),
        "kept": kept,
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


def _skipped_entries(skipped: Sequence[QuarantineRecord]) -> list[dict[str, str]]:
    """The manifest's record of the entries the listing skipped (sorted, for comparisons)."""
    return sorted(
        ({"rel_path": r.rel_path, "reason": str(r.reason)} for r in skipped),
        key=lambda e: (e["rel_path"], e["reason"]),
    )


def _same_as_snapshot(
    rt: Runtime,
    snapshot: SnapshotRecord,
    source_uri: str,
    files: list[JsonObject],
    skipped: Sequence[QuarantineRecord],
) -> bool:
    """True when ``files`` are exactly the files (paths and bytes) the snapshot was built from,
    read from the same source with the same embedding model and index backend, and the listing
    skipped the same entries for the same reasons."""
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
    if manifest.get("skipped", []) != _skipped_entries(skipped):
        return False
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
) -> JsonObject:
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


def _open_snapshot(rt: Runtime, snapshot_id: str) -> SnapshotRecord:
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
    snapshot = _open_snapshot(rt, snapshot_id)
    published = published_documents(store, corpus)
    in_table = store.get_documents(corpus)
    index = rt.index(corpus)
    index.begin_snapshot(snapshot_id, resume=True)
    embedder = rt.cached_embedder
    encoded_before = embedder.encoded

    parsed: list[tuple[SourceFile, ParsedDocument, list[Chunk]]] = []
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
        elif (
            base is not None
            and base.raw_hash is not None
            and base.content_hash == (result.content_hash)
        ):
            # Bytes changed but the normalised text did not (e.g. a re-saved file).
            snapshot_rows.append(
                {
                    "doc_id": rel_path,
                    "change": ChangeKind.UNCHANGED.value,
                    "content_hash": base.content_hash,
                    "version": base.version,
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
                not_ingested(rel_path)
        if progress:
            progress(1)

    all_chunks = [c for _, _, chunks in parsed for c in chunks]
    vectors = (
        embedder.encode_chunks([c.index_text() for c in all_chunks])
        if all_chunks
        else np.zeros((0, rt.embedder.dim), dtype=np.float32)
    )
    store.heartbeat_snapshot(snapshot_id)  # still ours? Nothing is written if it was abandoned
    if parsed:
        index.upsert_documents([doc.doc_id for _, doc, _ in parsed], all_chunks, vectors)
        index.commit()
    for src, doc, chunks in parsed:
        base = published.get(doc.doc_id)
        version = 1 if base is None else base.version + 1
        first = snapshot_id if base is None else (base.first_snapshot_id or snapshot_id)
        row = in_table.get(doc.doc_id)
        if base is None and row is not None:
            log.info("%s was written by a snapshot never published: counted as added", doc.doc_id)
        store.upsert_document(
            corpus,
            _document_row(doc, src, chunks, version, first, snapshot_id),
            chunk_rows(chunks),
        )
        snapshot_rows.append(
            {
                "doc_id": doc.doc_id,
                "change": (ChangeKind.ADDED if base is None else ChangeKind.UPDATED).value,
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

    Documents that are in the table but not in this snapshot (left by an ingest that was never
    published) are dropped with the removals, without being counted as removed. With
    ``changed=False`` (the plan found the source unchanged and reused ``snapshot_id``) nothing
    is written: the summary reports every document as unchanged and nothing embedded. An
    abandoned or failed snapshot is refused (:class:`SnapshotClosedError`).
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
    snapshot = _open_snapshot(rt, snapshot_id)
    changes = store.get_snapshot_documents(snapshot_id)
    removed = sorted(r.doc_id for r in changes if r.change == ChangeKind.REMOVED.value)
    if snapshot.status != COMPLETE:  # a retried finalize after success changes nothing
        index = rt.index(corpus)
        index.begin_snapshot(snapshot_id, resume=True)
        kept = {r.doc_id for r in changes if r.change != ChangeKind.REMOVED.value}
        leftovers = sorted(set(store.get_documents(corpus)) - kept - set(removed))
        if leftovers:
            log.info(
                "dropping %d documents no published snapshot holds (left by an abandoned run)",
                len(leftovers),
            )
        doomed = removed + leftovers
        if doomed:
            index.delete_documents(doomed)
            index.commit()
            store.delete_documents(corpus, doomed)
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
    allow_mass_removal: bool = False,
) -> IngestSummary:
    """The whole ingest in process (CLI); Airflow and the nightly run the same three steps as
    tasks. This process owns the snapshot from plan to finalize: if it dies the next ingest
    abandons the snapshot at once, and if a step raises the snapshot is closed as failed."""
    owner = SnapshotOwner.this_process()
    plan = plan_ingest(
        rt,
        source_uri,
        corpus,
        shard_size=shard_size,
        allow_mass_removal=allow_mass_removal,
        owner=owner,
    )
    try:
        total = sum(len(s) for s in plan.shards)
        progress = progress_factory(total) if progress_factory else None
        for shard in plan.shards:
            ingest_shard(rt, corpus, plan.snapshot_id, shard, progress=progress)
        return finalize_ingest(rt, corpus, plan.snapshot_id, changed=plan.changed)
    except BaseException as exc:
        if plan.changed:
            _close_failed(rt, plan.snapshot_id, exc)
        raise


def _close_failed(rt: Runtime, snapshot_id: str, exc: BaseException) -> None:
    """Close a running snapshot as failed with the error (best effort: the error is what the
    user must see, not a second one from the database)."""
    detail = redact(f"{type(exc).__name__}: {exc}")[:2000]  # e.g. an S3 endpoint's URL
    try:
        rt.store.close_snapshot(snapshot_id, status=FAILED, detail=detail)
    except Exception:  # never mask the original error
        log.exception("could not mark snapshot %s failed", snapshot_id)
