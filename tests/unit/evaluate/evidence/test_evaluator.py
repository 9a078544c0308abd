"""The ``evidence`` evaluator on a tiny hand-made table: Wilson intervals of correctness,
means of the measures, paired differences with the full passages and with no context, undefined
cells with reasons, row validation, registration and strict JSON."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ragtrail.evaluate.comparison.paired import NO_PAIRS
from ragtrail.evaluate.contract import EVALUATORS, Aggregate, EvaluationResult
from ragtrail.evaluate.evidence.evaluator import (
    EvidenceEvalConfig,
    EvidenceEvaluator,
    EvidenceInputs,
    EvidenceRow,
)
from ragtrail.evaluate.registered import NIGHTLY_EVALUATORS
from ragtrail.jsonsafe import dumps

FACT = "fact_single"
FAILED = "answer failed: cut off"


def row(qid: str, method: str, correct: bool | None, noise: float = 0.0, **measures: object) -> EvidenceRow:  # fmt: skip
    reason = FAILED if correct is None else None
    return EvidenceRow(qid, FACT, method, noise, correct, reason, **measures)  # type: ignore[arg-type]


ROWS = (
    # extractor, noise 0: 3 of 4 correct; faithfulness 0.9, 0.7, -, 0.5 -> mean 0.7 over 3
    row("q1", "extractor", True, faithfulness=0.9, compression=10.0, evidence_tokens=10),
    row("q2", "extractor", True, faithfulness=0.7, compression=5.0, evidence_tokens=20),
    row("q3", "extractor", True, helpfulness=0.6),
    row("q4", "extractor", False, faithfulness=0.5),
    # extractor, noise 1: no full or none row at that noise -> no paired difference there
    row("q1", "extractor", True, 1.0, silver_faithfulness=0.8),
    row("q2", "extractor", False, 1.0, silver_faithfulness=0.4),
    # base, noise 0: nothing scored -> correct undefined, no pair with anyone
    row("q1", "base", None),
    # full, noise 0: 2 of 3 scored correct (q4 failed)
    row("q1", "full", True),
    row("q2", "full", False),
    row("q3", "full", True),
    row("q4", "full", None),
    # none, noise 0: 1 of 4
    row("q1", "none", False),
    row("q2", "none", False),
    row("q3", "none", True),
    row("q4", "none", False),
)


def evaluate(rows: tuple[EvidenceRow, ...] = ROWS) -> EvaluationResult:
    return EvidenceEvaluator(EvidenceEvalConfig()).evaluate(EvidenceInputs(rows))


def agg(result: EvaluationResult, metric: str, method: str, noise: float = 0.0) -> Aggregate:
    found = [
        a
        for a in result.aggregates
        if a.metric == metric and a.facets == {"method": method, "noise": noise}
    ]
    assert len(found) == 1, (metric, method, noise, found)
    return found[0]


def test_correct_carries_a_wilson_interval_by_hand() -> None:
    result = evaluate()
    # 3/4, z = 1.959964: centre (0.75 + z^2/8) / (1 + z^2/4) = 1.23018 / 1.96036 = 0.627528,
    # half z / 1.96036 * sqrt(0.75*0.25/4 + z^2/64) = 0.99980 * 0.32688 = 0.326885
    # -> (0.300642, 0.954413)
    three_of_four = agg(result, "correct", "extractor")
    assert (three_of_four.value, three_of_four.n) == (0.75, 4)
    assert three_of_four.ci_low == pytest.approx(0.300642, abs=1e-6)
    assert three_of_four.ci_high == pytest.approx(0.954413, abs=1e-6)
    # 2/3 over the scored rows only (q4 failed)
    full = agg(result, "correct", "full")
    assert (full.value, full.n) == (pytest.approx(2 / 3), 3)
    assert 0.0 < full.ci_low < 2 / 3 < full.ci_high < 1.0  # type: ignore[operator]
    assert agg(result, "correct", "none").value == 0.25


def test_a_cell_with_nothing_scored_is_undefined_with_a_reason() -> None:
    base = agg(evaluate(), "correct", "base")
    assert (base.value, base.ci_low, base.ci_high, base.n) == (None, None, None, 0)
    assert base.undefined["value"] == "no scored answer in this cell"


def test_measures_are_means_over_defined_values_with_an_interval_valid_at_their_n() -> None:
    result = evaluate()
    faith = agg(result, "faithfulness", "extractor")
    assert (faith.value, faith.n, faith.ci_method) == (pytest.approx(0.7), 3, "t")
    assert 0.0 <= faith.ci_low < 0.7 < faith.ci_high <= 1.0  # type: ignore[operator]
    # a single value: no interval (not the zero-width [0.6, 0.6] a resampling would give)
    helpful = agg(result, "helpfulness", "extractor")
    assert (helpful.value, helpful.ci_low, helpful.ci_high, helpful.n) == (0.6, None, None, 1)
    assert "one value" in helpful.undefined["ci_low"] and helpful.ci_method == "none"
    assert agg(result, "compression", "extractor").value == 7.5
    assert agg(result, "evidence_tokens", "extractor").value == 15.0
    assert agg(result, "silver_faithfulness", "extractor", 1.0).value == pytest.approx(0.6)
    missing = agg(result, "helpfulness", "full")
    assert (missing.value, missing.n) == (None, 0)
    assert missing.undefined["ci_low"] == "no helpfulness value in this cell"


def test_paired_difference_with_the_full_passages_by_hand() -> None:
    result = evaluate()
    # q1..q3 scored in both (q4 failed with full): extractor 1, 1, 1; full 1, 0, 1
    # differences 0, 1, 0 -> mean 1/3 over n = 3
    diff = agg(result, "correct_diff_vs_full", "extractor")
    assert (diff.value, diff.n) == (pytest.approx(1 / 3), 3)
    # t interval: 1/3 +- 4.303 * 0.577 / sqrt(3) = [-1.10, 1.77], clipped to the range [-1, 1]
    # of a difference of two 0/1 outcomes: three pairs cannot tell anything apart
    assert (diff.ci_low, diff.ci_high, diff.ci_method) == (-1.0, 1.0, "t")
    # none against full: none 0, 0, 1 vs full 1, 0, 1 -> -1/3
    assert agg(result, "correct_diff_vs_full", "none").value == pytest.approx(-1 / 3)


def test_paired_difference_with_no_context_by_hand() -> None:
    result = evaluate()
    # extractor 1, 1, 1, 0 vs none 0, 0, 1, 0 -> differences 1, 1, 0, 0 -> 0.5 over n = 4
    diff = agg(result, "correct_diff_vs_none", "extractor")
    assert (diff.value, diff.n) == (0.5, 4)
    # t interval: 0.5 +- 3.182 * 0.577 / 2 = [-0.419, 1.419] -> clipped to [-0.419, 1]
    assert diff.ci_low == pytest.approx(0.5 - 3.182446 * 0.5773503 / 2) and diff.ci_high == 1.0
    # full 1, 0, 1 vs none 0, 0, 1 over q1..q3 -> 1/3
    assert agg(result, "correct_diff_vs_none", "full").value == pytest.approx(1 / 3)


def test_pairs_exist_only_where_both_cells_do_and_no_pair_is_undefined() -> None:
    result = evaluate()
    diffs = {
        (a.metric, a.facets["method"], a.facets["noise"])
        for a in result.aggregates
        if a.metric.startswith("correct_diff")
    }
    assert diffs == {
        ("correct_diff_vs_full", "extractor", 0.0),
        ("correct_diff_vs_full", "base", 0.0),
        ("correct_diff_vs_full", "none", 0.0),
        ("correct_diff_vs_none", "extractor", 0.0),
        ("correct_diff_vs_none", "base", 0.0),
        ("correct_diff_vs_none", "full", 0.0),
        # no context does not depend on noise: the noisy extractor pairs with none at 0
        ("correct_diff_vs_none", "extractor", 1.0),
    }
    base = agg(result, "correct_diff_vs_full", "base")
    assert (base.value, base.n, base.undefined["value"]) == (None, 0, NO_PAIRS)
    # 5 cells x 7 metrics + 7 paired
    assert len(result.aggregates) == 5 * 7 + 7


def test_query_values_hold_only_defined_values() -> None:
    result = evaluate()
    q1 = {
        (q.metric, q.value)
        for q in result.queries
        if q.qid == "q1" and q.facets == {"method": "extractor", "noise": 0.0}
    }
    assert q1 == {("correct", 1.0), ("faithfulness", 0.9), ("compression", 10.0),
                  ("evidence_tokens", 10.0)}  # fmt: skip
    assert all(q.value is not None for q in result.queries)
    assert not [q for q in result.queries if q.facets["method"] == "base"]
    # 13 scored rows (4 + 2 extractor, 3 full, 4 none) + measures: faithfulness 3,
    # compression 2, evidence_tokens 2, helpfulness 1, silver_faithfulness 2
    assert len(result.queries) == 13 + 10


def test_result_is_strict_json_and_deterministic() -> None:
    result = evaluate()
    text = dumps(
        {
            "config": dict(result.config),
            "aggregates": [a.as_dict() for a in result.aggregates],
            "queries": [dataclasses.asdict(q) for q in result.queries],
        }
    )
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert result.config == {"bootstrap_samples": 1000, "confidence": 0.95, "seed": 13}
    assert evaluate().aggregates == result.aggregates
    # the paired interval does not depend on row order (pairs are sorted by qid)
    shuffled = evaluate(tuple(reversed(ROWS)))
    assert agg(shuffled, "correct_diff_vs_full", "extractor") == agg(
        result, "correct_diff_vs_full", "extractor"
    )


def test_the_evaluator_is_registered_and_runs_last_in_the_night() -> None:
    assert EVALUATORS.get("evidence") is EvidenceEvaluator
    assert NIGHTLY_EVALUATORS[-1] is EvidenceEvaluator
    assert (EvidenceEvaluator.primary_metric, EvidenceEvaluator.greater_is_better) == (
        "correct",
        True,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"method": "oracle"}, "method 'oracle'"),
        ({"label": "trivia"}, "label 'trivia'"),
        ({"qid": " "}, "empty qid"),
        ({"noise": -1.0}, "noise"),
        ({"unscored_reason": "why not"}, "not both"),
        ({"correct": None}, "neither"),
        ({"faithfulness": 1.5}, r"faithfulness=1.5 is outside \[0.0, 1.0\]"),
        ({"conciseness": -1.5}, "conciseness"),
        ({"evidence_tokens": -1}, "evidence_tokens"),
        ({"helpfulness": float("nan")}, "not finite"),
    ],
)
def test_bad_rows_are_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(row("q1", "extractor", True), **change)  # type: ignore[arg-type]


def test_repeated_rows_and_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="repeats row 0"):
        evaluate((row("q1", "full", True), row("q1", "full", False)))
    with pytest.raises(ValueError, match="bootstrap_samples"):
        EvidenceEvalConfig(bootstrap_samples=0)
    with pytest.raises(ValueError, match="confidence"):
        EvidenceEvalConfig(confidence=1.0)
