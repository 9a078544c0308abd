"""Retrieval evaluation as a pipeline step: the text-weight scan on one QA set, persisted.

``evaluate_retrieval`` writes the run's metrics (artifact store, the metrics-history table and the
per-query values that ``ragtrail runs compare`` pairs); :mod:`ragtrail.pipeline.publish` turns them
into GX validations, Data Docs and the HTML report. Idempotent for a given run id: a retry
replaces the run's rows and files instead of adding to them. Undefined numbers (a gap when every
label scores 0, dense/lexical when the scan skips weight 0/1, intervals without bootstrap) leave as
null with a reason (:mod:`ragtrail.jsonsafe`), never as NaN.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ragtrail.artifact_keys import retrieval_table_key, run_summary_key
from ragtrail.evaluate.retrieval.evaluator import (
    PRIMARY_METRIC,
    RetrievalEvaluator,
    RetrievalInputs,
    ScanConfig,
    ScanResult,
    collect_candidates,
    facet_table,
    undefined_as_null,
)
from ragtrail.jsonsafe import JsonObject
from ragtrail.languages import UNDETERMINED, detect_language
from ragtrail.pipeline.run_io import (
    evaluated_snapshot,
    held_run,
    load_items,
    night_of_set,
    producing_models,
    put_parquet,
    run_owner,
    settle_runs,
)
from ragtrail.records import INCLUSIVE, LABELS, QAItem
from ragtrail.runtime import Runtime
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.retrieval_summary import EvaluatorInfo, RetrievalRun, RetrievalSummary


def evaluate_retrieval(
    rt: Runtime,
    corpus: str,
    *,
    run_id: str,
    qa_set: str | Path | None = None,
    text_weights: list[float] | None = None,
    snapshot_id: str | None = None,
    set_name: str | None = None,
) -> RetrievalRun:
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
    settle_runs(rt)
    runs = RunStore(rt.engine)
    runs.start_run(run_id, "evaluate_retrieval", params, owner=run_owner(rt))
    with held_run(rt, run_id, night_of_set(run_id, set_name)):
        return _scan(rt, corpus, run_id, items, snapshot.snapshot_id, qa_version, config, params)


def question_languages(rt: Runtime, corpus: str, items: Sequence[QAItem]) -> dict[str, str]:
    """Each question's language: that of most of its ground documents, else (no ground document,
    or none with a known language) the language detected in the question itself."""
    documents = rt.store.get_documents(corpus)
    out = {}
    for item in items:
        known = [
            documents[d].language
            for d in item.ground_doc_ids
            if d in documents and documents[d].language != UNDETERMINED
        ]
        out[item.qid] = (
            Counter(known).most_common(1)[0][0] if known else detect_language(item.question).code
        )
    return out


def language_facet(
    rt: Runtime, corpus: str, items: Sequence[QAItem], result: ScanResult, config: ScanConfig
) -> list[JsonObject]:
    """The primary metric per question language at the best inclusive weight."""
    best = result.best.set_index("label")
    if result.per_query.empty or INCLUSIVE not in best.index:
        return []
    weight = float(best.loc[INCLUSIVE, "best_weight"])
    table = facet_table(
        result.per_query, question_languages(rt, corpus, items), weight=weight, config=config
    )
    return undefined_as_null(table)


def _scan(
    rt: Runtime,
    corpus: str,
    run_id: str,
    items: list[QAItem],
    snapshot_id: str,
    qa_version: str,
    config: ScanConfig,
    params: JsonObject,
) -> RetrievalRun:
    """The scan of :func:`evaluate_retrieval` on the started and held run, stored."""
    settings = rt.settings
    runs = RunStore(rt.engine)
    candidates = collect_candidates(
        rt.index(corpus),
        rt.cached_embedder.encode,
        items,
        config.candidates_per_modality,
        rt.report,
    )
    evaluator = RetrievalEvaluator(config)
    result = evaluator.scan(RetrievalInputs(items=items, candidates=candidates))
    evaluation = evaluator.result_of(result)

    backends = rt.backends()
    runs.record_evaluation(
        run_id,
        evaluation,
        corpus=corpus,
        corpus_snapshot=snapshot_id,
        qa_set_version=qa_version,
        models=producing_models(settings.index_backend, rt.embedder_identity, backends),
        judges={},
    )

    put_parquet(rt, retrieval_table_key(run_id, "metrics"), result.metrics)
    put_parquet(rt, retrieval_table_key(run_id, "best"), result.best)
    put_parquet(rt, retrieval_table_key(run_id, "per_query"), result.per_query)
    summary = RetrievalSummary(
        **params,
        run_id=run_id,
        relevance_level=result.level,
        n_questions=len(items),
        questions_per_label={
            label: sum(1 for it in items if it.label == label) for label in LABELS
        },
        backends=backends,
        primary_metric=PRIMARY_METRIC,
        evaluation=EvaluatorInfo(
            evaluator=evaluation.evaluator,
            config=evaluation.config,
            primary_metric=evaluation.primary_metric,
            greater_is_better=evaluation.greater_is_better,
        ),
        best=result.best_records(),
        metrics=result.metric_records(),
        languages=language_facet(rt, corpus, items, result, config),
    )
    metrics_uri = rt.artifacts.put_bytes(run_summary_key(run_id), summary.dumps(indent=1).encode())
    return RetrievalRun(
        run_id=run_id,
        metrics_uri=metrics_uri,
        snapshot_id=summary.snapshot_id,
        qa_set_version=summary.qa_set_version,
        n_questions=summary.n_questions,
        best=summary.best,
    )
