"""Retrieval evaluation as a pipeline step: run the scan, persist, validate and report.

``evaluate_retrieval`` writes the run's metrics (artifact store, the metrics-history table and the
per-query values that ``ragtrail runs compare`` pairs) and ``publish_retrieval_report`` turns them
into GX validations, Data Docs and the HTML report. Both are idempotent for a given run id: a retry
replaces the run's rows and files instead of adding to them. Undefined numbers (a gap when every
label scores 0, dense/lexical when the scan skips weight 0/1, intervals without bootstrap) leave as
null with a reason (:mod:`ragtrail.jsonsafe`), never as NaN.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ragtrail import jsonsafe
from ragtrail.evaluate.retrieval.evaluator import (
    PRIMARY_METRIC,
    RetrievalEvaluator,
    RetrievalInputs,
    ScanConfig,
    collect_candidates,
)
from ragtrail.paths import sample_qa_set
from ragtrail.records import LABELS, QAItem
from ragtrail.runtime import Runtime
from ragtrail.storage.corpus_store import SnapshotRecord
from ragtrail.storage.runs_store import RunStore
from ragtrail.testset.qaset import load_qa_set


def run_prefix(run_id: str) -> str:
    return f"runs/{run_id}"


def evaluated_snapshot(rt: Runtime, corpus: str, snapshot_id: str | None) -> SnapshotRecord:
    """The given snapshot, else the corpus's latest completed one; an error when there is none."""
    snapshot = (
        rt.store.get_snapshot(snapshot_id) if snapshot_id else rt.store.latest_snapshot(corpus)
    )
    if snapshot is None:
        raise ValueError(f"corpus {corpus!r} has no completed snapshot: ingest it first")
    return snapshot


def put_parquet(rt: Runtime, key: str, frame: pd.DataFrame) -> str:
    """Store ``frame`` as Parquet under ``key``; returns its URI."""
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return rt.artifacts.put_bytes(key, buf.getvalue())


def get_parquet(rt: Runtime, key: str) -> pd.DataFrame:
    """The frame :func:`put_parquet` stored under ``key``."""
    return pd.read_parquet(io.BytesIO(rt.artifacts.get_bytes(key)))


def evaluate_retrieval(
    rt: Runtime,
    corpus: str,
    *,
    run_id: str,
    qa_set: str | Path | None = None,
    text_weights: list[float] | None = None,
    snapshot_id: str | None = None,
    set_name: str | None = None,
) -> dict[str, Any]:
    """Evaluate the corpus index on a labelled QA set across the text-weight scan.

    ``set_name`` is the set's name in the night (recorded with the run; None for a lone run).
    """
    settings = rt.settings
    snapshot = evaluated_snapshot(rt, corpus, snapshot_id)
    items, qa_version, qa_source = load_items(rt, qa_set)
    weights = tuple(sorted(set(text_weights))) if text_weights else settings.retrieval.text_weights
    if any(not 0.0 <= w <= 1.0 for w in weights):
        raise ValueError(f"text weights must lie in [0, 1]: {weights}")
    config = ScanConfig(
        text_weights=weights,
        candidates_per_modality=settings.retrieval.candidates_per_modality,
        bootstrap_samples=settings.retrieval.bootstrap_samples,
        seed=settings.seed,
    )
    params = {
        "corpus": corpus,
        "snapshot_id": snapshot.snapshot_id,
        "qa_set": qa_source,
        "qa_set_version": qa_version,
        "qa_set_name": set_name,
        "text_weights": list(weights),
    }
    runs = RunStore(rt.engine)
    runs.start_run(run_id, "evaluate_retrieval", params)

    candidates = collect_candidates(
        rt.index(corpus), rt.embedder.encode, items, config.candidates_per_modality, rt.report
    )
    evaluator = RetrievalEvaluator(config)
    result = evaluator.scan(RetrievalInputs(items=items, candidates=candidates))
    evaluation = evaluator.result_of(result)

    backends = rt.backends()
    runs.record_evaluation(
        run_id,
        evaluation,
        corpus=corpus,
        corpus_snapshot=snapshot.snapshot_id,
        qa_set_version=qa_version,
        models=producing_models(settings.index_backend, settings.embedding_model, backends),
        judges={},
    )

    prefix = run_prefix(run_id)
    put_parquet(rt, f"{prefix}/retrieval_metrics.parquet", result.metrics)
    put_parquet(rt, f"{prefix}/retrieval_best.parquet", result.best)
    put_parquet(rt, f"{prefix}/retrieval_per_query.parquet", result.per_query)
    summary = {
        **params,
        "run_id": run_id,
        "relevance_level": result.level,
        "n_questions": len(items),
        "questions_per_label": {
            label: int(sum(1 for it in items if it.label == label)) for label in LABELS
        },
        "backends": backends,
        "primary_metric": PRIMARY_METRIC,
        "evaluation": {
            "evaluator": evaluation.evaluator,
            "config": evaluation.config,
            "primary_metric": evaluation.primary_metric,
            "greater_is_better": evaluation.greater_is_better,
        },
        "best": result.best_records(),
        "metrics": result.metric_records(),
    }
    summary["metrics_uri"] = rt.artifacts.put_bytes(
        f"{prefix}/metrics.json", jsonsafe.dumps(summary, "metrics.json", indent=1).encode()
    )
    keys = ("run_id", "metrics_uri", "snapshot_id", "qa_set_version", "n_questions", "best")
    return {k: summary[k] for k in keys}


def producing_models(
    index_backend: str, embedding_model: str, backends: Mapping[str, str]
) -> dict[str, str]:
    """What produced a retrieval metric, stored with every point (``metrics_history.models``)."""
    return {**backends, "index_backend": index_backend, "embedding_model": embedding_model}


@dataclass(frozen=True)
class SetRun:
    """One QA set opened for an answer-side evaluation under a set's run id: its items, the
    snapshot they are evaluated on and the run's parameters."""

    run_id: str
    corpus: str
    snapshot_id: str
    items: list[QAItem]
    qa_version: str
    params: dict[str, Any]

    def record(self, rt: Runtime, **models: Any) -> dict[str, Any]:
        """The keyword arguments of ``RunStore.record_evaluation`` (the producing models plus
        ``models``, e.g. the answerer)."""
        produced = producing_models(
            rt.settings.index_backend, rt.settings.embedding_model, rt.backends()
        )
        return {
            "corpus": self.corpus,
            "corpus_snapshot": self.snapshot_id,
            "qa_set_version": self.qa_version,
            "models": {**produced, **models},
        }


def open_set_run(
    rt: Runtime,
    corpus: str,
    run_id: str,
    task: str,
    *,
    qa_set: str | Path | None,
    set_name: str | None,
    snapshot_id: str | None,
) -> SetRun:
    """Load the QA set, fix the snapshot and start the run ``run_id`` (as ``task``) unless the
    set's retrieval step already did."""
    snapshot = evaluated_snapshot(rt, corpus, snapshot_id)
    items, qa_version, qa_source = load_items(rt, qa_set)
    params = {
        "corpus": corpus,
        "snapshot_id": snapshot.snapshot_id,
        "qa_set": qa_source,
        "qa_set_version": qa_version,
        "qa_set_name": set_name,
    }
    runs = RunStore(rt.engine)
    if runs.get_run(run_id) is None:
        runs.start_run(run_id, task, params)
    return SetRun(run_id, corpus, snapshot.snapshot_id, items, qa_version, params)


TESTSET_PREFIX = "testset:"
GOLDEN_PREFIX = "golden:"


def load_items(rt: Runtime, qa_set: str | Path | None) -> tuple[list[QAItem], str, str]:
    """Items, version and source of a QA set: a file, ``testset:<version>``,
    ``golden:<version>`` or (None) the sample set."""
    if isinstance(qa_set, str) and qa_set.startswith(GOLDEN_PREFIX):
        from ragtrail.testset.golden import GoldenSetStore

        version = qa_set.removeprefix(GOLDEN_PREFIX)
        try:
            return GoldenSetStore(rt.engine).items(version), version, qa_set
        except KeyError:
            raise ValueError(f"unknown golden set version {version!r}") from None
    if isinstance(qa_set, str) and qa_set.startswith(TESTSET_PREFIX):
        from ragtrail.testset.store import TestSetStore

        version = qa_set.removeprefix(TESTSET_PREFIX)
        store = TestSetStore(rt.engine)
        if store.get_version(version) is None:
            raise ValueError(f"unknown test-set version {version!r}")
        qids = store.version_qids(version)
        items = [
            QAItem(
                qid=qids[c.candidate_id],
                question=c.question,
                label=c.effective_label,
                answer=c.answer,
                ground_doc_ids=(c.context.doc_id,),
                ground_chunk_ids=(c.context.chunk_id,),
            )
            for c in store.version_items(version)
        ]
        return items, version, qa_set
    path = Path(qa_set) if qa_set else sample_qa_set()
    items, version = load_qa_set(path)
    return items, version, str(path)


def load_run_summary(rt: Runtime, run_id: str) -> dict[str, Any]:
    return json.loads(rt.artifacts.get_bytes(f"{run_prefix(run_id)}/metrics.json"))


def report_dir(rt: Runtime, run_id: str) -> Path:
    return rt.settings.home / "reports" / run_id


def publish_retrieval_report(
    rt: Runtime,
    run_id: str,
    *,
    extra_quality: list[dict[str, Any]] | None = None,
    generation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate one run's metrics with GX, render its HTML report and upload both
    (:func:`ragtrail.pipeline.publish.publish_sets` with a single, unnamed set)."""
    from ragtrail.pipeline.publish import SetToPublish, publish_sets

    entry = SetToPublish(run_id, generation=generation)
    report = publish_sets(rt, run_id, [entry], shared_quality=extra_quality or (), compare=False)
    return {k: v for k, v in report.items() if k != "sets"}
