"""The plan step of an ingest: list and hash the source, diff it against the last published
snapshot, refuse a mass removal, claim the corpus's ingest lock with a running snapshot and write
its manifest. Nothing is parsed yet."""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ragtrail.artifact_keys import manifest_key
from ragtrail.index.analysis import ANALYSIS_VERSION
from ragtrail.ingest.sources import iter_source
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import (
    ChangeKind,
    QuarantineReason,
    QuarantineRecord,
    sha256_bytes,
)
from ragtrail.runtime import Runtime
from ragtrail.storage.corpus_store import (
    COMPLETE,
    SnapshotOwner,
    SnapshotRecord,
)
from ragtrail.storage.metadata_store import MetadataStore

log = logging.getLogger(__name__)


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
    language: str = "und"


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
                doc_id,
                row.version,
                row.content_hash,
                row.raw_hash,
                row.first_snapshot_id,
                row.language,
            )
        elif rec is not None and rec.content_hash is not None:
            out[doc_id] = PublishedDocument(
                doc_id,
                rec.version or row.version,
                rec.content_hash,
                None,
                row.first_snapshot_id,
                rec.language,
            )
    for doc_id, rec in recorded.items():
        if doc_id not in out and rec.content_hash is not None:
            out[doc_id] = PublishedDocument(
                doc_id, rec.version or 1, rec.content_hash, None, None, rec.language
            )
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
    previous_manifest = _manifest(rt, previous)
    languages = _language_settings(rt)
    # The language setting or the analysis changed (or the corpus predates languages): every
    # document is read again; the shards re-index those whose language comes out different.
    reread = previous_manifest is not None and previous_manifest.get("languages") != languages
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
            elif base.raw_hash == raw_hash and not reread:
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
        and previous_manifest is not None
        and not reread
        and table_is_published
        and _same_as_snapshot(rt, previous, previous_manifest, source_uri, files, skipped)
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
        rt.embedder_identity,
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
            "language": published[doc_id].language,
        }
        for doc_id in sorted(
            [f["rel_path"] for f in files if f["planned"] == ChangeKind.UNCHANGED.value] + kept
        )
    ]
    removed_rows = [
        {
            "doc_id": d,
            "change": ChangeKind.REMOVED.value,
            "content_hash": None,
            "version": None,
            "language": published[d].language,
        }
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
        "embedding_model": rt.embedder_identity,
        "index_backend": settings.index_backend,
        "languages": languages,
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


def _language_settings(rt: Runtime) -> JsonObject:
    """What decides each document's language and its analysis, as the manifest records it."""
    return {"setting": rt.settings.ingest.language, "analysis_version": ANALYSIS_VERSION}


def _manifest(rt: Runtime, snapshot: SnapshotRecord | None) -> JsonObject | None:
    """The manifest a snapshot was planned with (None without a snapshot or a stored manifest)."""
    if snapshot is None:
        return None
    key = manifest_key(snapshot.corpus, snapshot.snapshot_id)
    if not rt.artifacts.exists(key):
        return None
    manifest: JsonObject = json.loads(rt.artifacts.get_bytes(key))
    return manifest


def _same_as_snapshot(
    rt: Runtime,
    snapshot: SnapshotRecord,
    manifest: JsonObject,
    source_uri: str,
    files: list[JsonObject],
    skipped: Sequence[QuarantineRecord],
) -> bool:
    """True when ``files`` are exactly the files (paths relative to the source, and bytes) the
    snapshot was built from, with the same embedding model and index backend, and the listing
    skipped the same entries for the same reasons.

    Where the source lives does not count: the same files copied or mounted elsewhere are the
    same corpus (document ids are relative paths), so they make no new snapshot and no
    regeneration; the move is logged."""
    settings = rt.settings
    if (snapshot.embedding_model, snapshot.index_backend) != (
        rt.embedder_identity,
        settings.index_backend,
    ):
        return False
    if manifest.get("skipped", []) != _skipped_entries(skipped):
        return False
    before = sorted((f["rel_path"], f["raw_hash"]) for f in manifest["files"])
    if before != sorted((f["rel_path"], f["raw_hash"]) for f in files):
        return False
    if snapshot.source_uri != source_uri:
        log.info(
            "source moved from %s to %s with the same files: snapshot %s stands",
            snapshot.source_uri,
            source_uri,
            snapshot.snapshot_id,
        )
    return True
