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

When more than ``sufficiency.max_failed_share`` of the primary rater's verdicts, of the answers,
of the correctness verdicts or of either confidence score failed, the run ends ``failed`` with
the counts and the step raises (:mod:`ragtrail.failures`); nothing more of it is recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any, cast

from ragtrail import jsonsafe
from ragtrail.artifact_keys import selective_policy_key, sufficiency_key, sufficiency_queries_key
from ragtrail.config import ModelRole
from ragtrail.evaluate.evidence.extraction import (
    EvidenceInput,
    extract_evidence,
    extraction_params,
)
from ragtrail.evaluate.sufficiency.cah import (
    JUDGE_FAILED,
    CAHEvaluation,
    CAHRecord,
    Outcome,
    evaluate_cah,
    may_be_scored,
)
from ragtrail.evaluate.sufficiency.cah import AnswerCase as CAHCase
from ragtrail.evaluate.sufficiency.confidence import (
    ConfidenceRow,
    ConfidenceScore,
    p_correct,
    p_true,
)
from ragtrail.evaluate.sufficiency.selective import (
    WITH_SUFFICIENCY,
    CurveSummary,
    SelectiveEvalConfig,
    SelectiveEvaluator,
    SelectiveInputs,
    SelectiveRow,
    SelectiveRun,
)
from ragtrail.evaluate.sufficiency.selective_policy import P_CORRECT, P_TRUE
from ragtrail.evaluate.sufficiency.selective_policy import SUFFICIENT as SUFFICIENT_FEATURE
from ragtrail.evaluate.sufficiency.short_answers import (
    ShortAnswer,
    ShortAnswerInput,
    answer_questions,
    short_answer_params,
)
from ragtrail.failures import FailureCount
from ragtrail.judges.contract import Judge, JudgeInput, Verdict
from ragtrail.judges.sufficiency_raters import SUFFICIENT
from ragtrail.llm.together import together
from ragtrail.pipeline.budgets import Allowance, budgeted_set_step, keep_finished
from ragtrail.pipeline.correctness import calibrate_correctness_if_missing, correctness_judge
from ragtrail.pipeline.judges import golden_items, ground_contexts
from ragtrail.pipeline.passage_sources import scenario_corpus
from ragtrail.pipeline.run_io import (
    SetRun,
    StageClock,
    best_text_weight,
    check_step_failures,
    held_run,
    open_set_run,
    put_parquet,
    sample_items,
)
from ragtrail.pipeline.sample_size import bounded_by_budget, sized_items
from ragtrail.pipeline.serving import serving_spec
from ragtrail.pipeline.sufficiency.raters import calibrate_sufficiency_raters, sufficiency_raters
from ragtrail.pipeline.sufficiency.views import (
    RATED_SETTINGS,
    cah_view,
    compact,
    queries_frame,
    query_rows,
    rater_view,
    sufficiency_feature,
)
from ragtrail.records import QAItem
from ragtrail.runtime import Runtime
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.qa_sets import SampleSizing
from ragtrail.summaries.sufficiency_summary import (
    AggregateRow,
    CurvePointRow,
    PrimaryRater,
    SelectiveAuc,
    SelectiveCurves,
    SelectiveView,
    SufficiencyRun,
    SufficiencySummary,
    ThresholdPoint,
)

log = logging.getLogger(__name__)


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
    """``(qid, setting) -> passages`` (None: the corpus holds no ground context for the item, or
    the extractor failed on it, which the step counts against its failure threshold)."""
    out: dict[tuple[str, str], list[str] | None] = {}
    if ("retrieved" in settings or "evidence" in settings) and items:
        hits = scenario_corpus(rt, corpus).search([i.question for i in items], k, text_weight)
        retrieved = [[p.text for p in passages] for passages in hits]
        if "retrieved" in settings:
            for item, texts in zip(items, retrieved, strict=True):
                out[(item.qid, "retrieved")] = texts
        if "evidence" in settings:
            out.update(_evidence_contexts(rt, items, retrieved))
    if "gold" in settings:
        for item, ground in zip(items, ground_contexts(rt, corpus, items), strict=True):
            out[(item.qid, "gold")] = None if ground is None else [ground]
    if "none" in settings:
        for item in items:
            out[(item.qid, "none")] = []
    return out


def _evidence_contexts(
    rt: Runtime, items: Sequence[QAItem], retrieved: Sequence[list[str]]
) -> dict[tuple[str, str], list[str] | None]:
    """Answer-from-evidence mode: the evidence the extractor in service cuts from each item's
    retrieved chunks (one passage; none when it found nothing, None when the call failed)."""
    spec, _ = serving_spec(rt, rt.settings.registry.extractor_model_name, ModelRole.EXTRACTOR)
    written = extract_evidence(
        rt.llm_for_spec(spec),
        [
            EvidenceInput(question=i.question, passages=p)
            for i, p in zip(items, retrieved, strict=True)
        ],
        extraction_params(rt.settings.evidence.max_new_tokens, rt.settings.seed),
    )
    return {
        (item.qid, "evidence"): None if e.failed else ([e.text] if e.text else [])
        for item, e in zip(items, written, strict=True)
    }


# ------------------------------------------------------------------------------- raters


def choose_primary(
    raters: Sequence[Judge], calibrations: Mapping[str, Mapping[str, Any]]
) -> PrimaryRater:
    """The rater whose verdicts split C/A/H into sufficient / insufficient: the gating rater
    with the highest calibration value, else the best advising one (named as advising), else
    the first configured one."""

    def value(name: str) -> float:
        v = calibrations.get(name, {}).get("value")
        return float(v) if isinstance(v, int | float) else float("-inf")

    names = [r.spec.name for r in raters]
    gating = [n for n in names if (calibrations.get(n, {}).get("gate") or {}).get("gates")]
    best = max(gating or names, key=lambda n: (value(n), -names.index(n)))
    if gating:
        reason = f"the gating rater with the highest agreement ({value(best):.2f})"
    elif value(best) != float("-inf"):
        reason = f"no rater gates; the best-agreeing one ({value(best):.2f}) only advises"
    else:
        reason = "no rater has a calibration; the first configured one only advises"
    return PrimaryRater(name=best, gates=bool(gating), reason=reason)


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
) -> SufficiencyRun:
    """Sufficiency, C/A/H and (optionally) selective generation on one QA set; see the module
    docstring. Arguments left None come from ``settings.sufficiency`` / ``settings.selective``.
    Returns the set's headline and where the full summary (:class:`SufficiencySummary`) is
    stored (:func:`sufficiency_key`)."""
    ss = rt.settings.sufficiency
    selective = rt.settings.selective.enabled if selective is None else selective
    seed = rt.settings.seed if seed is None else seed
    judges = sufficiency_raters(rt, raters)  # unknown rater names fail before the run is touched
    opened = open_set_run(
        rt,
        corpus,
        run_id,
        "evaluate_sufficiency",
        qa_set=qa_set,
        set_name=set_name,
        snapshot_id=snapshot_id,
    )
    n, sizing = sized_items(
        rt,
        corpus,
        "sufficiency",
        target_mde=ss.target_mde,
        max_items=ss.max_items if max_items is None else max_items,
        available=len(opened.items),
    )
    with (
        held_run(rt, run_id, opened.night),
        budgeted_set_step(
            rt,
            "sufficiency",
            opened,
            max_items=n,
            seed=seed,
            settings={**ss.model_dump(mode="json"), "selective": selective},
        ) as allowance,
    ):
        return keep_finished(
            allowance,
            lambda k: _evaluate(
                rt,
                opened,
                judges,
                set_name=set_name,
                max_items=k,
                seed=seed,
                selective=selective,
                allowance=allowance,
                sizing=bounded_by_budget(sizing, k),
            ),
        )


def _evaluate(
    rt: Runtime,
    opened: SetRun,
    judges: list[Judge],
    *,
    set_name: str | None,
    max_items: int,
    seed: int,
    selective: bool,
    allowance: Allowance | None = None,
    sizing: SampleSizing | None = None,
) -> SufficiencyRun:
    """The body of :func:`evaluate_sufficiency`, on the opened and held run."""
    ss = rt.settings.sufficiency
    corpus, run_id = opened.corpus, opened.run_id
    sample = sample_items(opened.items, max_items, seed)
    text_weight, weight_source = best_text_weight(rt, run_id)
    runs = RunStore(rt.engine)
    answerer, judge_model = (
        rt.llm(r).backend.model_id for r in (ModelRole.ANSWERER, ModelRole.JUDGE)
    )
    record = opened.record(rt, answerer=answerer, judge=judge_model)
    clock = StageClock(rt)
    contexts = item_contexts(
        rt, corpus, sample, ss.settings, k=ss.retrieval_k, text_weight=text_weight
    )
    if "evidence" in ss.settings:
        missing = (contexts[(i.qid, "evidence")] is None for i in sample)
        _check(
            rt,
            run_id,
            FailureCount.of("evidence extractions", ("failed" if m else None for m in missing)),
        )
    clock.lap("contexts")

    # Judges are calibrated on the corpus's golden references first (cached per version; the
    # night's calibration step has done it), then every model step runs as soon as what it reads
    # exists: on an endpoint, the steps that do not read each other's results run at once.
    golden, _ = golden_items(rt, corpus)
    with _aside(rt, allowance, "raters"):
        calibrations = calibrate_sufficiency_raters(rt, corpus, golden, judges)
    with _aside(rt, allowance, "correctness"):
        correctness = calibrate_correctness_if_missing(rt, corpus, golden)
    primary = choose_primary(judges, calibrations)
    clock.lap("calibration")
    concurrent = rt.llm_calls_overlap()

    # 1. every rater on each (question, context), and the answers in every setting
    rated = [
        (item, setting, passages)
        for item in sample
        for setting in ss.settings
        if setting in RATED_SETTINGS and (passages := contexts.get((item.qid, setting)))
    ]
    inputs = [
        JudgeInput(question=i.question, context="\n\n".join(p), answer=i.gold) for i, _, p in rated
    ]
    answered = [
        (item, setting, passages)
        for item in sample
        for setting in ss.settings
        if (passages := contexts.get((item.qid, setting))) is not None
    ]
    answer_inputs = [
        ShortAnswerInput(question=i.question, passages=list(p)) for i, _, p in answered
    ]
    # the answers first: their chain (judging, confidence) is the longest, the verdicts end here
    answered_texts, *rater_verdicts = together(
        [
            partial(
                answer_questions,
                rt.llm(ModelRole.ANSWERER),
                answer_inputs,
                short_answer_params(ss.max_new_tokens, seed),
            ),
            *(partial(judge.judge, inputs) for judge in judges),
        ],
        concurrent=concurrent,
    )
    verdicts = {
        judge.spec.name: cast(list[Verdict], v)
        for judge, v in zip(judges, rater_verdicts, strict=True)
    }
    answers = cast(list[ShortAnswer], answered_texts)
    _check(rt, run_id, _verdict_failures(f"verdicts of {primary.name}", verdicts[primary.name]))
    _check(
        rt,
        run_id,
        FailureCount.of("answers", (a.error or "failed" if a.failed else None for a in answers)),
    )
    sufficient = {
        (item.qid, setting): (v.value == SUFFICIENT) if v.ok else None
        for (item, setting, _), v in zip(rated, verdicts[primary.name], strict=True)
    }
    clock.lap("raters and answers")

    # 2. each answer Correct / Abstain / Hallucinate and, for selective generation, the
    #    answerer's confidence in the answers that may be correct or hallucinated
    cases = [
        CAHCase(
            qid=item.qid,
            label=item.label,
            setting=setting,
            question=item.question,
            answer=answer,
            golds=(item.gold,) if item.gold else (),
            sufficient=sufficient.get((item.qid, setting)),
            sufficiency_judge=primary.name if setting in RATED_SETTINGS else None,
        )
        for (item, setting, _), answer in zip(answered, answers, strict=True)
    ]
    judge = correctness_judge(rt)
    early: dict[int, dict[str, ConfidenceScore]] = {}  # confidence computed beside the judge
    if selective and concurrent:
        # beside the judge: every answer it or a rule may score (those it fails on are dropped)
        scorable = [i for i, case in enumerate(cases) if may_be_scored(case, judge)]
        scores_done, cah_done = together(
            [
                partial(_confidence, rt, cases, answered, scorable, seed),  # two calls deep
                partial(evaluate_cah, cases, judge),
            ],
            concurrent=True,
        )
        cah, early = cast(CAHEvaluation, cah_done), cast(dict, scores_done)
    else:
        cah = evaluate_cah(cases, judge)
    judged = [r for r in cah.records if r.verdict is not None]
    _check(
        rt,
        run_id,
        FailureCount.of(
            "correctness verdicts",
            (
                r.unscored_reason
                if r.unscored_reason and r.unscored_reason.startswith(JUDGE_FAILED)
                else None
                for r in judged
            ),
        ),
    )
    gates = {
        "sufficiency": (calibrations[primary.name].get("gate") or {}),
        "correctness": correctness.get("gate") or {},
    }
    runs.record_evaluation(run_id, cah.result, **record, judges=gates)

    confidence: dict[int, dict[str, ConfidenceScore]] = {}
    policy = None
    selective_view: SelectiveView | None = None
    undefined: dict[str, str] = {}
    if selective:
        chosen = [
            i
            for i, r in enumerate(cah.records)
            if r.outcome in (Outcome.CORRECT, Outcome.HALLUCINATE)
        ]
        if not concurrent:
            early = _confidence(rt, cases, answered, chosen, seed)
        confidence = {i: early[i] for i in chosen}
        _check(
            rt,
            run_id,
            *(
                FailureCount.of(
                    f"{name} confidence scores",
                    (
                        None if scores[name].value is not None else (scores[name].error or "failed")
                        for scores in confidence.values()
                    ),
                )
                for name in (P_TRUE, P_CORRECT)
                if any(name in scores for scores in confidence.values())
            ),
        )
        clock.lap("correctness and confidence")
        evaluator = SelectiveEvaluator(_selective_config(rt, seed))
        run = evaluator.run(SelectiveInputs(_selective_rows(cah.records, confidence)))
        policy = run.policies.get(WITH_SUFFICIENCY)
        runs.record_evaluation(run_id, evaluator.result_of(run), **record, judges=gates)
        selective_view = _selective_view(rt, run_id, run, evaluator, confidence)
        clock.lap("selective")
    else:
        clock.lap("correctness")
        undefined["selective"] = "selective generation was not requested"
    ratings = {
        (item.qid, setting): {name: vs[i].value for name, vs in verdicts.items()}
        for i, (item, setting, _) in enumerate(rated)
    }
    if allowance is not None:
        allowance.done(len(sample))
    summary = SufficiencySummary(
        budget=allowance.note_now(rt) if allowance is not None else None,
        run_id=run_id,
        set_name=set_name,
        **opened.params,
        sample_size=sizing,
        seed=seed,
        answerer=answerer,
        judge_model=judge_model,
        text_weight=text_weight,
        text_weight_source=weight_source,
        items=len(sample),
        settings=list(ss.settings),
        retrieval_k=ss.retrieval_k,
        raters=rater_view(judges, calibrations, rated, verdicts),
        primary_rater=primary,
        cah=cah_view(cah, correctness),
        selective=selective_view,
        queries=query_rows(answered, cah.records, ratings, confidence, policy),
        seconds=clock.seconds,
        model_calls=clock.calls,
        undefined=undefined,
    )
    uri = rt.artifacts.put_bytes(sufficiency_key(run_id), summary.dumps(indent=1).encode())
    put_parquet(rt, sufficiency_queries_key(run_id), queries_frame(summary))
    return SufficiencyRun(**dict(compact(summary)), sufficiency_uri=uri)


def _aside(rt: Runtime, allowance: Allowance | None, what: str) -> AbstractContextManager[None]:
    """A judge calibration inside the step, accounted to the calibration step (budgets)."""
    return allowance.calibrating(rt, what) if allowance is not None else nullcontext()


def _verdict_failures(what: str, verdicts: Sequence[Verdict]) -> FailureCount:
    return FailureCount.of(what, (None if v.ok else (v.error or "no value") for v in verdicts))


def _check(rt: Runtime, run_id: str, *counts: FailureCount) -> None:
    check_step_failures(
        run_id,
        "sufficiency evaluation",
        counts,
        max_share=rt.settings.sufficiency.max_failed_share,
        setting="sufficiency.max_failed_share",
    )


# --------------------------------------------------------------------- selective generation


def _selective_config(rt: Runtime, seed: int) -> SelectiveEvalConfig:
    sel = rt.settings.selective
    return SelectiveEvalConfig(
        confidence_features=(P_TRUE, P_CORRECT) if sel.p_correct else (P_TRUE,),
        fallback_feature=P_TRUE,
        test_share=sel.test_share,
        iterations=sel.search_iterations,
        target_coverage=sel.target_coverage,
        bootstrap_samples=sel.bootstrap_samples,
        seed=seed,
    )


def _confidence(
    rt: Runtime,
    cases: Sequence[CAHCase],
    answered: Sequence[tuple[QAItem, str, list[str]]],
    rows: Sequence[int],
    seed: int,
) -> dict[int, dict[str, ConfidenceScore]]:
    """The answerer's confidence features (P(True), and P(Correct) when configured) of the
    answers ``rows`` (indices into ``cases``), by answer index; the two run at once on an
    endpoint."""
    sel = rt.settings.selective
    inputs = [
        ConfidenceRow(
            question=cases[i].question,
            passages=tuple(answered[i][2]),
            answer=cases[i].answer.text,
        )
        for i in rows
    ]
    client = rt.llm(ModelRole.ANSWERER)
    steps = {
        P_TRUE: partial(
            p_true,
            client,
            inputs,
            samples=sel.p_true_samples,
            asks=sel.p_true_asks,
            temperature=sel.sample_temperature,
            seed=seed,
        )
    }
    if sel.p_correct:
        steps[P_CORRECT] = partial(p_correct, client, inputs, seed=seed)
    scores = dict(
        zip(steps, together(list(steps.values()), concurrent=client.concurrent), strict=True)
    )
    return {i: {k: v[j] for k, v in scores.items()} for j, i in enumerate(rows)}


def _selective_rows(
    records: Sequence[CAHRecord], confidence: Mapping[int, Mapping[str, ConfidenceScore]]
) -> list[SelectiveRow]:
    """The policy's rows: the confidence features of every answer that is correct or
    hallucinated (abstentions already abstain; unscored answers have no outcome to learn),
    ``confidence`` by answer index, plus the sufficiency feature."""
    selective_rows = []
    for i, scores in confidence.items():
        record = records[i]
        case = record.case
        features: dict[str, float | None] = {k: v.value for k, v in scores.items()}
        features[SUFFICIENT_FEATURE] = sufficiency_feature(case.setting, case.sufficient)
        selective_rows.append(
            SelectiveRow(
                row_id=f"{case.qid}/{case.setting}",
                qid=case.qid,
                features=features,
                correct=record.outcome == Outcome.CORRECT,
                hallucinated=record.outcome == Outcome.HALLUCINATE,
            )
        )
    return selective_rows


def _selective_view(
    rt: Runtime,
    run_id: str,
    run: SelectiveRun,
    evaluator: SelectiveEvaluator,
    confidence: Mapping[int, Mapping[str, ConfidenceScore]],
) -> SelectiveView:
    """What the report and CLI read; the policy (with split and metrics) is its own artifact."""
    comparison = run.comparison
    aggregates = {a.metric: a.as_dict() for a in evaluator.result_of(run).aggregates}
    policy = run.policies.get(WITH_SUFFICIENCY)
    status = "fitted" if policy is not None else "undefined"
    document = {
        "run_id": run_id,
        "config": evaluator.config_dict(),
        **run.as_dict(),
        "metrics": list(aggregates.values()),
    }
    uri = rt.artifacts.put_bytes(
        selective_policy_key(run_id),
        jsonsafe.dumps(document, "selective_policy.json", indent=1).encode(),
    )

    def curve(summary: CurveSummary | None) -> list[CurvePointRow] | None:
        if summary is None:
            return None
        return [CurvePointRow.from_json(p.as_dict()) for p in summary.curve]

    threshold = None
    if comparison.with_sufficiency is not None:
        point = comparison.with_sufficiency.at_target
        threshold = ThresholdPoint(
            target_coverage=comparison.target_coverage,
            **point.as_dict(),
            value=point.threshold,
        )
    failed = {
        name: sum(1 for scores in confidence.values() if scores[name].value is None)
        for name in (P_TRUE, P_CORRECT)
        if any(name in scores for scores in confidence.values())
    }

    def auc(metric: str) -> AggregateRow | None:
        found = aggregates.get(metric)
        return None if found is None else AggregateRow.from_json(found)

    return SelectiveView(
        status=status,
        reason=run.policy_undefined.get(WITH_SUFFICIENCY, ""),
        features=list(policy.features) if policy else [SUFFICIENT_FEATURE, P_TRUE],
        n_rows=len(confidence),
        n_train=len(run.train_qids),
        n_test=comparison.n_questions,
        excluded=comparison.excluded_missing,
        confidence_failed=failed,
        confidence_source=(
            comparison.confidence_only.source if comparison.confidence_only else None
        ),
        auc=SelectiveAuc(
            confidence=auc("auc_confidence"),
            sufficiency_confidence=auc("auc_sufficiency_confidence"),
            gain=auc("auc_gain"),
        ),
        curves=SelectiveCurves(
            confidence=curve(comparison.confidence_only),
            sufficiency_confidence=curve(comparison.with_sufficiency),
        ),
        threshold=threshold,
        policy_uri=uri,
        undefined_reasons=dict(comparison.undefined),
        policy=policy.as_dict() if policy is not None else None,
    )
