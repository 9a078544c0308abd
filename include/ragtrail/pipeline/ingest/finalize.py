"""The finalize step of an ingest: remove deleted documents (and what a never-published snapshot
left behind), reconcile the index with the DB and close the snapshot with its counts."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from ragtrail.artifact_keys import manifest_key, shard_counts_prefix
from ragtrail.jsonsafe import JsonObject
from ragtrail.pipeline.ingest.shard import open_snapshot
from ragtrail.records import ChangeKind
from ragtrail.runtime import Runtime
from ragtrail.storage.corpus_store import COMPLETE, SnapshotRecord
from ragtrail.storage.document_store import SnapshotDocumentRecord

log = logging.getLogger(__name__)


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


def _embedded_in_snapshot(rt: Runtime, corpus: str, snapshot_id: str) -> int:
    """Chunks embedded by the snapshot's shards (a retried shard counts once, as it last ran)."""
    keys = rt.artifacts.list(shard_counts_prefix(corpus, snapshot_id))
    return sum(int(json.loads(rt.artifacts.get_bytes(key))["embedded"]) for key in keys)


def _carried_over_from_another_embedder(
    rt: Runtime, snapshot: SnapshotRecord, changes: Sequence[SnapshotDocumentRecord]
) -> set[str]:
    """Documents the snapshot carries over unchanged although its embedder (model, backend,
    precision) differs from its parent's: their vectors must be made again, so that one index
    never mixes two embedders' vectors."""
    parent = (
        rt.store.get_snapshot(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    )
    if parent is None or parent.embedding_model == snapshot.embedding_model:
        return set()
    carried = {r.doc_id for r in changes if r.change == ChangeKind.UNCHANGED.value}
    log.info(
        "the embedder changed from %s to %s: re-embedding the %d unchanged documents",
        parent.embedding_model,
        snapshot.embedding_model,
        len(carried),
    )
    return carried


def _reconcile_index(rt: Runtime, corpus: str, reembed: set[str]) -> int:
    """Make the index hold exactly the DB's documents (after a crash or a removal), and index
    ``reembed`` again from their stored chunks. Returns the number of chunks embedded."""
    index = rt.index(corpus)
    documents = rt.store.get_documents(corpus)
    db_docs = set(documents)
    in_index = index.document_ids()
    extra = sorted(in_index - db_docs)
    missing = sorted((db_docs - in_index) | ((index.docs_to_repair() | reembed) & db_docs))
    if extra:
        index.delete_documents(extra)
    embedder = rt.cached_embedder
    encoded_before = embedder.encoded
    if missing:
        chunks = [
            row.to_chunk(documents[doc_id].language)
            for doc_id in missing
            for row in rt.store.get_chunks(corpus, doc_id)
        ]
        vectors = embedder.encode_chunks([c.index_text() for c in chunks])
        index.upsert_documents(missing, chunks, vectors)
    if extra or missing:
        index.commit()
    return embedder.encoded - encoded_before


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
    snapshot = open_snapshot(rt, snapshot_id)
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
        reembedded = _reconcile_index(
            rt, corpus, _carried_over_from_another_embedder(rt, snapshot, changes)
        )
        index.publish()
    else:
        reembedded = 0

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
        embedded=_embedded_in_snapshot(rt, corpus, snapshot_id) + reembedded,
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
