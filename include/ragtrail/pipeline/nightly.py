"""The nightly job in process: the same steps the DAGs run, in DAG order, on one Runtime."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragtrail.pipeline.evaluate import evaluate_retrieval, publish_retrieval_report, report_dir
from ragtrail.pipeline.generate import GenerationRequest, check_testset_quality, generate_testset
from ragtrail.pipeline.ingest import Progress, ingest
from ragtrail.pipeline.quality import check_corpus_quality
from ragtrail.runtime import Runtime
from ragtrail.storage.db import utcnow


@dataclass
class NightlyResult:
    run_id: str
    ingest: dict[str, Any]
    corpus_quality: dict[str, Any]
    generation: dict[str, Any] | None
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
    generate: bool = True,
) -> NightlyResult:
    """ingest -> corpus GX -> test-set generation + GX -> retrieval evaluation -> report.

    With ``generate=False`` (or when generation accepts nothing) retrieval is evaluated on the
    given QA set file, by default the hand-written sample set.
    """
    run_id = run_id or f"nightly-{utcnow():%Y%m%dT%H%M%S}"
    log(f"[1/5] ingest {source} into corpus {corpus!r}")
    summary = ingest(rt, source, corpus, progress_factory=progress_factory)
    log(
        f"      added={summary.added} updated={summary.updated} unchanged={summary.unchanged} "
        f"removed={summary.removed} quarantined={summary.quarantined} chunks={summary.chunks}"
    )
    log("[2/5] corpus quality (Great Expectations)")
    corpus_quality = check_corpus_quality(rt, corpus, summary.snapshot)
    quality = list(corpus_quality["validations"])
    generation = None
    if generate:
        log(f"[3/5] test-set generation with {rt.settings.generation.llm}")
        generation = generate_testset(
            rt, GenerationRequest(corpus=corpus, run_id=run_id, snapshot_id=summary.snapshot)
        )
        log(
            f"      version {generation['version']}: accepted {generation['accepted']}, "
            f"model calls {generation['model_calls']}, cache hits {generation['cache_hits']}"
        )
        if generation["version"]:
            quality += check_testset_quality(rt, generation, report_dir(rt, run_id))
            qa_set = f"testset:{generation['version']}"
    else:
        log("[3/5] test-set generation skipped")
    log(f"[4/5] retrieval evaluation per label x text weight on {qa_set or 'the sample QA set'}")
    evaluation = evaluate_retrieval(
        rt, corpus, run_id=run_id, qa_set=qa_set, snapshot_id=summary.snapshot
    )
    log("[5/5] report")
    report = publish_retrieval_report(rt, run_id, extra_quality=quality, generation=generation)
    return NightlyResult(run_id, summary.as_dict(), corpus_quality, generation, evaluation, report)
