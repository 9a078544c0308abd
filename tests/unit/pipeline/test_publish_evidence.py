"""Publishing a set with an evidence summary: both evidence suites run on what the set's run
stored, the report gains the evidence sections and the night's document its headline; a set
without one publishes as before. A hand-built retrieval run stands in for the retrieval step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragtrail.artifact_keys import evidence_queries_key, run_summary_key
from ragtrail.config import load_settings
from ragtrail.pipeline.evidence.views import queries_frame
from ragtrail.pipeline.publish import SetToPublish, publish_sets
from ragtrail.pipeline.run_io import put_parquet
from ragtrail.quality.runner import QualityGateError
from ragtrail.records import INCLUSIVE
from ragtrail.runtime import Runtime
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.evidence_summary import EvidenceSummary
from ragtrail.summaries.night_summary import PublishedSet
from ragtrail.summaries.retrieval_summary import (
    BestRow,
    EvaluatorInfo,
    MetricRow,
    RetrievalSummary,
)
from tests.unit._evidence_docs import evidence_summary

RUN = "night-1.golden"
LABEL = "fact_single"
WEIGHTS = [0.0, 1.0]


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = Runtime(load_settings(home=tmp_path / "home"))
    yield runtime
    runtime.close()


def _summary() -> EvidenceSummary:
    """The hand-built evidence summary, as the set's run stores it (same run id)."""
    return evidence_summary().model_copy(update={"run_id": RUN})


def _retrieval_summary() -> RetrievalSummary:
    metrics = [
        MetricRow(
            label=label,
            text_weight=w,
            metric=metric,
            value=0.5,
            ci_low=0.25,
            ci_high=0.75,
            n_questions=8,
        )
        for label in (LABEL, INCLUSIVE)
        for w in WEIGHTS
        for metric in ("recall@5", "mrr")
    ]
    best = [
        BestRow(
            label=label,
            n_questions=8,
            dense=0.5,
            lexical=0.5,
            best_recall=0.5,
            best_weight=0.0,
            ci_low=0.25,
            ci_high=0.75,
            gap_to_best=0.0,
        )
        for label in (LABEL, INCLUSIVE)
    ]
    return RetrievalSummary(
        corpus="handbook",
        snapshot_id="snap-1",
        qa_set="golden:v1",
        qa_set_version="v1",
        qa_set_name="golden",
        text_weights=WEIGHTS,
        run_id=RUN,
        relevance_level="doc",
        n_questions=8,
        questions_per_label={LABEL: 8},
        backends={"embedder": "tiny"},
        primary_metric="recall@5",
        evaluation=EvaluatorInfo(
            evaluator="retrieval", config={}, primary_metric="recall@5", greater_is_better=True
        ),
        best=best,
        metrics=metrics,
    )


def _store_run(rt: Runtime, *, queries: bool = True) -> None:
    RunStore(rt.engine).start_run(RUN, "evaluate_retrieval", {}, corpus="handbook")
    rt.artifacts.put_bytes(run_summary_key(RUN), _retrieval_summary().dumps().encode())
    if queries:
        put_parquet(rt, evidence_queries_key(RUN), queries_frame(_summary()))


def test_evidence_is_checked_rendered_and_carried(rt: Runtime) -> None:
    _store_run(rt)
    entry = SetToPublish(RUN, name="golden", evidence=_summary())
    report = publish_sets(rt, "night-1", [entry], compare=False)
    assert report.success
    html = Path(report.report_path).read_text()
    assert "Evidence extractor: methods x noise" in html
    assert "robustness to irrelevant passages" in html
    assert "evidence_queries.golden" in html and "evidence_metrics.golden" in html
    document = json.loads((Path(report.report_path).parent / "metrics.json").read_text())
    headline = document["sets"]["golden"]["evidence"]
    assert headline["extractor"] == "registry:extractor@3"
    assert headline["correct"]["extractor"]["value"] == 0.75
    assert report.sets["golden"].evidence is not None
    assert RunStore(rt.engine).get_run(RUN).status == "success"


def test_a_broken_evidence_row_fails_the_set(rt: Runtime) -> None:
    _store_run(rt, queries=False)
    frame = queries_frame(_summary())
    frame.loc[0, "compression"] = -2.0
    put_parquet(rt, evidence_queries_key(RUN), frame)
    entry = SetToPublish(RUN, name="golden", evidence=_summary())
    with pytest.raises(QualityGateError, match="compression"):
        publish_sets(rt, "night-1", [entry], compare=False)
    assert RunStore(rt.engine).get_run(RUN).status == "failed_quality"


def test_without_evidence_nothing_changes(rt: Runtime) -> None:
    _store_run(rt, queries=False)
    report = publish_sets(rt, "night-1", [SetToPublish(RUN, name="golden")], compare=False)
    html = Path(report.report_path).read_text()
    assert report.success and "Evidence extractor" not in html and "evidence_queries" not in html
    document = json.loads((Path(report.report_path).parent / "metrics.json").read_text())
    assert document["sets"]["golden"]["evidence"] is None
    # a night document written before evidence existed still reads
    old = dict(document["sets"]["golden"])
    del old["evidence"]
    assert PublishedSet.from_json(old).evidence is None
