"""A whole ingest in one process (``ragtrail ingest``, the in-process nightly): plan, every
shard, finalize; a run that raises closes its snapshot as failed."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ragtrail.pipeline.ingest.finalize import IngestSummary, finalize_ingest
from ragtrail.pipeline.ingest.plan import plan_ingest
from ragtrail.pipeline.ingest.shard import Progress, ingest_shard
from ragtrail.runtime import Runtime
from ragtrail.storage.corpus_store import (
    FAILED,
    SnapshotOwner,
)

log = logging.getLogger(__name__)


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
    detail = f"{type(exc).__name__}: {exc}"
    try:
        rt.store.close_snapshot(snapshot_id, status=FAILED, detail=detail)
    except Exception:  # never mask the original error
        log.exception("could not mark snapshot %s failed", snapshot_id)
