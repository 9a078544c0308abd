"""Correct / Abstain / Hallucinate: what an answer did, and tables of it by context and label.

Each :class:`AnswerCase` (a question answered in one setting: with retrieved context, with the
gold context, or without retrieval) is classified by :func:`classify`, first rule that applies:

1. the answer failed (model error, cut-off reply) -> not scored, counted ("answer failed: ...");
2. the answer abstains (:func:`~ragtrail.evaluate.sufficiency.abstention.is_abstention`) -> ABSTAIN;
3. the question is labelled unanswerable and was answered -> HALLUCINATE (nothing it could say
   was right);
4. an answerable question without a gold answer -> not scored ("no gold answer");
5. the normalised answer contains a normalised gold answer
   (:func:`~ragtrail.evaluate.sufficiency.answer_match.matches_gold`) -> CORRECT;
6. otherwise the correctness judge decides, in one batched call for all such cases: correct ->
   CORRECT, incorrect -> HALLUCINATE; a failed verdict -> not scored with its error; with no
   judge -> not scored ("no correctness judge").

:func:`cah_table` crosses the records by any of ``setting``, ``sufficiency`` (sufficient /
insufficient / unrated) and ``label``, each with an ``"all"`` level, and gives every cell its
counts and the three rates over the *scored* answers with a 95% Wilson interval (undefined, with
the reason, for a cell with nothing scored). The ``cah`` evaluator stores the same cells through
the evaluator contract, with ``hallucination_rate`` as its primary metric (lower is better).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ragtrail.config import ANSWER_SETTINGS
from ragtrail.evaluate.contract import (
    Aggregate,
    BaseEvaluator,
    EvaluationResult,
    QueryValue,
    register_evaluator,
)
from ragtrail.evaluate.sufficiency.answer_match import matches_gold
from ragtrail.evaluate.sufficiency.short_answers import ShortAnswer
from ragtrail.jsonsafe import JsonObject, check_finite
from ragtrail.judges.calibration import Estimate, proportion
from ragtrail.judges.contract import Judge, JudgeInput, VerdictType
from ragtrail.judges.correctness import CORRECT, INCORRECT
from ragtrail.languages import detect_language
from ragtrail.records import LABELS, QuestionLabel


class Outcome(StrEnum):
    """What an answer did."""

    CORRECT = "correct"
    ABSTAIN = "abstain"
    HALLUCINATE = "hallucinate"


OUTCOMES: tuple[Outcome, ...] = tuple(Outcome)

SUFFICIENT, INSUFFICIENT, UNRATED = "sufficient", "insufficient", "unrated"
SUFFICIENCY_LEVELS = (SUFFICIENT, INSUFFICIENT, UNRATED)
ALL = "all"
"""The facet value of a table cell over every value of that facet."""
CAH_FACETS: tuple[str, ...] = ("setting", "sufficiency", "label")

BY_ABSTENTION, BY_MATCH, BY_UNANSWERABLE = "abstention", "match", "unanswerable"
ANSWER_FAILED = "answer failed"
NO_GOLD = "no gold answer"
NO_JUDGE = "no correctness judge"
JUDGE_FAILED = "correctness judge failed"

RATE_METRICS: dict[str, Outcome] = {
    "correct_rate": Outcome.CORRECT,
    "abstain_rate": Outcome.ABSTAIN,
    "hallucination_rate": Outcome.HALLUCINATE,
}
UNSCORED_RATE = "unscored_rate"


@dataclass(frozen=True)
class AnswerCase:
    """One question answered in one setting, with what is known about it.

    ``golds``: the gold answers (empty for unanswerable questions, and for answerable ones
    whose set has none); ``sufficient``: a sufficiency rater's verdict on the context the answer
    saw (None when not rated) and ``sufficiency_judge`` which rater gave it.
    """

    qid: str
    label: str
    setting: str
    question: str
    answer: ShortAnswer
    golds: tuple[str, ...] = ()
    sufficient: bool | None = None
    sufficiency_judge: str | None = None

    @property
    def sufficiency(self) -> str:
        if self.sufficient is None:
            return UNRATED
        return SUFFICIENT if self.sufficient else INSUFFICIENT


@dataclass(frozen=True)
class CAHRecord:
    """A classified case: ``outcome`` and what decided it, or ``unscored_reason``."""

    case: AnswerCase
    outcome: Outcome | None
    decided_by: str | None
    verdict: Mapping[str, Any] | None = None
    unscored_reason: str | None = None

    def __post_init__(self) -> None:
        if (self.outcome is None) == (self.unscored_reason is None):
            raise ValueError(f"{self.case.qid}: a record has an outcome or a reason, not both")

    @property
    def scored(self) -> bool:
        return self.outcome is not None

    def facet(self, name: str) -> str:
        """The record's value of a table facet (``setting``, ``sufficiency`` or ``label``)."""
        if name == "sufficiency":
            return self.case.sufficiency
        if name in ("setting", "label"):
            return str(getattr(self.case, name))
        raise ValueError(f"unknown C/A/H facet {name!r}; known: {list(CAH_FACETS)}")

    def as_dict(self) -> JsonObject:
        case = self.case
        return {
            "qid": case.qid,
            "label": case.label,
            "setting": case.setting,
            "sufficiency": case.sufficiency,
            "sufficiency_judge": case.sufficiency_judge,
            "question": case.question,
            "golds": list(case.golds),
            "answer": case.answer.as_dict(),
            "outcome": None if self.outcome is None else str(self.outcome),
            "decided_by": self.decided_by,
            "verdict": None if self.verdict is None else dict(self.verdict),
            "unscored_reason": self.unscored_reason,
        }


def check_cases(cases: Sequence[AnswerCase]) -> None:
    """Refuse bad cases, listing every problem by row: empty qid or setting, an unknown label,
    a (qid, setting) pair given twice."""
    problems: list[str] = []
    seen: dict[tuple[str, str], int] = {}
    for row, case in enumerate(cases):
        if not case.qid.strip():
            problems.append(f"row {row}: empty qid")
        if not case.setting.strip():
            problems.append(f"row {row}: empty setting")
        if case.label not in LABELS:
            problems.append(f"row {row}: label {case.label!r} is not one of {list(LABELS)}")
        key = (case.qid, case.setting)
        if key in seen:
            problems.append(
                f"row {row}: {case.qid!r} in setting {case.setting!r} repeats row {seen[key]}"
            )
        seen.setdefault(key, row)
    if problems:
        raise ValueError(f"{len(problems)} bad answer case(s): " + "; ".join(problems))


def _check_judge(judge: Judge) -> None:
    spec = judge.spec
    if spec.verdict_type is not VerdictType.CATEGORY or not {CORRECT, INCORRECT} <= set(
        spec.categories
    ):
        raise ValueError(
            f"{spec.ref} is not a correctness judge: it must give CATEGORY verdicts over "
            f"{[CORRECT, INCORRECT]}, not {spec.verdict_type} over {list(spec.categories)}"
        )


def _rule(case: AnswerCase, judge: Judge | None) -> CAHRecord | None:
    """The record rules 1-5 (and 6 without a judge) give; None when the judge must decide."""
    answer = case.answer
    if answer.failed:
        return CAHRecord(case, None, None, unscored_reason=f"{ANSWER_FAILED}: {answer.error}")
    if answer.abstained:
        return CAHRecord(case, Outcome.ABSTAIN, BY_ABSTENTION)
    if case.label == QuestionLabel.UNANSWERABLE:
        return CAHRecord(case, Outcome.HALLUCINATE, BY_UNANSWERABLE)
    golds = [g for g in case.golds if g.strip()]
    if not golds:
        return CAHRecord(case, None, None, unscored_reason=NO_GOLD)
    if matches_gold(answer.text, golds, detect_language(case.question).code):
        return CAHRecord(case, Outcome.CORRECT, BY_MATCH)
    if judge is None:
        return CAHRecord(case, None, None, unscored_reason=NO_JUDGE)
    return None


def may_be_scored(case: AnswerCase, judge: Judge | None) -> bool:
    """Whether ``case`` may end Correct or Hallucinate: a rule decides so, or it is left to
    ``judge`` (which may also fail on it). Model-free, so a step can start work that needs only
    these answers (their confidence) while the judge is still deciding."""
    record = _rule(case, judge)
    return record is None or record.outcome in (Outcome.CORRECT, Outcome.HALLUCINATE)


def classify(cases: Sequence[AnswerCase], judge: Judge | None) -> list[CAHRecord]:
    """One record per case, in order (see the module docstring for the rules)."""
    check_cases(cases)
    if judge is not None:
        _check_judge(judge)
    records: list[CAHRecord | None] = [_rule(case, judge) for case in cases]
    pending = [i for i, r in enumerate(records) if r is None]
    if pending and judge is not None:
        items = [
            JudgeInput(
                question=cases[i].question,
                answer=cases[i].answer.text,
                context="\n".join(" ".join(g.split()) for g in cases[i].golds if g.strip()),
            )
            for i in pending
        ]
        verdicts = judge.judge(items)
        if len(verdicts) != len(items):
            raise ValueError(f"{judge.spec.ref} gave {len(verdicts)} verdicts for {len(items)}")
        ref = judge.spec.ref
        for i, verdict in zip(pending, verdicts, strict=True):
            case, seen = cases[i], verdict.as_dict()
            if verdict.ok and verdict.value == CORRECT:
                records[i] = CAHRecord(case, Outcome.CORRECT, ref, seen)
            elif verdict.ok and verdict.value == INCORRECT:
                records[i] = CAHRecord(case, Outcome.HALLUCINATE, ref, seen)
            else:
                why = verdict.error if not verdict.ok else f"value {verdict.value!r} not a category"
                records[i] = CAHRecord(case, None, None, seen, f"{JUDGE_FAILED}: {why}")
    done = [r for r in records if r is not None]
    assert len(done) == len(cases), "every case is classified or left unscored with a reason"
    return done


# ------------------------------------------------------------------------------------ tables


@dataclass(frozen=True)
class CAHRow:
    """One cell of a C/A/H table: its facet values, counts and rates over the scored answers."""

    facets: Mapping[str, str]
    n: int
    n_scored: int
    counts: Mapping[str, int]
    rates: Mapping[str, Estimate]
    unscored_reasons: Mapping[str, int] = field(default_factory=dict)

    @property
    def n_unscored(self) -> int:
        return self.n - self.n_scored

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            **self.facets,
            "n": self.n,
            "n_scored": self.n_scored,
            "n_unscored": self.n_unscored,
            "unscored_reasons": dict(self.unscored_reasons),
            "counts": dict(self.counts),
            "rates": {name: est.as_dict() for name, est in self.rates.items()},
        }
        return check_finite(out, "C/A/H table row")


def _reason_kind(reason: str) -> str:
    """``"answer failed: cut off"`` -> ``"answer failed"`` (the rule, without the details)."""
    return reason.split(":", 1)[0]


def cah_row(facets: Mapping[str, str], records: Sequence[CAHRecord]) -> CAHRow:
    """Counts and Wilson-interval rates of ``records`` (rates undefined when none is scored)."""
    scored = [r.outcome for r in records if r.outcome is not None]
    counts = {str(o): sum(s == o for s in scored) for o in OUTCOMES}
    rates = {
        str(o): proportion(counts[str(o)], len(scored), what="scored answers") for o in OUTCOMES
    }
    reasons = Counter(_reason_kind(r.unscored_reason) for r in records if r.unscored_reason)
    return CAHRow(
        dict(facets), len(records), len(scored), counts, rates, dict(sorted(reasons.items()))
    )


def _levels(name: str, records: Sequence[CAHRecord]) -> list[str]:
    """The values of facet ``name`` present, in display order (unknown ones sorted after)."""
    known = {"setting": ANSWER_SETTINGS, "sufficiency": SUFFICIENCY_LEVELS, "label": LABELS}[name]
    present = {r.facet(name) for r in records}
    return [v for v in known if v in present] + sorted(present - set(known))


def cah_table(records: Sequence[CAHRecord], by: Sequence[str] = CAH_FACETS) -> list[CAHRow]:
    """Every combination of the facets ``by`` (each value present, and ``"all"``) that holds at
    least one record, plus always the all-``"all"`` cell; in display order, ``"all"`` last."""
    unknown = [b for b in by if b not in CAH_FACETS]
    if unknown or len(set(by)) != len(by):
        raise ValueError(f"by must be distinct facets among {list(CAH_FACETS)}, got {list(by)}")
    levels = [[*_levels(name, records), ALL] for name in by]
    rows = []
    for combo in itertools.product(*levels):
        cell = [
            r
            for r in records
            if all(v == ALL or r.facet(name) == v for name, v in zip(by, combo, strict=True))
        ]
        if cell or all(v == ALL for v in combo):
            rows.append(cah_row(dict(zip(by, combo, strict=True)), cell))
    return rows


# ------------------------------------------------------------------------------- evaluator


@dataclass(frozen=True)
class CAHConfig:
    """What the ``cah`` evaluator crosses, and which judge decided unmatched answers."""

    facets: tuple[str, ...] = CAH_FACETS
    correctness_judge: str | None = None

    def __post_init__(self) -> None:
        if any(f not in CAH_FACETS for f in self.facets) or len(set(self.facets)) != len(
            self.facets
        ):
            raise ValueError(f"facets must be distinct names among {list(CAH_FACETS)}")


@register_evaluator
class CAHEvaluator(BaseEvaluator[CAHConfig, Sequence[CAHRecord]]):
    """Rates of correct, abstained and hallucinated answers per facet cell (Wilson 95% CIs).

    Per query: each rate metric is 1 or 0 for a scored record and undefined (with the reason)
    for an unscored one; ``unscored_rate`` is 1 or 0 for every record. Aggregates: one per
    :func:`cah_table` cell and metric, n = scored answers (all answers for ``unscored_rate``).
    """

    name = "cah"
    primary_metric = "hallucination_rate"
    greater_is_better = False

    def evaluate(self, inputs: Sequence[CAHRecord]) -> EvaluationResult:
        queries = [qv for record in inputs for qv in self._query_values(record)]
        aggregates = [
            agg for row in cah_table(inputs, self.config.facets) for agg in _aggregates(row)
        ]
        return self.result(queries, aggregates)

    def _query_values(self, record: CAHRecord) -> list[QueryValue]:
        facets = {name: record.facet(name) for name in self.config.facets}
        qid = record.case.qid
        out = [
            QueryValue(
                qid,
                facets,
                metric,
                None if record.outcome is None else float(record.outcome == outcome),
                record.unscored_reason,
            )
            for metric, outcome in RATE_METRICS.items()
        ]
        out.append(QueryValue(qid, facets, UNSCORED_RATE, float(not record.scored)))
        return out


def _aggregate(metric: str, facets: Mapping[str, str], estimate: Estimate) -> Aggregate:
    return Aggregate.of(
        metric,
        facets,
        value=estimate.value,
        ci_low=estimate.ci_low,
        ci_high=estimate.ci_high,
        n=estimate.n,
        reasons=estimate.undefined,
    )


def _aggregates(row: CAHRow) -> list[Aggregate]:
    out = [
        _aggregate(metric, row.facets, row.rates[str(outcome)])
        for metric, outcome in RATE_METRICS.items()
    ]
    unscored = proportion(row.n_unscored, row.n, what="answers")
    out.append(_aggregate(UNSCORED_RATE, row.facets, unscored))
    return out


@dataclass(frozen=True)
class CAHEvaluation:
    """Everything one C/A/H classification produced, for storage, the report and the CLI."""

    records: list[CAHRecord]
    table: list[CAHRow]
    result: EvaluationResult

    def as_json(self) -> JsonObject:
        """Strict JSON: counts, the table and a per-answer drill-down."""
        summary = {
            "evaluator": self.result.evaluator,
            "config": dict(self.result.config),
            "counts": {
                "answers": len(self.records),
                "scored": sum(r.scored for r in self.records),
                **{str(o): sum(r.outcome == o for r in self.records) for o in OUTCOMES},
            },
            "table": [row.as_dict() for row in self.table],
            "records": [r.as_dict() for r in self.records],
        }
        return check_finite(summary, "C/A/H summary")


def evaluate_cah(
    cases: Sequence[AnswerCase], judge: Judge | None, config: CAHConfig | None = None
) -> CAHEvaluation:
    """Classify ``cases`` (one batched judge call), tabulate them and run the ``cah`` evaluator."""
    records = classify(cases, judge)
    config = config or CAHConfig(correctness_judge=judge.spec.ref if judge is not None else None)
    return CAHEvaluation(
        records=records,
        table=cah_table(records, config.facets),
        result=CAHEvaluator(config).evaluate(records),
    )


__all__ = [
    "ALL",
    "CAH_FACETS",
    "OUTCOMES",
    "RATE_METRICS",
    "AnswerCase",
    "CAHConfig",
    "CAHEvaluation",
    "CAHEvaluator",
    "CAHRecord",
    "CAHRow",
    "Outcome",
    "cah_row",
    "cah_table",
    "check_cases",
    "classify",
    "evaluate_cah",
    "may_be_scored",
]
