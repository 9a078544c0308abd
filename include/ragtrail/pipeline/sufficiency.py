"""Sufficient context, Correct / Abstain / Hallucinate and selective generation as a pipeline step.

``evaluate_sufficiency`` samples a QA set's questions (spread over labels, seeded) and gives each one
three contexts: the hybrid index's top-k at the set's best text weight (``retrieved``), the ground
chunk (``gold``) and nothing (``none``). Then

1. every configured sufficiency rater rates each (question, context) pair; each rater is calibrated
   on golden references first (cached per judge version), and the rater with the best measured
   agreement that gates decides the ``sufficient`` / ``insufficient`` stratum (none gates: the best
   advising one, named as advising);
2. the answering model answers in every setting, and each answer is classified Correct / Abstain /
   Hallucinate (abstention detection, normalised match, else the calibrated correctness judge);
3. with ``selective=True``, the model rates its own confidence (P(True), P(Correct)) on the
   answers with context, and a logistic-regression policy on sufficiency + confidence is fitted on
   one seeded split of the questions and compared with confidence alone on the other.

The C/A/H and selective evaluations land in the metrics history under the set's run id, one
strict-JSON summary (``runs/<run id>/sufficiency.json``) holds everything the report shows, the
policy is stored as its own artifact and the per-(question, setting) rows as Parquet. All model
calls go through the cached clients: a rerun makes none and gives identical numbers.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ragtrail import jsonsafe
from ragtrail.config import ModelRole
from ragtrail.evaluate.abstention import is_abstention
from ragtrail.evaluate.cah import AnswerCase, CAHEvaluator, CAHRecord, cah_table, classify
from ragtrail.evaluate.confidence import p_correct, p_true
from ragtrail.evaluate.selective import (
    SelectiveEvaluator,
    SelectiveRow,
    compare_selective,
    fit_policy,
    split_by_question,
)
from ragtrail.evaluate.short_answers import ShortAnswer, ShortAnswerInput, answer_questions
from ragtrail.judges.contract import Judge, JudgeInput, Verdict
from ragtrail.judges.sufficiency import SUFFICIENT
from ragtrail.llm.client import GenerationParams
from ragtrail.pipeline.citations import best_text_weight, sample_items
from ragtrail.pipeline.correctness import calibrate_correctness_if_missing, correctness_judge
from ragtrail.pipeline.evaluate import (
    evaluated_snapshot,
    load_items,
    producing_models,
    put_parquet,
    run_prefix,
)
from ragtrail.pipeline.judges import golden_items, ground_context
from ragtrail.pipeline.scenarios import scenario_corpus
from ragtrail.pipeline.sufficiency_judges import calibrate_sufficiency_raters, sufficiency_raters
from ragtrail.records import QAItem, QuestionLabel
from ragtrail.runtime import Runtime
from ragtrail.storage.runs_store import RunStore

log = logging.getLogger(__name__)

RATED_SETTINGS = ("retrieved", "gold")
"""The settings whose context is rated; ``none`` has no context (its own stratum)."""
NO_CONTEXT = "no context"
UNRATED = "unrated"


def sufficiency_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/sufficiency.json"


def policy_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/selective_policy.json"


# ------------------------------------------------------------------------------ contexts


def item_contexts(
    rt: Runtime,
    corpus: str,
    items: Sequence[QAItem],
    settings: Sequence[str],
    *,
    k: int,
    text_weight: float,
) -> dict[tuple[str, str], list[str] | None]:
    """``(qid, setting) -> passages`` (None: the corpus has no ground context for the item)."""
    out: dict[tuple[str, str], list[str] | None] = {}
    if "retrieved" in settings:
        hits = scenario_corpus(rt, corpus).search([i.question for i in items], k, text_weight)
        for item, passages in zip(items, hits, strict=True):
            out[(item.qid, "retrieved")] = [p.text for p in passages]
    for item in items:
        if "gold" in settings:
            ground = ground_context(rt, corpus, item)
            out[(item.qid, "gold")] = None if ground is None else [ground]
        if "none" in settings:
            out[(item.qid, "none")] = []
    return out


def gold_answer(item: QAItem) -> str:
    """The gold answer a rater may look for ("" for unanswerable items: there is none)."""
    return "" if item.label == QuestionLabel.UNANSWERABLE else item.answer.strip()


# ------------------------------------------------------------------------------- raters


def rate_contexts(
    raters: Sequence[Judge],
    pairs: Sequence[tuple[QAItem, str, list[str]]],
) -> dict[str, list[Verdict]]:
    """Every rater's verdicts on every (item, setting, passages) pair, in ``pairs`` order."""
    inputs = [
        JudgeInput(question=item.question, context="\n\n".join(passages), answer=gold_answer(item))
        for item, _, passages in pairs
    ]
    return {rater.spec.name: rater.judge(inputs) for rater in raters}


def choose_primary(
    raters: Sequence[Judge], calibrations: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The rater whose verdicts stratify C/A/H: the gating rater with the highest calibration
    value, else the advising one with the highest value (named as advising), else the first."""

    def value(name: str) -> float:
        v = calibrations.get(name, {}).get("value")
        return float(v) if isinstance(v, int | float) else float("-inf")

    def gates(name: str) -> bool:
        return bool(calibrations.get(name, {}).get("gate", {}).get("gates"))

    names = [r.spec.name for r in raters]
    gating = [n for n in names if gates(n)]
    pool = gating or names
    best = max(pool, key=lambda n: (value(n), -names.index(n)))
    measured = value(best) != float("-inf")
    if gating:
        reason = f"the gating rater with the highest agreement ({value(best):.2f})"
    elif measured:
        reason = (
            f"no rater gates; the best-agreeing one ({value(best):.2f}) is used and only advises"
        )
    else:
        reason = "no rater has a calibration; the first configured one is used and only advises"
    return {"name": best, "gates": bool(gating), "reason": reason}


# ----------------------------------------------------------------------------- the step


def evaluate_sufficiency(
    rt: Runtime,
    corpus: str,
    *,
    run_id: str,
    qa_set: str | Path | None = None,
    set_name: str | None = None,
    snapshot_id: str | None = None,
    raters: Sequence[str] | None = None,
    max_items: int | None = None,
    seed: int | None = None,
    selective: bool | None = None,
) -> dict[str, Any]:
    """Sufficiency, C/A/H and (optionally) selective generation on one QA set; see the module
    docstring. Arguments left None come from ``settings.sufficiency`` / ``settings.selective``.
    Returns a compact strict-JSON summary; the full one is stored at :func:`sufficiency_key`."""
    ss, sel = rt.settings.sufficiency, rt.settings.selective
    selective = sel.enabled if selective is None else selective
    seed = rt.settings.seed if seed is None else seed
    snapshot = evaluated_snapshot(rt, corpus, snapshot_id)
    items, qa_version, qa_source = load_items(rt, qa_set)
    sample = sample_items(items, ss.max_items if max_items is None else max_items, seed)
    text_weight, weight_source = best_text_weight(rt, run_id)
    params = {
        "corpus": corpus,
        "snapshot_id": snapshot.snapshot_id,
        "qa_set": qa_source,
        "qa_set_version": qa_version,
        "qa_set_name": set_name,
    }
    runs = RunStore(rt.engine)
    if runs.get_run(run_id) is None:
        runs.start_run(run_id, "evaluate_sufficiency", params)
    timings: dict[str, float] = {}
    usage_before = rt.llm_usage.snapshot() if hasattr(rt.llm_usage, "snapshot") else None

    started = time.perf_counter()
    contexts = item_contexts(
        rt, corpus, sample, ss.settings, k=ss.retrieval_k, text_weight=text_weight
    )
    timings["contexts"] = time.perf_counter() - started

    # 1. raters, calibrated on the corpus's golden references first
    started = time.perf_counter()
    judges = sufficiency_raters(rt, raters)
    golden, _ = golden_items(rt, corpus)
    calibrations = calibrate_sufficiency_raters(rt, corpus, golden, judges)
    primary = choose_primary(judges, calibrations)
    rated = [
        (item, setting, passages)
        for item in sample
        for setting in ss.settings
        if setting in RATED_SETTINGS and (passages := contexts.get((item.qid, setting)))
    ]
    verdicts = rate_contexts(judges, rated)
    timings["raters"] = time.perf_counter() - started
    sufficiency: dict[tuple[str, str], bool | None] = {}
    for (item, setting, _), verdict in zip(rated, verdicts[primary["name"]], strict=True):
        sufficiency[(item.qid, setting)] = (verdict.value == SUFFICIENT) if verdict.ok else None

    # 2. answers in every setting, classified C / A / H
    started = time.perf_counter()
    answered = [
        (item, setting, passages)
        for item in sample
        for setting in ss.settings
        if (passages := contexts.get((item.qid, setting))) is not None
    ]
    answer_params = GenerationParams(
        max_new_tokens=ss.max_new_tokens, temperature=0.0, seed=seed, grow_on_truncation=False
    )
    answers = answer_questions(
        rt.llm(ModelRole.ANSWERER),
        [ShortAnswerInput(question=i.question, passages=list(p)) for i, _, p in answered],
        answer_params,
    )
    timings["answers"] = time.perf_counter() - started
    started = time.perf_counter()
    correctness = correctness_judge(rt)
    correctness_calibration = calibrate_correctness_if_missing(rt, corpus, golden)
    cases = [
        AnswerCase(
            qid=item.qid,
            label=item.label,
            setting=setting,
            question=item.question,
            answer=answer,
            golds=(gold_answer(item),) if gold_answer(item) else (),
            sufficient=sufficiency.get((item.qid, setting)),
            sufficiency_judge=primary["name"] if setting in RATED_SETTINGS else None,
        )
        for (item, setting, _), answer in zip(answered, answers, strict=True)
    ]
    records = classify(cases, correctness)
    timings["correctness"] = time.perf_counter() - started
    cah_result = CAHEvaluator().evaluate(records)
    models = producing_models(rt.settings.index_backend, rt.settings.embedding_model, rt.backends())
    llm_models = rt.llm_models()
    record = {
        "corpus": corpus,
        "corpus_snapshot": snapshot.snapshot_id,
        "qa_set_version": qa_version,
        "models": {
            **models,
            "answerer": llm_models.get(ModelRole.ANSWERER.value),
            "judge": llm_models.get(ModelRole.JUDGE.value),
        },
    }
    judge_decisions = {
        "sufficiency": calibrations[primary["name"]].get("gate"),
        "correctness": correctness_calibration.get("gate"),
    }
    runs.record_evaluation(run_id, cah_result, **record, judges=judge_decisions)

    summary: dict[str, Any] = {
        "run_id": run_id,
        "set_name": set_name,
        **params,
        "seed": seed,
        "answerer": llm_models.get(ModelRole.ANSWERER.value),
        "judge_model": llm_models.get(ModelRole.JUDGE.value),
        "text_weight": text_weight,
        "text_weight_source": weight_source,
        "items": len(sample),
        "settings": list(ss.settings),
        "retrieval_k": ss.retrieval_k,
        "raters": _rater_view(judges, calibrations, rated, verdicts),
        "primary_rater": primary,
        "cah": {
            "correctness": correctness_calibration,
            "table": [row.as_dict() for row in cah_table(records, by=CAH_FACETS)],
            "counts": _cah_counts(records),
        },
    }

    rows = _selective_rows(records, sufficiency)
    if selective:
        started = time.perf_counter()
        summary["selective"] = _selective(rt, run_id, answered, answers, rows, seed, record)
        timings["selective"] = time.perf_counter() - started
    else:
        jsonsafe.mark_undefined(summary, "selective", "selective generation was not requested")
    summary["queries"] = _query_rows(answered, answers, records, rated, verdicts, summary)
    summary["seconds"] = {k: round(v, 3) for k, v in timings.items()}
    if usage_before is not None:
        summary["model_calls"] = rt.llm_usage.snapshot() - usage_before
    uri = rt.artifacts.put_bytes(
        sufficiency_key(run_id), jsonsafe.dumps(summary, "sufficiency.json", indent=1).encode()
    )
    put_parquet(rt, f"{run_prefix(run_id)}/sufficiency_queries.parquet", queries_frame(summary))
    return {**compact(summary), "sufficiency_uri": uri}


CAH_FACETS = ("setting", "sufficiency", "label")
