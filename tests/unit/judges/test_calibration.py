"""Calibration statistics and calibrations, against values worked out by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ragtrail.jsonsafe import dumps
from ragtrail.judges.calibration import (
    FAILED,
    ContrastPair,
    accuracy,
    calibrate_categorical,
    calibrate_contrasts,
    cohen_kappa,
    confusion_matrix,
)
from ragtrail.judges.contract import (
    ENTAILMENT_CATEGORIES,
    NOT_SUPPORTED,
    SUPPORTED,
    JudgeInput,
    JudgeRole,
    VerdictType,
)
from ragtrail.stats.intervals import bca_interval, mean_interval, wilson_interval
from tests.unit.judges._scripted_judges import FAIL, ScriptedJudge

# -- kappa, confusion, accuracy ------------------------------------------------------------------

# 2x2, n=10:            predicted yes  no
#   reference yes                   4   1     (5)
#   reference no                    2   3     (5)
#                                  (6) (4)
# p_o = 7/10 = 0.7; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
REF_2 = ["yes"] * 5 + ["no"] * 5
PRED_2 = ["yes"] * 4 + ["no"] + ["yes"] * 2 + ["no"] * 3

# 3x3, n=12:            predicted a  b  c
#   reference a                   3  1  0   (4)
#   reference b                   0  3  1   (4)
#   reference c                   1  0  3   (4)
#                                (4)(4)(4)
# p_o = 9/12 = 0.75; p_e = 3 * (4/12 * 4/12) = 1/3; kappa = (3/4 - 1/3) / (2/3) = 5/8 = 0.625
REF_3 = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
PRED_3 = [*("a", "a", "a", "b"), *("b", "b", "b", "c"), *("a", "c", "c", "c")]


def test_kappa_2x2_by_hand() -> None:
    assert cohen_kappa(REF_2, PRED_2, ["yes", "no"]) == pytest.approx(0.4)


def test_kappa_3x3_by_hand() -> None:
    assert cohen_kappa(REF_3, PRED_3, ["a", "b", "c"]) == pytest.approx(0.625)


def test_kappa_with_a_failure_by_hand() -> None:
    # The 2x2 plus one failed verdict on a "yes" item, n=11:
    # p_o = 7/11; reference marginals yes 6/11, no 5/11; predicted yes 6/11, no 4/11, failed 1/11
    # p_e = 6/11*6/11 + 5/11*4/11 = 56/121; kappa = (77/121 - 56/121) / (65/121) = 21/65
    kappa = cohen_kappa([*REF_2, "yes"], [*PRED_2, None], ["yes", "no"])
    assert kappa == pytest.approx(21 / 65)


def test_kappa_matches_sklearn() -> None:
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    for ref, pred, cats in ((REF_2, PRED_2, ["yes", "no"]), (REF_3, PRED_3, ["a", "b", "c"])):
        expected = sklearn_metrics.cohen_kappa_score(ref, pred)
        assert cohen_kappa(ref, pred, cats) == pytest.approx(expected)
    with_failure = [*PRED_2, None]
    expected = sklearn_metrics.cohen_kappa_score(
        [*REF_2, "yes"], [p or FAILED for p in with_failure]
    )
    assert cohen_kappa([*REF_2, "yes"], with_failure, ["yes", "no"]) == pytest.approx(expected)


def test_kappa_undefined_and_zero() -> None:
    # both sides always "yes": chance agreement is 1, kappa is undefined
    assert cohen_kappa(["yes"] * 4, ["yes"] * 4, ["yes", "no"]) is None
    assert cohen_kappa([], [], ["yes", "no"]) is None
    # references all "yes", judge half right: p_o = 0.5 = p_e = 1 * 0.5 -> kappa 0
    assert cohen_kappa(["yes"] * 4, ["yes", "no", "yes", "no"], ["yes", "no"]) == 0.0


def test_confusion_matrix_rows_are_reference_columns_predicted() -> None:
    matrix = confusion_matrix([*REF_2, "no"], [*PRED_2, "maybe"], ["yes", "no"])
    assert matrix == {
        "yes": {"yes": 4, "no": 1, FAILED: 0},
        "no": {"yes": 2, "no": 3, FAILED: 1},  # "maybe" is not a category: failed
    }
    with pytest.raises(ValueError, match="maybe"):
        confusion_matrix(["maybe"], ["yes"], ["yes", "no"])
    with pytest.raises(ValueError, match="1 reference values but 2"):
        confusion_matrix(["yes"], ["yes", "no"], ["yes", "no"])


def test_accuracy() -> None:
    assert accuracy(REF_2, PRED_2) == pytest.approx(0.7)
    assert accuracy(["a"], [None]) == 0.0
    assert accuracy([], []) is None


# -- intervals -----------------------------------------------------------------------------------


def test_wilson_interval_by_hand() -> None:
    # 3 of 4, z = 1.959964: centre = (0.75 + z^2/8) / (1 + z^2/4) = 0.627527,
    # half = z / (1 + z^2/4) * sqrt(0.75*0.25/4 + z^2/64) = 0.326886
    low, high = wilson_interval(3, 4)
    assert (low, high) == (pytest.approx(0.300641, abs=1e-6), pytest.approx(0.954413, abs=1e-6))
    # 0 of 10: centre = half = (z^2/20) / (1 + z^2/10) = 0.138766 -> [0, 0.277533]
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.277533, abs=1e-6)
    # 1 of 5: [0.036224, 0.624465]
    assert wilson_interval(1, 5) == (
        pytest.approx(0.036224, abs=1e-6),
        pytest.approx(0.624465, abs=1e-6),
    )
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


def test_bca_is_seeded() -> None:
    data = np.arange(20, dtype=float) ** 1.5  # distinct values: the quantiles move with the seed

    def mean(idx: np.ndarray) -> float:
        return float(data[idx].mean())

    estimate = float(data.mean())
    first = bca_interval(len(data), mean, estimate=estimate, n_resamples=300, seed=7)
    again = bca_interval(len(data), mean, estimate=estimate, n_resamples=300, seed=7)
    other = bca_interval(len(data), mean, estimate=estimate, n_resamples=300, seed=8)
    assert first == again
    assert (first.low, first.high) != (other.low, other.high)
    assert first.low <= data.mean() <= first.high
    assert first.reason == "" and first.method == "bca"


def test_bca_coverage_is_near_nominal() -> None:
    # 100 samples of 30 skewed values (exponential, mean 1): the 95% BCa interval of the mean
    # should cover 1 in roughly 95 of them; allow 88.
    rng = np.random.default_rng(0)
    covered = 0
    for trial in range(100):
        interval = mean_interval(rng.exponential(1.0, 30), bounds=None, n_resamples=500, seed=trial)
        covered += interval.low <= 1.0 <= interval.high
    assert covered >= 88


def test_bca_skips_undefined_resamples_only_when_they_are_rare() -> None:
    # undefined whenever item 0 is drawn: P(no 0 in 4 draws of 4) = (3/4)^4 = 0.32 defined
    def unless_zero(idx: np.ndarray) -> float | None:
        return None if 0 in idx else float(len(idx))

    interval = bca_interval(4, unless_zero, estimate=4.0, n_resamples=400, seed=1)
    assert interval.low is None and "undefined on" in interval.reason

    # undefined when item 0 is drawn 4 times or more (about 2% of resamples of 40): those are
    # skipped, and the interval comes from the rest
    data = np.linspace(0.0, 1.0, 40)

    def mean_unless_crowded(idx: np.ndarray) -> float | None:
        return None if np.count_nonzero(idx == 0) >= 4 else float(data[idx].mean())

    interval = bca_interval(40, mean_unless_crowded, estimate=0.5, n_resamples=400, seed=1)
    assert interval.low < 0.5 < interval.high
    assert "bootstrap needs at least 2" in bca_interval(1, unless_zero, estimate=1.0).reason


# -- categorical calibration ---------------------------------------------------------------------

# 11 entailment items, the 2x2 above plus a failed verdict, as (reference, judge's answer):
ENTAILMENT_ITEMS = (
    [(SUPPORTED, SUPPORTED)] * 4
    + [(SUPPORTED, NOT_SUPPORTED)]
    + [(NOT_SUPPORTED, SUPPORTED)] * 2
    + [(NOT_SUPPORTED, NOT_SUPPORTED)] * 3
    + [(SUPPORTED, FAIL)]
)


def _entailment_case() -> tuple[ScriptedJudge, list[JudgeInput], list[str]]:
    script = {f"h{i}": answer for i, (_, answer) in enumerate(ENTAILMENT_ITEMS)}
    judge = ScriptedJudge(
        script,
        name="entailment.test",
        role=JudgeRole.ENTAILMENT,
        categories=ENTAILMENT_CATEGORIES,
        key=lambda item: item.hypothesis,
    )
    inputs = [JudgeInput(premise="p", hypothesis=f"h{i}") for i in range(len(ENTAILMENT_ITEMS))]
    return judge, inputs, [ref for ref, _ in ENTAILMENT_ITEMS]


def test_categorical_calibration_by_hand() -> None:
    judge, inputs, refs = _entailment_case()
    cal, verdicts = calibrate_categorical(
        judge, inputs, refs, positive=SUPPORTED, n_resamples=200, seed=3
    )
    assert judge.batches == [11]  # one batched call
    assert cal.n == 11 and cal.n_failed == 1
    assert cal.kappa.value == pytest.approx(21 / 65)
    # kappa on 11 items: too few for an interval (the old bootstrap gave a meaningless one)
    assert cal.kappa.ci_low is None and cal.kappa.ci_method == "none"
    assert "at least 20 items" in cal.kappa.undefined["ci_low"]
    # accuracy 7/11 with its Wilson interval
    assert cal.accuracy.value == pytest.approx(7 / 11)
    assert (cal.accuracy.ci_low, cal.accuracy.ci_high) == pytest.approx(wilson_interval(7, 11))
    assert cal.confusion == {
        SUPPORTED: {SUPPORTED: 4, NOT_SUPPORTED: 1, FAILED: 1},
        NOT_SUPPORTED: {SUPPORTED: 2, NOT_SUPPORTED: 3, FAILED: 0},
    }
    # precision: 4 right of 6 judged supported; recall: 4 found of 6 supported (the failure is
    # a miss, not dropped)
    assert (cal.precision.value, cal.precision.n) == (pytest.approx(4 / 6), 6)
    assert (cal.recall.value, cal.recall.n) == (pytest.approx(4 / 6), 6)
    assert [v.ok for v in verdicts] == [True] * 10 + [False]
    assert verdicts[-1].raw == ("{oops",)
    again, _ = calibrate_categorical(
        judge, inputs, refs, positive=SUPPORTED, n_resamples=200, seed=3
    )
    assert again == cal
    out = json.loads(dumps(cal.as_dict()))
    assert out["kappa"]["value"] == pytest.approx(21 / 65) and out["kappa"]["n"] == 11
    assert out["confusion"][SUPPORTED][FAILED] == 1 and out["positive"] == SUPPORTED
    assert out["bootstrap"] == {"resamples": 0, "undefined_resamples": 0, "seed": 3}
    assert out["accuracy"]["ci_method"] == "wilson" and out["kappa"]["ci_method"] == "none"


def test_kappa_interval_from_twenty_items_is_bca() -> None:
    judge, inputs, refs = _entailment_case()
    cal, _ = calibrate_categorical(
        judge, inputs * 2, refs * 2, positive=SUPPORTED, n_resamples=300, seed=3
    )
    assert cal.n == 22 and cal.kappa.ci_method == "bca"
    assert cal.kappa.ci_low < 21 / 65 < cal.kappa.ci_high
    assert cal.as_dict()["bootstrap"]["resamples"] == 300


def test_value_outside_the_categories_becomes_a_failure() -> None:
    judge = ScriptedJudge(
        {"q1": "fact_single", "q2": "poem"}, categories=("fact_single", "summary")
    )
    inputs = [JudgeInput(context="c", question=q) for q in ("q1", "q2")]
    cal, verdicts = calibrate_categorical(judge, inputs, ["fact_single", "summary"], seed=1)
    assert cal.n_failed == 1 and cal.confusion["summary"][FAILED] == 1
    assert verdicts[1].error == "value outside the categories" and verdicts[1].raw == ("'poem'",)


def test_undefined_kappa_is_null_with_a_reason() -> None:
    judge = ScriptedJudge({"q": "summary"}, categories=("fact_single", "summary"))
    inputs = [JudgeInput(question="q")] * 3
    cal, _ = calibrate_categorical(judge, inputs, ["summary"] * 3, n_resamples=50, seed=1)
    assert cal.kappa.value is None and cal.accuracy.value == 1.0
    out = json.loads(dumps(cal.as_dict()))
    assert out["kappa"]["value"] is None
    assert "chance agreement is 1" in out["kappa"]["undefined"]["value"]
    assert "at least 20 items" in out["kappa"]["undefined"]["ci_low"]


def test_bad_references_are_all_listed() -> None:
    judge = ScriptedJudge({"q": "summary"}, categories=("fact_single", "summary"))
    inputs = [JudgeInput(question="q")] * 3
    with pytest.raises(ValueError) as err:
        calibrate_categorical(
            judge, inputs, ["summary", "fact", "Summary"], item_ids=["g1", "g2", "g3"]
        )
    message = str(err.value)
    assert "2 bad reference(s)" in message
    assert "row 1 (g2): reference 'fact'" in message and "row 2 (g3)" in message
    assert judge.batches == []  # nothing judged
    with pytest.raises(ValueError, match="positive category"):
        calibrate_categorical(judge, inputs, ["summary"] * 3, positive="yes")
    with pytest.raises(ValueError, match="no items"):
        calibrate_categorical(judge, [], [])


def test_a_judge_breaking_the_contract_is_an_error() -> None:
    class Short(ScriptedJudge):
        def judge(self, items):  # type: ignore[no-untyped-def]
            return super().judge(items)[:-1]

    judge = Short({"q": "summary"}, categories=("fact_single", "summary"))
    with pytest.raises(RuntimeError, match="1 verdicts for 2 items"):
        calibrate_categorical(judge, [JudgeInput(question="q")] * 2, ["summary"] * 2)


# -- contrasts -----------------------------------------------------------------------------------


def _pair(name: str, perturbation: str = "passage_reference") -> ContrastPair:
    return ContrastPair(
        criterion="stand_alone",
        perturbation=perturbation,
        intact=JudgeInput(question=f"{name}-intact"),
        perturbed=JudgeInput(question=f"{name}-perturbed"),
        source_id=name,
    )


def _rating_judge(script: dict[str, object]) -> ScriptedJudge:
    return ScriptedJudge(
        script,
        name="critique.stand_alone",
        role=JudgeRole.CRITIQUE,
        verdict_type=VerdictType.RATING,
    )


def test_contrast_accuracy_counts_only_strict_wins() -> None:
    ratings = {
        "win": (5, 2),
        "tie": (3, 3),
        "loss": (2, 4),
        "fail-intact": (FAIL, 1),
        "fail-perturbed": (5, FAIL),
    }
    script = {
        f"{k}-{side}": r
        for k, (a, b) in ratings.items()
        for side, r in (("intact", a), ("perturbed", b))
    }
    judge = _rating_judge(script)
    pairs = [_pair(k) for k in ratings]
    cal, verdicts = calibrate_contrasts(judge, pairs, seed=5)
    assert judge.batches == [10]
    assert (cal.n, cal.wins, cal.ties, cal.losses, cal.failed) == (5, 1, 1, 1, 2)
    # accuracy 1/5 = 0.2, Wilson [0.036224, 0.624465]
    assert cal.accuracy.value == pytest.approx(0.2)
    assert cal.accuracy.ci_low == pytest.approx(0.036224, abs=1e-6)
    assert cal.accuracy.ci_high == pytest.approx(0.624465, abs=1e-6)
    # verdicts come back per pair as (intact, perturbed), whatever order they were judged in
    assert [(a.value, b.value) for a, b in verdicts] == [
        (5, 2),
        (3, 3),
        (2, 4),
        (None, 1),
        (5, None),
    ]
    assert cal.by_perturbation == {}
    assert json.loads(dumps(cal.as_dict()))["wins"] == 1


def test_contrast_order_is_shuffled_by_seed_only() -> None:
    script = {f"p{i}-{side}": 3 for i in range(6) for side in ("intact", "perturbed")}
    seen = []

    class Recording(ScriptedJudge):
        def judge(self, items):  # type: ignore[no-untyped-def]
            seen.append([item.question for item in items])
            return super().judge(items)

    pairs = [_pair(f"p{i}") for i in range(6)]
    for seed in (1, 1, 2):
        calibrate_contrasts(Recording(script, verdict_type=VerdictType.RATING), pairs, seed=seed)
    assert seen[0] == seen[1] != seen[2]
    assert seen[0] != [p.intact.question for p in pairs] + [p.perturbed.question for p in pairs]


def test_contrast_breakdown_per_perturbation_and_non_numeric_ratings() -> None:
    script = {
        "a-intact": 5,
        "a-perturbed": 1,
        "b-intact": 4,
        "b-perturbed": 1,
        "c-intact": "high",  # not a number: failed
        "c-perturbed": 1,
    }
    pairs = [_pair("a", "one"), _pair("b", "two"), _pair("c", "two")]
    cal, verdicts = calibrate_contrasts(_rating_judge(script), pairs, seed=0)
    assert (cal.wins, cal.failed) == (2, 1)
    assert cal.accuracy.value == pytest.approx(2 / 3)
    assert set(cal.by_perturbation) == {"one", "two"}
    assert (cal.by_perturbation["one"].n, cal.by_perturbation["one"].wins) == (1, 1)
    two = cal.by_perturbation["two"]
    assert (two.n, two.wins, two.failed) == (2, 1, 1)
    assert verdicts[2][0].error == "rating is not a finite number"
    out = json.loads(dumps(cal.as_dict()))
    assert out["by_perturbation"]["two"]["accuracy"]["value"] == 0.5


def test_contrast_calibration_refuses_mixed_criteria_and_categories() -> None:
    judge = _rating_judge({})
    mixed = [_pair("a"), ContrastPair("qa_tautology", "x", JudgeInput(), JudgeInput(), "b")]
    with pytest.raises(ValueError, match="several criteria"):
        calibrate_contrasts(judge, mixed, seed=0)
    with pytest.raises(ValueError, match="no contrast pairs"):
        calibrate_contrasts(judge, [], seed=0)
    labeller = ScriptedJudge({}, categories=("a",))
    with pytest.raises(ValueError, match="not ratings"):
        calibrate_contrasts(labeller, [_pair("a")], seed=0)


def test_wilson_interval_is_symmetric_in_successes() -> None:
    low, high = wilson_interval(2, 9)
    flipped_low, flipped_high = wilson_interval(7, 9)
    assert math.isclose(low, 1 - flipped_high) and math.isclose(high, 1 - flipped_low)
