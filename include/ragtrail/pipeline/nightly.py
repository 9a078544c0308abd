"""The nightly job in process: the flows of :data:`ragtrail.pipeline.night.NIGHT` on one Runtime.

Each flow is resolved from its Params and the event the previous flow announced, exactly as the
scheduler would resolve a DAG run triggered by that Asset event, so the in-process run and the
Airflow deployment execute the same steps with the same arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragtrail.pipeline.night import EVALUATE, GENERATE, INGEST, Flow, FlowRun, Progress, run_flow
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
    progress: Progress | None = None,
    log: Callable[[str], None] = print,
    generate: bool = True,
) -> NightlyResult:
    """ingest -> corpus GX -> test-set generation + GX -> retrieval evaluation -> report.

    With ``generate=False`` evaluation is triggered by the corpus event and uses ``qa_set``
    (default: the hand-written sample set); so it does when generation accepts nothing.
    """
    run_id = run_id or f"nightly-{utcnow():%Y%m%dT%H%M%S}"
    params = {"corpus": corpus, "qa_set": str(qa_set) if qa_set else None}

    def run(flow: Flow, number: int, event: dict[str, Any] | None, **extra: Any) -> FlowRun:
        log(f"[{number}/3] {flow.dag_id}")
        events = [{"timestamp": utcnow().isoformat(), "extra": event}] if event else []
        state = flow.resolve({**params, **extra}, events, run_id)
        return run_flow(rt, flow, state, progress=progress)

    ingested = run(INGEST, 1, None, source=source)
    summary = ingested.results["finalize"]
    log(
        f"      added={summary['added']} updated={summary['updated']} "
        f"unchanged={summary['unchanged']} removed={summary['removed']} "
        f"quarantined={summary['quarantined']} chunks={summary['chunks']} "
        f"embedded={summary['embedded']}"
    )
    event = ingested.event
    generation = None
    if generate:
        generated = run(GENERATE, 2, event)
        generation = generated.results["finalize"]
        log(
            f"      version {generation['version']}: accepted {generation['accepted']}, "
            f"model calls {generation['model_calls']}, cache hits {generation['cache_hits']}"
        )
        event = generated.event
    else:
        log("[2/3] generate_testset skipped")
    evaluated = run(EVALUATE, 3, event)
    return NightlyResult(
        run_id=run_id,
        ingest=summary,
        corpus_quality=_without_event(ingested.results["quality"]),
        generation=_without_event(generation),
        evaluation=evaluated.results["evaluate"],
        report=_without_event(evaluated.results["publish"]),
    )


def _without_event(result: dict[str, Any] | None) -> Any:
    return None if result is None else {k: v for k, v in result.items() if k != "event"}
