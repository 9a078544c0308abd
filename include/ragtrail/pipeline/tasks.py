"""One function per Airflow task: JSON-serialisable arguments in, small JSON dicts (XCom) out.

Each call builds a :class:`Runtime` from the environment (``RAGTRAIL_*``), so a worker needs no
state from the DAG file; artifacts live in the artifact store and only their URIs travel in XCom.
"""

from __future__ import annotations

from typing import Any

from ragtrail.pipeline import evaluate as _evaluate
from ragtrail.pipeline import ingest as _ingest
from ragtrail.pipeline import quality as _quality
from ragtrail.runtime import Runtime


def _runtime() -> Runtime:
    return Runtime()


def plan_ingest(source: str, corpus: str, shard_size: int = 25) -> dict[str, Any]:
    rt = _runtime()
    try:
        plan = _ingest.plan_ingest(rt, source, corpus, shard_size=shard_size)
    finally:
        rt.close()
    return {
        "snapshot_id": plan.snapshot_id,
        "corpus": plan.corpus,
        "shards": plan.shards,
        "manifest_uri": plan.manifest_uri,
        "counts": plan.counts,
    }


def ingest_shard(corpus: str, snapshot_id: str, rel_paths: list[str]) -> dict[str, Any]:
    rt = _runtime()
    try:
        return _ingest.ingest_shard(rt, corpus, snapshot_id, rel_paths)
    finally:
        rt.close()


def finalize_ingest(corpus: str, snapshot_id: str) -> dict[str, Any]:
    rt = _runtime()
    try:
        summary = _ingest.finalize_ingest(rt, corpus, snapshot_id).as_dict()
    finally:
        rt.close()
    return summary


def check_corpus_quality(corpus: str, snapshot_id: str) -> dict[str, Any]:
    rt = _runtime()
    try:
        return _quality.check_corpus_quality(rt, corpus, snapshot_id)
    finally:
        rt.close()


def evaluate_retrieval(
    corpus: str,
    qa_set: str | None,
    text_weights: list[float] | None,
    run_id: str,
    snapshot_id: str | None = None,
) -> dict[str, Any]:
    rt = _runtime()
    try:
        return _evaluate.evaluate_retrieval(
            rt,
            corpus,
            run_id=run_id,
            qa_set=qa_set,
            text_weights=text_weights,
            snapshot_id=snapshot_id,
        )
    finally:
        rt.close()


def publish_retrieval_report(run_id: str) -> dict[str, Any]:
    rt = _runtime()
    try:
        return _evaluate.publish_retrieval_report(rt, run_id)
    finally:
        rt.close()


def plan_generation(
    corpus: str,
    run_id: str,
    snapshot_id: str | None = None,
    per_label: int | None = None,
    seed: int | None = None,
    labels: list[str] | None = None,
    doc_ids: list[str] | None = None,
) -> dict[str, Any]:
    from ragtrail.pipeline.generate import GenerationRequest, plan_generation

    request = GenerationRequest(
        corpus=corpus,
        run_id=run_id,
        per_label=per_label,
        seed=seed,
        labels=tuple(labels or ()),
        doc_ids=tuple(doc_ids or ()),
        snapshot_id=snapshot_id,
    )
    rt = _runtime()
    try:
        plan = plan_generation(rt, request)
    finally:
        rt.close()
    return {"corpus": corpus, "run_id": run_id, "shards": plan.shards, "retired": plan.retired}


def generate_shard(corpus: str, run_id: str, chunk_ids: list[str]) -> dict[str, Any]:
    from ragtrail.pipeline.generate import generate_shard as run_shard

    rt = _runtime()
    try:
        return run_shard(rt, corpus, run_id, chunk_ids)
    finally:
        rt.close()


def finalize_generation(corpus: str, run_id: str) -> dict[str, Any]:
    """Version the test set, validate it with GX; returns a small summary for XCom."""
    from ragtrail.pipeline.generate import check_testset_quality
    from ragtrail.pipeline.generate import finalize_generation as run_finalize

    rt = _runtime()
    try:
        summary = run_finalize(rt, corpus, run_id)
        quality = (
            check_testset_quality(rt, summary, rt.settings.home / "reports" / run_id)
            if summary["version"]
            else []
        )
    finally:
        rt.close()
    keys = ("version", "corpus", "snapshot_id", "accepted", "targets", "model_calls", "cache_hits")
    return {k: summary[k] for k in keys} | {"quality": [q["success"] for q in quality]}
