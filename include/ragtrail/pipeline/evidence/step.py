"""The evidence extractor evaluated on one QA set, as a pipeline step (SEER, METHODS §10).

``evaluate_evidence`` samples the set's questions (spread over labels, seeded) and gives each the
hybrid index's top-k at the set's best text weight. Then

1. evidence: the extractor in service (the registered champion, else the configured
   ``extractor`` role) writes it from the passages, and again with 1, 2, 4 (``noise_ratios``)
   irrelevant chunks added per retrieved one; its base model zero-shot writes it too when the
   one in service is a trained version; the model-free extractive baseline takes the sentences
   closest to the question up to the extractor's token count for the same question;
2. the three experts score every evidence: faithfulness (the configured entailment judge: do
   the passages entail it?; silver faithfulness: does the relevant chunk alone?), helpfulness
   (sigmoid of the gain in log p(gold answer) under the fixed scorer LM when the evidence is
   given) and conciseness (cosine of its embedding with that of the full-length answer, a
   sentence restating question and answer written once per item by the generator, cached);
   compression is passage tokens / evidence tokens;
3. end to end: the answerer answers from every evidence, from the full passages (at every
   noise level) and from nothing; each answer is classified like the C/A/H evaluation
   (abstention, normalised match, else the calibrated correctness judge). ``correct`` is a
   correct answer, or an abstention on an unanswerable question. A failed extraction leaves the
   answerer nothing, as a pipeline would pass on (it is counted against the failure threshold).

The ``evidence`` evaluator stores per-question values and aggregates (with n and intervals,
and the paired difference against the full passages and against no context) in the metrics
history under the set's run id; the drift check watches its primary metric ``correct`` for the
extractor. The summary (``runs/<run id>/evidence.json``) names every judge with its gate
decision. Every model call goes through the caches: a rerun makes none and gives identical
numbers. When more than ``evidence.max_failed_share`` of the extractions, answers,
faithfulness verdicts or helpfulness scores failed, the run ends ``failed`` and the step
raises (:mod:`ragtrail.failures`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import cast

from ragtrail.artifact_keys import evidence_key, evidence_queries_key
from ragtrail.config import ModelRole
from ragtrail.evaluate.evidence.evaluator import (
    EvidenceEvalConfig,
    EvidenceEvaluator,
    EvidenceInputs,
    EvidenceRow,
)
from ragtrail.evaluate.evidence.experts import (
    conciseness_scores,
    faithfulness_verdicts,
    helpfulness_scores,
    verdict_score,
)
from ragtrail.evaluate.evidence.extraction import (
    EvidenceInput,
    extract_evidence,
    extraction_params,
)
from ragtrail.evaluate.evidence.extractive import extractive_evidence
from ragtrail.evaluate.evidence.full_answers import FullAnswer, full_length_answers
from ragtrail.evaluate.evidence.measures import compression, token_count
from ragtrail.evaluate.evidence.noise import noisy_passages
from ragtrail.evaluate.sufficiency.cah import AnswerCase, Outcome, classify
from ragtrail.evaluate.sufficiency.short_answers import (
    ShortAnswer,
    ShortAnswerInput,
    answer_questions,
    short_answer_params,
)
from ragtrail.failures import FailureCount
from ragtrail.judges.contract import Judge
from ragtrail.llm.client import LLMClient
from ragtrail.llm.together import together
from ragtrail.pipeline.budgets import Allowance, budgeted_set_step, keep_finished
from ragtrail.pipeline.correctness import calibrate_correctness_if_missing, correctness_judge
from ragtrail.pipeline.evidence.views import compact, queries_frame
from ragtrail.pipeline.judges import (
    entailment_judge,
    gate_decisions,
    golden_items,
    ground_contexts,
)
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
from ragtrail.records import ModelKind, ModelSpec, QAItem, QuestionLabel
from ragtrail.runtime import Runtime
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.evidence_summary import (
    EvidenceQueryRow,
    EvidenceRun,
    EvidenceSummary,
    JudgeUsed,
)
from ragtrail.summaries.qa_sets import SampleSizing
from ragtrail.summaries.sufficiency_summary import AggregateRow

EXTRACTOR, BASE, EXTRACTIVE, FULL, NONE = "extractor", "base", "extractive", "full", "none"
EVIDENCE_METHODS = (EXTRACTOR, BASE, EXTRACTIVE)
"""Methods that write evidence (the other two answer from the passages or from nothing)."""
FALLBACK_BUDGET = 32
"""Extractive token budget for a question whose extractor evidence failed or came back empty
(the extractor's mean over the other questions is used first)."""


@dataclass
class Case:
    """One question under one method and noise level, filled in stage by stage."""

    item: QAItem
    method: str
    noise: float
    passages: list[str]
    evidence: str | None = None
    error: str | None = None
    scores: dict[str, float | None] = field(default_factory=dict)
    undefined: dict[str, str] = field(default_factory=dict)
    answer: str | None = None
    outcome: str | None = None
    correct: bool | None = None

    @property
    def setting(self) -> str:
        return f"{self.method}@{self.noise:g}"

    @property
    def context(self) -> list[str]:
        """What the answerer is given: the evidence, the passages, or nothing."""
        if self.method in EVIDENCE_METHODS:
            return [self.evidence] if self.evidence else []
        return list(self.passages) if self.method == FULL else []

    def set_score(self, name: str, value: float | None, reason: str = "") -> None:
        self.scores[name] = value
        if value is None:
            self.undefined[name] = reason or "not computed"


def evaluate_evidence(
    rt: Runtime,
    corpus: str,
    *,
    run_id: str,
    qa_set: str | Path | None = None,
    set_name: str | None = None,
    snapshot_id: str | None = None,
    max_items: int | None = None,
    noise_ratios: Sequence[float] | None = None,
    seed: int | None = None,
) -> EvidenceRun:
    """The evidence evaluation of one QA set (see the module docstring); arguments left None
    come from ``settings.evidence``."""
    es = rt.settings.evidence
    opened = open_set_run(
        rt,
        corpus,
        run_id,
        "evaluate_evidence",
        qa_set=qa_set,
        set_name=set_name,
        snapshot_id=snapshot_id,
    )
    ratios = sorted(set(es.noise_ratios if noise_ratios is None else noise_ratios) | {0.0})
    seed = rt.settings.seed if seed is None else seed
    n, sizing = sized_items(
        rt,
        corpus,
        "evidence",
        target_mde=es.target_mde,
        max_items=es.max_items if max_items is None else max_items,
        available=len(opened.items),
    )
    with (
        held_run(rt, run_id, opened.night),
        budgeted_set_step(
            rt,
            "evidence",
            opened,
            max_items=n,
            seed=seed,
            settings={**es.model_dump(mode="json"), "noise_ratios": ratios},
        ) as allowance,
    ):
        return keep_finished(
            allowance,
            lambda k: _evaluate(
                rt,
                opened,
                set_name=set_name,
                max_items=k,
                ratios=ratios,
                seed=seed,
                allowance=allowance,
                sizing=bounded_by_budget(sizing, k),
            ),
        )


def _evaluate(
    rt: Runtime,
    opened: SetRun,
    *,
    set_name: str | None,
    max_items: int,
    ratios: Sequence[float],
    seed: int,
    allowance: Allowance | None = None,
    sizing: SampleSizing | None = None,
) -> EvidenceRun:
    es = rt.settings.evidence
    corpus, run_id = opened.corpus, opened.run_id
    clock = StageClock(rt)
    sample = sample_items(opened.items, max_items, seed)
    text_weight, weight_source = best_text_weight(rt, run_id)
    extractor_spec, extractor_what = serving_spec(
        rt, rt.settings.registry.extractor_model_name, ModelRole.EXTRACTOR
    )
    base_spec = _base_spec(rt, extractor_spec)
    cases = _cases(rt, corpus, sample, ratios, text_weight, seed, with_base=base_spec is not None)
    clock.lap("contexts")

    # Each model step starts as soon as what it reads exists; on an endpoint, the steps that do
    # not read each other's results run at once.
    concurrent = rt.llm_calls_overlap()

    # 1. evidence, and the full-length answers conciseness compares it with
    _, sentences = together(
        [
            partial(_extract, rt, cases, extractor_spec, base_spec, seed),
            partial(_full_length_answers, rt, cases, seed),
        ],
        concurrent=concurrent,
    )
    _check(
        rt,
        run_id,
        FailureCount.of(
            "evidence extractions", (c.error for c in cases if c.method in (EXTRACTOR, BASE))
        ),
    )
    _extractive(rt, cases)
    clock.lap("evidence")
    golden, _ = golden_items(rt, corpus)
    with allowance.calibrating(rt, "correctness") if allowance else nullcontext():
        correctness = calibrate_correctness_if_missing(rt, corpus, golden)

    # 2. the experts (local models) beside the answers and their correctness (model calls)
    entail = entailment_judge(rt)
    answerer = rt.llm(ModelRole.ANSWERER)
    expert_failures, answered = together(
        [
            partial(_experts, rt, corpus, cases, entail, cast(dict, sentences)),
            partial(_answers, rt, answerer, cases, seed),
        ],
        concurrent=concurrent,
    )
    _check(rt, run_id, *cast(list[FailureCount], expert_failures))
    answers = cast(list[ShortAnswer], answered)
    _check(
        rt,
        run_id,
        FailureCount.of("answers", (a.error or "failed" if a.failed else None for a in answers)),
    )
    clock.lap("experts and answers")

    # 4. the evaluator, the run's metrics and the summary
    faith_gate = gate_decisions(rt, [entail])[entail.spec.name]
    gates = {"faithfulness": faith_gate.as_dict(), "correctness": correctness.get("gate") or {}}
    evaluator = EvidenceEvaluator(
        EvidenceEvalConfig(bootstrap_samples=es.bootstrap_samples, seed=seed)
    )
    result = evaluator.evaluate(EvidenceInputs(tuple(_row(c) for c in cases)))
    record = opened.record(
        rt,
        extractor=extractor_spec,
        answerer=answerer.backend.model_id,
        scorer=rt.scorer.model_id,
    )
    RunStore(rt.engine).record_evaluation(run_id, result, **record, judges=gates)
    if allowance is not None:
        allowance.done(len(sample))
    summary = EvidenceSummary(
        budget=allowance.note_now(rt) if allowance is not None else None,
        run_id=run_id,
        set_name=set_name,
        **opened.params,
        sample_size=sizing,
        seed=seed,
        extractor=extractor_spec,
        extractor_source=extractor_what,
        base=base_spec,
        answerer=answerer.backend.model_id,
        scorer=rt.scorer.model_id,
        full_answer_model=rt.llm(ModelRole.GENERATOR).backend.model_id,
        text_weight=text_weight,
        text_weight_source=weight_source,
        retrieval_k=es.retrieval_k,
        noise_ratios=list(ratios),
        items=len(sample),
        judges=[
            JudgeUsed(role="faithfulness", **_judge_fields(faith_gate.as_dict())),
            JudgeUsed(role="correctness", **_judge_fields(correctness.get("gate") or {})),
        ],
        aggregates=[AggregateRow.from_json(a.as_dict()) for a in result.aggregates],
        queries=[_query_row(c) for c in cases],
        failures={
            "extractions": sum(1 for c in cases if c.error),
            "answers": sum(1 for a in answers if a.failed),
        },
        seconds=clock.seconds,
        model_calls=clock.calls,
        undefined={}
        if base_spec
        else {"base": f"the extractor in service is the {extractor_what}"},
    )
    uri = rt.artifacts.put_bytes(evidence_key(run_id), summary.dumps(indent=1).encode())
    put_parquet(rt, evidence_queries_key(run_id), queries_frame(summary))
    return EvidenceRun(**dict(compact(summary)), evidence_uri=uri)


# ------------------------------------------------------------------------------- stages


def _extract(
    rt: Runtime, cases: Sequence[Case], extractor: str, base: str | None, seed: int
) -> None:
    """The extractor's (and its base model's) evidence on each of its cases."""
    params = extraction_params(rt.settings.evidence.max_new_tokens, seed)
    for method, spec in ((EXTRACTOR, extractor), (BASE, base)):
        chosen = [c for c in cases if c.method == method]
        if chosen and spec is not None:
            written = extract_evidence(
                rt.llm_for_spec(spec),
                [EvidenceInput(question=c.item.question, passages=c.passages) for c in chosen],
                params,
            )
            for case, evidence in zip(chosen, written, strict=True):
                case.evidence = None if evidence.failed else evidence.text
                case.error = evidence.error


def _experts(
    rt: Runtime,
    corpus: str,
    cases: Sequence[Case],
    entail: Judge,
    sentences: Mapping[str, FullAnswer],
) -> list[FailureCount]:
    """Faithfulness, helpfulness and conciseness of every case's evidence (local models)."""
    failures = [_faithfulness(rt, corpus, cases, entail), _helpfulness(rt, cases)]
    _conciseness(rt, cases, sentences)
    return failures


def _answers(
    rt: Runtime, answerer: LLMClient, cases: Sequence[Case], seed: int
) -> list[ShortAnswer]:
    """The answerer on each case's context, each answer classified against the gold answer
    (the correctness judge where no rule decides)."""
    answers = answer_questions(
        answerer,
        [ShortAnswerInput(question=c.item.question, passages=c.context) for c in cases],
        short_answer_params(rt.settings.evidence.answer_max_new_tokens, seed),
        stage="evidence.answers",
    )
    records = classify(
        [
            AnswerCase(
                qid=c.item.qid,
                label=c.item.label,
                setting=c.setting,
                question=c.item.question,
                answer=answer,
                golds=(c.item.gold,) if c.item.gold else (),
            )
            for c, answer in zip(cases, answers, strict=True)
        ],
        correctness_judge(rt),
    )
    for case, answer, record in zip(cases, answers, records, strict=True):
        case.answer = None if answer.failed else answer.text
        if record.outcome is None:
            case.undefined["correct"] = record.unscored_reason or "not scored"
            continue
        case.outcome = str(record.outcome)
        unanswerable = case.item.label == QuestionLabel.UNANSWERABLE
        case.correct = record.outcome == (Outcome.ABSTAIN if unanswerable else Outcome.CORRECT)
    return answers


# ----------------------------------------------------------------------------- contexts


def _base_spec(rt: Runtime, extractor_spec: str) -> str | None:
    """The base model of the extractor in service when that is a trained (registered) version,
    as an LLM spec; None when the one in service is already a base model."""
    parsed = ModelSpec.try_parse(extractor_spec)
    if parsed is None or parsed.kind != ModelKind.REGISTRY:
        return None
    from ragtrail.pipeline.serving import base_model_of

    base = base_model_of(rt, extractor_spec, role=ModelRole.EXTRACTOR)
    return base if ModelSpec.try_parse(base) is not None else f"hf:{base}"


def _cases(
    rt: Runtime,
    corpus: str,
    sample: Sequence[QAItem],
    ratios: Sequence[float],
    text_weight: float,
    seed: int,
    *,
    with_base: bool,
) -> list[Case]:
    """Every (question, method, noise) to evaluate, with the passages it starts from."""
    es = rt.settings.evidence
    hits = scenario_corpus(rt, corpus).search(
        [i.question for i in sample], es.retrieval_k, text_weight
    )
    chunks = rt.store.get_chunks(corpus) if any(r > 0 for r in ratios) else []
    cases: list[Case] = []
    for item, passages in zip(sample, hits, strict=True):
        retrieved = [p.text for p in passages]
        near = set(item.ground_doc_ids) | {p.doc_id for p in passages}
        distractors = sorted(c.text for c in chunks if c.doc_id not in near)
        for ratio in ratios:
            noisy = (
                noisy_passages(
                    retrieved, distractors, ratio, random.Random(f"{seed}/{item.qid}/{ratio}")
                )
                if ratio > 0
                else list(retrieved)
            )
            cases.append(Case(item, EXTRACTOR, ratio, noisy))
            cases.append(Case(item, FULL, ratio, noisy))
        for method in (BASE, EXTRACTIVE, NONE) if with_base else (EXTRACTIVE, NONE):
            cases.append(Case(item, method, 0.0, list(retrieved)))
    return cases


def _extractive(rt: Runtime, cases: Sequence[Case]) -> None:
    """The model-free baseline, each question at its extractor evidence's token count."""
    budgets = {
        c.item.qid: token_count(c.evidence)
        for c in cases
        if c.method == EXTRACTOR and c.noise == 0 and c.evidence
    }
    fallback = round(sum(budgets.values()) / len(budgets)) if budgets else FALLBACK_BUDGET
    for case in cases:
        if case.method == EXTRACTIVE:
            case.evidence = extractive_evidence(
                case.item.question,
                case.passages,
                budget_tokens=budgets.get(case.item.qid, fallback),
                encode=rt.cached_embedder.encode,
            )


# ------------------------------------------------------------------------------ experts


def _faithfulness(rt: Runtime, corpus: str, cases: Sequence[Case], judge: Judge) -> FailureCount:
    """Faithfulness to the passages given and (silver) to the relevant chunk alone; also
    compression. The judge's score is its probability (or similarity) where it has one."""
    items = list({c.item.qid: c.item for c in cases}.values())
    grounds = dict(zip((i.qid for i in items), ground_contexts(rt, corpus, items), strict=True))
    scored = [c for c in cases if c.method in EVIDENCE_METHODS]
    for case in cases:
        passage_tokens = sum(token_count(p) for p in case.passages)
        case.scores["passage_tokens"] = float(passage_tokens)
        if case.method not in EVIDENCE_METHODS:
            continue
        if not case.evidence:
            why = case.error or "the evidence is empty"
            for name in ("compression", "faithfulness", "silver_faithfulness"):
                case.set_score(name, None, why)
            continue
        tokens = token_count(case.evidence)
        case.scores["evidence_tokens"] = float(tokens)
        case.set_score("compression", compression(passage_tokens, tokens), "no evidence tokens")
    pairs: list[tuple[Case, str, str]] = []
    for case in scored:
        if not case.evidence:
            continue
        pairs.append((case, "faithfulness", "\n\n".join(case.passages)))
        ground = grounds.get(case.item.qid)
        if ground:
            pairs.append((case, "silver_faithfulness", ground))
        else:
            case.set_score("silver_faithfulness", None, "the corpus holds no ground chunk")
    verdicts = faithfulness_verdicts(
        judge, [(premise, c.evidence or "") for c, _, premise in pairs]
    )
    for (case, name, _), verdict in zip(pairs, verdicts, strict=True):
        case.set_score(name, verdict_score(verdict), verdict.error or "no verdict")
    return FailureCount.of(
        "faithfulness verdicts", (None if v.ok else (v.error or "no value") for v in verdicts)
    )


def _helpfulness(rt: Runtime, cases: Sequence[Case]) -> FailureCount:
    """sigmoid(log p(gold | question + evidence) - log p(gold | question)) under the scorer; the
    full passages are scored as their own evidence. Undefined without a gold answer."""
    wanted = [c for c in cases if c.method in (*EVIDENCE_METHODS, FULL)]
    for case in wanted:
        if not case.item.gold:
            case.set_score(
                "helpfulness", None, "no gold answer (unanswerable, or its answer is empty)"
            )
        elif case.method != FULL and not case.evidence:
            case.set_score("helpfulness", None, case.error or "the evidence is empty")
    scored = [c for c in wanted if "helpfulness" not in c.scores]
    try:
        values = helpfulness_scores(
            rt.scorer, [(c.item.question, _evidence_text(c), c.item.gold) for c in scored]
        )
    except (RuntimeError, ValueError) as exc:  # the scorer model failed: every score fails
        for case in scored:
            case.set_score("helpfulness", None, f"scorer failed: {exc}")
        return FailureCount.of("helpfulness scores", [str(exc)] * len(scored))
    for case, value in zip(scored, values, strict=True):
        case.set_score("helpfulness", value)
    return FailureCount.of("helpfulness scores", [None] * len(scored))


def _evidence_text(case: Case) -> str:
    return "\n\n".join(case.passages) if case.method == FULL else case.evidence or ""


def _full_length_answers(rt: Runtime, cases: Sequence[Case], seed: int) -> dict[str, FullAnswer]:
    """Each answerable item's gold answer as one full sentence (written once per item, cached),
    by question id: what conciseness compares the evidence with."""
    items = sorted({c.item.qid: c.item for c in cases}.values(), key=lambda i: i.qid)
    answerable = [i for i in items if i.gold]
    written = full_length_answers(
        rt.llm(ModelRole.GENERATOR), [(i.question, i.gold) for i in answerable], seed=seed
    )
    return {i.qid: w for i, w in zip(answerable, written, strict=True)}


def _conciseness(rt: Runtime, cases: Sequence[Case], sentences: Mapping[str, FullAnswer]) -> None:
    """Cosine between the evidence and the item's full-length answer."""
    scored = []
    for case in cases:
        if case.method not in EVIDENCE_METHODS:
            continue
        full = sentences.get(case.item.qid)
        if full is None:
            case.set_score(
                "conciseness", None, "no gold answer (unanswerable, or its answer is empty)"
            )
        elif full.sentence is None:
            case.set_score("conciseness", None, f"no full-length answer: {full.error}")
        elif not case.evidence:
            case.set_score("conciseness", None, case.error or "the evidence is empty")
        else:
            scored.append((case, full.sentence))
    values = conciseness_scores(
        rt.cached_embedder.encode, [(full, c.evidence or "") for c, full in scored]
    )
    for (case, _), value in zip(scored, values, strict=True):
        case.set_score("conciseness", value, "a zero embedding")


# ------------------------------------------------------------------------------- output


def _row(case: Case) -> EvidenceRow:
    s = case.scores
    tokens = s.get("evidence_tokens")
    return EvidenceRow(
        qid=case.item.qid,
        label=case.item.label,
        method=case.method,
        noise=case.noise,
        correct=case.correct,
        unscored_reason=case.undefined.get("correct"),
        faithfulness=s.get("faithfulness"),
        silver_faithfulness=s.get("silver_faithfulness"),
        helpfulness=s.get("helpfulness"),
        conciseness=s.get("conciseness"),
        compression=s.get("compression"),
        evidence_tokens=None if tokens is None else int(tokens),
        passage_tokens=int(s.get("passage_tokens") or 0),
    )


def _query_row(case: Case) -> EvidenceQueryRow:
    s = case.scores
    tokens = s.get("evidence_tokens")
    return EvidenceQueryRow(
        qid=case.item.qid,
        label=case.item.label,
        method=case.method,
        noise=case.noise,
        passages=len(case.passages),
        evidence=case.evidence if case.method in EVIDENCE_METHODS else None,
        evidence_tokens=None if tokens is None else int(tokens),
        passage_tokens=int(s.get("passage_tokens") or 0),
        compression=s.get("compression"),
        faithfulness=s.get("faithfulness"),
        silver_faithfulness=s.get("silver_faithfulness"),
        helpfulness=s.get("helpfulness"),
        conciseness=s.get("conciseness"),
        answer=case.answer,
        outcome=case.outcome,
        correct=case.correct,
        undefined=dict(case.undefined),
    )


def _judge_fields(gate: dict[str, object]) -> dict[str, object]:
    return {
        "judge": str(gate.get("judge") or "unknown"),
        "gates": bool(gate.get("gates")),
        "reason": str(gate.get("reason") or ""),
        **{k: gate.get(k) for k in ("metric", "value", "ci_low", "ci_high", "n", "ci_method")},
    }


def _check(rt: Runtime, run_id: str, *counts: FailureCount) -> None:
    check_step_failures(
        run_id,
        "evidence evaluation",
        counts,
        max_share=rt.settings.evidence.max_failed_share,
        setting="evidence.max_failed_share",
    )
