"""Hand-made published reports in a Runtime's stores, as :func:`publish_sets` leaves them: each
set's run finished with the report's location, and under ``runs/<report id>/report/`` the HTML,
a plot, ``metrics.json`` (a night's document, or a lone run's summary) and Data Docs."""

from __future__ import annotations

from collections.abc import Mapping

from ragtrail.artifact_keys import corpus_quality_prefix, report_prefix, run_summary_key
from ragtrail.records import INCLUSIVE, SetKind
from ragtrail.runtime import Runtime
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.night_summary import NightDocument, PublishedSet
from ragtrail.summaries.retrieval_summary import (
    BestRow,
    EvaluatorInfo,
    MetricRow,
    RetrievalSummary,
)

LABEL = "fact_single"
WEIGHTS = [0.0, 0.5, 1.0]
SNAPSHOT = "snap-1"


def retrieval_summary(
    run_id: str, recall: float, *, corpus: str, name: str | None, version: str = "v1"
) -> RetrievalSummary:
    """One set's stored retrieval summary whose best Recall@5 over all labels is ``recall``
    (at weight 0.5, interval recall ± 0.1, 10 questions)."""
    metrics = [
        MetricRow(
            label=label,
            text_weight=w,
            metric="recall@5",
            value=recall if w == 0.5 else recall / 2,
            ci_low=round(max(recall - 0.1, 0.0), 6) if w == 0.5 else 0.0,
            ci_high=round(min(recall + 0.1, 1.0), 6) if w == 0.5 else 1.0,
            n_questions=10,
            ci_method="wilson",
        )
        for label in (LABEL, INCLUSIVE)
        for w in WEIGHTS
    ]
    best = [
        BestRow(
            label=label,
            n_questions=10,
            dense=recall / 2,
            lexical=recall / 2,
            best_recall=recall,
            best_weight=0.5,
            ci_low=round(max(recall - 0.1, 0.0), 6),
            ci_high=round(min(recall + 0.1, 1.0), 6),
            gap_to_best=0.0,
            ci_method="wilson",
        )
        for label in (LABEL, INCLUSIVE)
    ]
    return RetrievalSummary(
        corpus=corpus,
        snapshot_id=SNAPSHOT,
        qa_set=f"golden:{version}",
        qa_set_version=version,
        qa_set_name=name,
        text_weights=WEIGHTS,
        run_id=run_id,
        relevance_level="doc",
        n_questions=10,
        questions_per_label={LABEL: 10},
        backends={"embedder": "tiny"},
        primary_metric="recall@5",
        evaluation=EvaluatorInfo(
            evaluator="retrieval", config={}, primary_metric="recall@5", greater_is_better=True
        ),
        best=best,
        metrics=metrics,
    )


def _finish(rt: Runtime, run_id: str, report_id: str, corpus: str, status: str) -> None:
    runs = RunStore(rt.engine)
    runs.start_run(
        run_id, "evaluate_retrieval", {}, corpus=corpus, snapshot_id=SNAPSHOT, qa_set_version="v1"
    )
    report_uri = rt.settings.home / "reports" / report_id / "report.html"
    runs.finish_run(run_id, status, str(report_uri))


def _report_files(rt: Runtime, report_id: str, document: bytes) -> None:
    prefix = report_prefix(report_id)
    rt.artifacts.put_bytes(f"{prefix}/report.html", f"<html>report {report_id}</html>".encode())
    rt.artifacts.put_bytes(f"{prefix}/recall_at_5_vs_text_weight.png", b"\x89PNG fake")
    rt.artifacts.put_bytes(f"{prefix}/metrics.json", document)
    rt.artifacts.put_bytes(f"{prefix}/data_docs/index.html", b"<html>data docs</html>")


def publish_night(
    rt: Runtime,
    night: str,
    recalls: Mapping[str, float],
    *,
    corpus: str = "handbook",
    status: str = "success",
) -> None:
    """A published night of ``corpus`` whose sets (golden ones, and ``generated``) have these
    best Recall@5 values."""
    sets = {}
    for name, recall in recalls.items():
        run_id = f"{night}.{name}"
        _finish(rt, run_id, night, corpus, status)
        summary = retrieval_summary(run_id, recall, corpus=corpus, name=name)
        kind = SetKind.GENERATED if name == "generated" else SetKind.GOLDEN
        sets[name] = PublishedSet(
            **dict(summary),
            name=name,
            kind=kind,
            change=None,
            citations=None,
            sufficiency=None,
        )
    document = NightDocument(
        run_id=night,
        corpus=corpus,
        snapshot_id=SNAPSHOT,
        backends={"embedder": "tiny"},
        primary_metric="recall@5",
        sets=sets,
    )
    _report_files(rt, night, document.dumps().encode())


def publish_lone_run(rt: Runtime, run_id: str, recall: float, *, corpus: str = "handbook") -> None:
    """A lone ``ragtrail eval retrieval`` run published under its own id."""
    _finish(rt, run_id, run_id, corpus, "success")
    summary = retrieval_summary(run_id, recall, corpus=corpus, name=None)
    rt.artifacts.put_bytes(run_summary_key(run_id), summary.dumps().encode())
    _report_files(rt, run_id, summary.dumps().encode())


def publish_corpus_checks(rt: Runtime, corpus: str = "handbook") -> None:
    """The Data Docs and validations a snapshot's corpus checks leave at ingest."""
    prefix = corpus_quality_prefix(corpus, SNAPSHOT)
    rt.artifacts.put_bytes(f"{prefix}/data_docs/index.html", b"<html>corpus checks</html>")
    rt.artifacts.put_bytes(f"{prefix}/validations.json", b"[]")
