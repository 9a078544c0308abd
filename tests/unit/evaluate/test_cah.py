"""Correct / Abstain / Hallucinate on hand-built cases with a scripted correctness judge (a test
double): the outcome of every case, the tables' counts and rates with Wilson intervals computed
here by hand, and the rules for failed answers, missing golds and missing or failing judges."""

from __future__ import annotations

import json
import math

import pytest

from ragtrail.evaluate.contract import EVALUATORS
from ragtrail.evaluate.sufficiency.cah import (
    ALL,
    AnswerCase,
    CAHEvaluator,
    CAHRow,
    Outcome,
    cah_table,
    classify,
    evaluate_cah,
)
from ragtrail.evaluate.sufficiency.short_answers import ShortAnswer, failed_answer
from ragtrail.jsonsafe import dumps
from ragtrail.judges.contract import JudgeRole
from ragtrail.judges.correctness import CORRECT, INCORRECT, LlmCorrectnessJudge
from ragtrail.llm.client import LLMClient
from tests.unit.generate import calls_by_prompt, routed_backend
from tests.unit.judges._scripted_judges import FAIL, ScriptedJudge

C, A, H = Outcome.CORRECT, Outcome.ABSTAIN, Outcome.HALLUCINATE
FAILED_JUDGE = "correctness judge failed: unparseable"


def said(text: str, flag: bool = False) -> ShortAnswer:
    return ShortAnswer(text, flag)


def case(qid: str, label: str, setting: str, sufficient: bool | None, answer: ShortAnswer,
         golds: tuple[str, ...]) -> AnswerCase:  # fmt: skip
    return AnswerCase(qid, label, setting, f"question {qid}", answer, golds, sufficient, "rater@1")


LEAVE, PASSWORD, SUMMARY = ("27 days",), ("20 characters",), ("27 days of leave",)
CASES = [
    case("q1", "fact_single", "retrieved", True, said("Staff get 27 days."), LEAVE),
    case("q1", "fact_single", "gold", True, said("27 days"), LEAVE),
    case("q1", "fact_single", "none", None, said("", True), LEAVE),
    case("q2", "fact_single", "retrieved", False, said("twenty characters"), PASSWORD),
    case("q2", "fact_single", "gold", True, said("12 characters"), PASSWORD),
    case("q2", "fact_single", "none", None, said("I don't know."), PASSWORD),
    case("q3", "summary", "retrieved", False, said("Leave is generous."), SUMMARY),
    case("q3", "summary", "gold", True, failed_answer("truncated: cut off", ['{"ans']), SUMMARY),
    case("q4", "unanswerable", "retrieved", False, said("In 1902."), ()),
    case("q4", "unanswerable", "gold", False, said("", True), ()),
    case("q4", "unanswerable", "none", None, said("Paris."), ()),
    case("q5", "reasoning", "retrieved", True, said("Because of the policy."), ()),
    case("q5", "reasoning", "gold", False, said("Not enough information."), ()),
]
EXPECTED = [
    (C, "match"), (C, "match"), (A, "abstention"),
    (C, "judge"), (H, "judge"), (A, "abstention"),
    (None, FAILED_JUDGE), (None, "answer failed: truncated: cut off"),
    (H, "unanswerable"), (A, "abstention"), (H, "unanswerable"),
    (None, "no gold answer"), (A, "abstention"),
]  # fmt: skip
"""Outcome and decider (or unscored reason) of each case, worked out by hand from the rules."""


def judge() -> ScriptedJudge:
    """Correct for "twenty characters", incorrect for "12 characters", unparseable otherwise."""
    script = {"twenty characters": CORRECT, "12 characters": INCORRECT, "Leave is generous.": FAIL}
    return ScriptedJudge(
        script,
        name="correctness.scripted",
        role=JudgeRole.CORRECTNESS,
        categories=(CORRECT, INCORRECT),
        key=lambda item: item.answer,
    )


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval, written out independently of the code under test."""
    z = 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def test_every_case_gets_its_hand_worked_outcome_in_one_judge_batch() -> None:
    scripted = judge()
    records = classify(CASES, scripted)
    got = []
    for record in records:
        decider = record.decided_by if record.outcome is not None else record.unscored_reason
        got.append((record.outcome, "judge" if decider == scripted.spec.ref else decider))
    assert got == EXPECTED
    assert scripted.batches == [3]  # the three unmatched answers, one call
    assert records[3].verdict == {"judge": scripted.spec.ref, "value": CORRECT}
    assert records[6].verdict is not None and records[6].verdict["raw"] == ["{oops"]
    assert [r.case for r in records] == CASES  # same order, nothing dropped


def _row(rows: list[CAHRow], **facets: str) -> CAHRow:
    (row,) = [r for r in rows if dict(r.facets) == facets]
    return row


def _check(row: CAHRow, n: int, correct: int, abstain: int, hallucinate: int) -> None:
    scored = correct + abstain + hallucinate
    assert (row.n, row.n_scored, row.n_unscored) == (n, scored, n - scored)
    assert dict(row.counts) == {"correct": correct, "abstain": abstain, "hallucinate": hallucinate}
    for name, k in (("correct", correct), ("abstain", abstain), ("hallucinate", hallucinate)):
        rate = row.rates[name]
        low, high = wilson(k, scored)
        assert rate.value == pytest.approx(k / scored) and rate.n == scored
        assert (rate.ci_low, rate.ci_high) == (pytest.approx(low), pytest.approx(high))


def test_tables_by_setting_sufficiency_and_label() -> None:
    records = classify(CASES, judge())
    overall = _row(cah_table(records, ()))
    _check(overall, 13, 3, 4, 3)
    assert overall.rates["correct"].ci_low == pytest.approx(0.1078, abs=1e-4)  # 3/10, by hand
    assert overall.rates["correct"].ci_high == pytest.approx(0.6032, abs=1e-4)
    assert dict(overall.unscored_reasons) == {
        "answer failed": 1,
        "correctness judge failed": 1,
        "no gold answer": 1,
    }

    by_setting = cah_table(records, ("setting",))
    assert [r.facets["setting"] for r in by_setting] == ["retrieved", "gold", "none", ALL]
    _check(_row(by_setting, setting="retrieved"), 5, 2, 0, 1)
    _check(_row(by_setting, setting="gold"), 5, 1, 2, 1)
    _check(_row(by_setting, setting="none"), 3, 0, 2, 1)
    _check(_row(by_setting, setting=ALL), 13, 3, 4, 3)

    by_sufficiency = cah_table(records, ("sufficiency",))
    assert [r.facets["sufficiency"] for r in by_sufficiency] == [
        "sufficient", "insufficient", "unrated", ALL,
    ]  # fmt: skip
    _check(_row(by_sufficiency, sufficiency="sufficient"), 5, 2, 0, 1)
    _check(_row(by_sufficiency, sufficiency="insufficient"), 5, 1, 2, 1)
    _check(_row(by_sufficiency, sufficiency="unrated"), 3, 0, 2, 1)

    by_label = cah_table(records, ("label",))
    assert [r.facets["label"] for r in by_label] == [
        "fact_single", "summary", "reasoning", "unanswerable", ALL,
    ]  # fmt: skip
    _check(_row(by_label, label="fact_single"), 6, 3, 2, 1)
    _check(_row(by_label, label="unanswerable"), 3, 0, 1, 2)  # answering it is hallucinating
    _check(_row(by_label, label="reasoning"), 2, 0, 1, 0)


def test_crossed_cells_and_a_cell_with_nothing_scored() -> None:
    rows = cah_table(classify(CASES, judge()), ("setting", "sufficiency", "label"))
    _check(_row(rows, setting="retrieved", sufficiency="sufficient", label=ALL), 2, 1, 0, 0)
    _check(_row(rows, setting=ALL, sufficiency="insufficient", label="unanswerable"), 2, 0, 1, 1)
    empty = _row(rows, setting="retrieved", sufficiency="insufficient", label="summary")
    assert (empty.n, empty.n_scored, dict(empty.unscored_reasons)) == (
        1, 0, {"correctness judge failed": 1},
    )  # fmt: skip
    for rate in empty.rates.values():
        assert (rate.value, rate.ci_low, rate.ci_high, rate.n) == (None, None, None, 0)
        assert rate.undefined["value"] == "no scored answers"
    assert empty.as_dict()["rates"]["correct"]["undefined"]["value"] == "no scored answers"
    # no empty cell is listed: "none" answers were never rated sufficient
    assert not [
        r for r in rows if r.facets["setting"] == "none" and r.facets["sufficiency"] == "sufficient"
    ]
    assert _row(rows, setting=ALL, sufficiency=ALL, label=ALL).n == 13
    assert cah_table([], ("setting",))[0].as_dict()["rates"]["hallucinate"]["value"] is None


def test_evaluator_aggregates_and_query_values() -> None:
    assert "cah" in EVALUATORS and EVALUATORS.get("cah") is CAHEvaluator
    evaluation = evaluate_cah(CASES, judge())
    result = evaluation.result
    assert (result.evaluator, result.primary_metric, result.greater_is_better) == (
        "cah", "hallucination_rate", False,
    )  # fmt: skip
    assert result.config["correctness_judge"] == judge().spec.ref
    assert result.metrics() == [
        "correct_rate",
        "abstain_rate",
        "hallucination_rate",
        "unscored_rate",
    ]
    everything = {"setting": ALL, "sufficiency": ALL, "label": ALL}
    aggs = {a.metric: a for a in result.aggregates if dict(a.facets) == everything}
    assert (
        aggs["hallucination_rate"].value == pytest.approx(0.3)
        and aggs["hallucination_rate"].n == 10
    )
    low, high = wilson(3, 10)
    assert (aggs["hallucination_rate"].ci_low, aggs["hallucination_rate"].ci_high) == (
        pytest.approx(low), pytest.approx(high),
    )  # fmt: skip
    assert aggs["unscored_rate"].value == pytest.approx(3 / 13) and aggs["unscored_rate"].n == 13
    empty = [
        a for a in result.aggregates
        if dict(a.facets) == {"setting": "gold", "sufficiency": "sufficient", "label": "summary"}
    ]  # fmt: skip
    assert {a.metric: a.value for a in empty}["correct_rate"] is None
    assert {a.metric: a.undefined.get("value") for a in empty}[
        "correct_rate"
    ] == "no scored answers"

    values = {(q.qid, q.facets["setting"], q.metric): q for q in result.queries}
    assert values[("q1", "retrieved", "correct_rate")].value == 1.0
    assert values[("q1", "retrieved", "hallucination_rate")].value == 0.0
    unscored = values[("q3", "gold", "hallucination_rate")]
    assert (
        unscored.value is None and unscored.undefined_reason == "answer failed: truncated: cut off"
    )
    assert values[("q3", "gold", "unscored_rate")].value == 1.0
    assert values[("q4", "none", "hallucination_rate")].facets == {
        "setting": "none", "sufficiency": "unrated", "label": "unanswerable",
    }  # fmt: skip
    assert len(result.queries) == 4 * len(CASES)

    summary = json.loads(dumps(evaluation.as_json(), "cah"))  # strict JSON
    assert summary["counts"] == {
        "answers": 13,
        "scored": 10,
        "correct": 3,
        "abstain": 4,
        "hallucinate": 3,
    }
    assert summary["records"][7]["answer"]["raw"] == ['{"ans']


def test_without_a_judge_unmatched_answers_are_not_scored() -> None:
    records = classify(CASES, None)
    reasons = [r.unscored_reason for r in records]
    assert reasons[3] == reasons[4] == reasons[6] == "no correctness judge"
    assert [r.outcome for r in records][:3] == [C, C, A]  # matching needs no judge
    assert evaluate_cah(CASES, None).result.config["correctness_judge"] is None


def test_judge_value_outside_its_categories_is_not_scored() -> None:
    odd = ScriptedJudge({"12 characters": "maybe"}, role=JudgeRole.CORRECTNESS,
                        categories=(CORRECT, INCORRECT), key=lambda i: i.answer)  # fmt: skip
    (record,) = classify([CASES[4]], odd)
    assert record.outcome is None
    assert record.unscored_reason == "correctness judge failed: value 'maybe' not a category"


def test_bad_input_is_refused_with_every_problem_listed() -> None:
    bad = [CASES[0], CASES[0], case("", "nonsense", "", None, said("x"), ())]
    with pytest.raises(ValueError) as err:
        classify(bad, None)
    message = str(err.value)
    assert message.startswith("4 bad answer case(s)")
    assert "row 1: 'q1' in setting 'retrieved' repeats row 0" in message
    assert "row 2: empty qid" in message and "row 2: empty setting" in message
    assert "row 2: label 'nonsense'" in message
    labeller = ScriptedJudge({}, categories=("fact_single",))
    with pytest.raises(ValueError, match="is not a correctness judge"):
        classify(CASES[:1], labeller)
    with pytest.raises(ValueError, match="distinct facets"):
        cah_table([], ("setting", "setting"))


def test_with_the_llm_correctness_judge_one_batched_model_call() -> None:
    backend = routed_backend()
    records = classify(CASES, LlmCorrectnessJudge(LLMClient(backend)))
    assert calls_by_prompt(backend) == {"judge.correctness": 3} and backend.generate_calls == 1
    # the scripted overlap judge: "twenty" is not "20", "12" is not "20", no word of the summary
    assert [records[i].outcome for i in (3, 4, 6)] == [H, H, H]
