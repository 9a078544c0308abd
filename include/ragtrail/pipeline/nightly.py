"""The nightly job in process: the same steps the DAGs run, in DAG order, on one Runtime."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragtrail.pipeline.evaluate import evaluate_retrieval, publish_retrieval_report
from ragtrail.pipeline.ingest import Progress, ingest
from ragtrail.pipeline.quality import check_corpus_quality
from ragtrail.runtime import Runtime
from ragtrail.storage.db import utcnow


@dataclass
class NightlyResult:
    run_id: str
    ingest: dict[str, Any]
    corpus_quality: dict[str, Any]
    evaluation: dict[str, Any]
    report: dict[str, Any]


def run_nightly(
    rt: Runtime,
    *,
    source: str,
    corpus: str,
    qa_set: str | Path | None = None,
    run_id: str | None = None,
    progress_factory: Callable[[int], Progress] | None = None,
    log: Callable[[str], None] = print,
) -> NightlyResult:
    """ingest -> corpus quality -> retrieval evaluation -> report."""
    run_id = run_id or f"nightly-{utcnow():%Y%m%dT%H%M%S}"
    log(f"[1/4] ingest {source} into corpus {corpus!r}")
    summary = ingest(rt, source, corpus, progress_factory=progress_factory)
    log(
        f"      added={summary.added} updated={summary.updated} unchanged={summary.unchanged} "
        f"removed={summary.removed} quarantined={summary.quarantined} chunks={summary.chunks}"
    )
    log("[2/4] corpus quality (Great Expectations)")
    corpus_quality = check_corpus_quality(rt, corpus, summary.snapshot)
    log(f"[3/4] retrieval evaluation per label x text weight (run {run_id})")
    evaluation = evaluate_retrieval(
        rt, corpus, run_id=run_id, qa_set=qa_set, snapshot_id=summary.snapshot
    )
    log("[4/4] report")
    report = publish_retrieval_report(rt, run_id, extra_quality=corpus_quality["validations"])
    return NightlyResult(run_id, summary.as_dict(), corpus_quality, evaluation, report)
