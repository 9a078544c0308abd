"""The evidence extractor's promotion gate on hand-built per-question rows: the primary
correctness rule with its CI, the faithfulness guard, the relative compression guard, refused
inputs, and the decision as strict JSON."""

from __future__ import annotations

import json
import math

import pytest

from ragtrail.evaluate.comparison.promotion import (
    CHAMPION,
    GUARD,
    PRIMARY,
    GateInputError,
    decide_evidence_promotion,
)

N = 12
GATE = {
    "confidence": 0.95,
    "n_resamples": 2000,
    "seed": 13,
    "max_faithfulness_decrease": 0.05,
    "max_compression_decrease": 0.25,
}


def rows(correct: list[int], faithfulness: float = 0.9, compression: float = 10.0) -> list[dict]:
    return [
        {"qid": f"q{i:02d}", "correct": c, "faithfulness": faithfulness, "compression": compression}
        for i, c in enumerate(correct)
    ]


CURRENT = [1, 1, 1] + [0] * 9  # 3 of 12 correct
BETTER = [1, 1, 1] + [1] * 6 + [0] * 3  # the same 3 and 6 more: 9 of 12


def decide(current: list[dict], challenger: list[dict], **kw):
    return decide_evidence_promotion(current, challenger, **{**GATE, **kw})


def check(decision, metric: str):
    (found,) = [c for c in decision.checks if c.metric == metric]
    return found


def test_clearly_better_challenger_is_promoted_with_its_ci() -> None:
    decision = decide(rows(CURRENT), rows(BETTER))
    assert decision.promote
    assert decision.reference == CHAMPION
    primary = check(decision, "correct")
    assert primary.check == PRIMARY
    assert (primary.champion, primary.challenger) == (pytest.approx(0.25), pytest.approx(0.75))
    assert primary.diff == pytest.approx(0.5) and primary.n == N
    assert primary.ci_low > 0.0 and primary.ci_high <= 1.0
    assert decision.reason.startswith(
        f"correct improved on the champion by +0.5000 (95% CI [{primary.ci_low:+.4f}, "
        f"{primary.ci_high:+.4f}], n=12)"
    )
    assert "no guarded metric regressed beyond its tolerance" in decision.reason
    assert [(c.check, c.metric) for c in decision.checks] == [
        (PRIMARY, "correct"),
        (GUARD, "faithfulness"),
        (GUARD, "compression"),
    ]
    assert all(c.passed for c in decision.checks)


def test_serving_name_is_in_the_reason() -> None:
    decision = decide(rows(CURRENT), rows(BETTER), serving="the configured extractor")
    assert "improved on the configured extractor by" in decision.reason


def test_equal_correctness_is_kept() -> None:
    decision = decide(rows(BETTER), rows(BETTER))
    assert not decision.promote
    assert decision.reason.startswith("correct did not improve on the champion: +0.0000")
    # twelve zero differences: no spread, so neither an interval nor an MDE, and it says why
    assert "no CI of the improvement: all 12 values are 0" in decision.reason
    assert "smallest detectable difference unknown" in decision.reason
    assert [c.metric for c in decision.failed] == ["correct"]


def test_small_gain_whose_ci_reaches_zero_is_kept() -> None:
    one_more = list(CURRENT)
    one_more[5] = 1
    decision = decide(rows(CURRENT), rows(one_more))
    primary = check(decision, "correct")
    assert primary.diff == pytest.approx(1 / 12)
    assert primary.ci_low <= 0.0
    assert not decision.promote and "did not improve" in decision.reason


def test_faithfulness_drop_beyond_tolerance_keeps_a_better_challenger() -> None:
    decision = decide(rows(CURRENT, faithfulness=0.9), rows(BETTER, faithfulness=0.8))
    assert not decision.promote
    assert check(decision, "correct").passed  # better on the primary metric ...
    guard = check(decision, "faithfulness")
    assert not guard.passed  # ... but the faithfulness guard holds it back
    assert guard.tolerance == 0.05 and guard.diff == pytest.approx(-0.1)
    assert [c.metric for c in decision.failed] == ["faithfulness"]
    assert "guard faithfulness" in decision.reason
    assert "regressed by 0.1000 > tolerance 0.05" in decision.reason
    assert "champion 0.9000, challenger 0.8000, n=12" in decision.reason


def test_faithfulness_drop_within_tolerance_passes() -> None:
    decision = decide(rows(CURRENT, faithfulness=0.9), rows(BETTER, faithfulness=0.86))
    assert decision.promote
    assert check(decision, "faithfulness").passed


def test_compression_guard_is_relative_to_the_current_mean() -> None:
    # current mean 10, a quarter may go: the tolerance is 2.5 compression units
    decision = decide(rows(CURRENT, compression=10.0), rows(BETTER, compression=6.0))
    assert not decision.promote
    guard = check(decision, "compression")
    assert guard.tolerance == pytest.approx(2.5)
    assert not guard.passed and guard.diff == pytest.approx(-4.0)
    assert "guard compression" in decision.reason
    assert "regressed by 4.0000 > tolerance 2.5" in decision.reason
    # 10 -> 8 is a fifth less: within the quarter
    decision = decide(rows(CURRENT, compression=10.0), rows(BETTER, compression=8.0))
    assert decision.promote and check(decision, "compression").passed
    # the same absolute drop of 4 from a mean of 40 is a tenth: allowed
    decision = decide(rows(CURRENT, compression=40.0), rows(BETTER, compression=36.0))
    assert check(decision, "compression").tolerance == pytest.approx(10.0)
    assert decision.promote


def test_failed_extraction_counts_as_wrong_and_has_no_other_value() -> None:
    challenger = rows(BETTER)
    for row in challenger[9:]:  # three failed extractions
        row.update(correct=0, faithfulness=None, compression=None)
    current = rows(CURRENT)
    current[0].update(faithfulness=0.5, compression=2.0)  # q00 lowers the current means
    current[11].update(faithfulness=float("nan"))  # NaN is undefined, not a number
    decision = decide(current, challenger)
    assert check(decision, "correct").n == N
    assert check(decision, "faithfulness").n == 9
    assert check(decision, "compression").n == 9
    # the tolerance uses the current extractor's mean over all its rows with a value
    assert check(decision, "compression").tolerance == pytest.approx(0.25 * (2.0 + 11 * 10.0) / 12)


@pytest.mark.parametrize(
    ("current", "challenger"),
    [
        (rows(CURRENT), rows(BETTER)[:-1]),  # a question missing
        (rows(CURRENT)[:-1], rows(BETTER)),  # a question added
        (rows(CURRENT), [*rows(BETTER)[:-1], {**rows(BETTER)[-1], "qid": "other"}]),
        (rows(CURRENT) + rows(CURRENT)[:1], rows(BETTER)),  # the current repeats a question
        (rows(CURRENT), [*rows(BETTER), {**rows(BETTER)[0], "correct": 0}]),  # challenger too
    ],
)
def test_different_question_sets_are_refused(current: list[dict], challenger: list[dict]) -> None:
    with pytest.raises(GateInputError, match="not evaluated on the same questions"):
        decide(current, challenger)


def test_decision_is_strict_json() -> None:
    challenger = rows(BETTER, faithfulness=0.8)
    for row in challenger:
        row["compression"] = None  # no pair: the compression guard is not checked
    decision = decide(rows(CURRENT), challenger)
    data = decision.as_json()
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert back["promote"] is False and back["reference"] == CHAMPION
    assert back["reason"] == decision.reason
    assert [c["metric"] for c in back["checks"]] == ["correct", "faithfulness", "compression"]
    unchecked = back["checks"][2]
    assert unchecked["passed"] is True and unchecked["n"] == 0
    assert unchecked["diff"] is None and set(unchecked["undefined"]) >= {"diff", "ci_low"}
    assert back["config"]["primary_metric"] == "correct"
    assert [g["metric"] for g in back["config"]["guards"]] == ["faithfulness", "compression"]
    assert all(math.isfinite(v) for c in back["checks"] for v in c.values() if isinstance(v, float))
