"""Paired statistics against hand-computed values and scipy's reference implementations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from ragtrail import jsonsafe
from ragtrail.evaluate.comparison.paired import (
    NO_PAIRS,
    compare_paired,
    holm,
    paired_interval,
    sign_flip_p_value,
)
from ragtrail.evaluate.comparison.run_compare import compare_runs
from ragtrail.evaluate.contract import facet_key

scipy_stats = pytest.importorskip("scipy.stats")


def test_exact_sign_flip_by_hand() -> None:
    # d = (1, 2, 3): observed sum 6; the 8 sign patterns give sums 6, 4, 2, 0, 0, -2, -4, -6.
    # P(T >= observed) = 1/8, P(T <= observed) = 8/8 -> p = 2 * 1/8.
    p, exact = sign_flip_p_value([1.0, 2.0, 3.0], n_resamples=1000)
    assert exact and p == pytest.approx(0.25)
    # d = (1, -1): sums 0, 2, -2, 0 -> observed 0, P(T<=0) = 3/4, P(T>=0) = 3/4 -> p = 1.
    assert sign_flip_p_value([1.0, -1.0])[0] == 1.0


def test_all_zero_differences_give_p_one() -> None:
    assert sign_flip_p_value([0.0, 0.0, 0.0]) == (1.0, True)
    stats = compare_paired([0.5, 1.0, 0.0], [0.5, 1.0, 0.0])
    assert (stats.diff, stats.ci_low, stats.ci_high, stats.p_value) == (0.0, None, None, 1.0)
    # never a zero-width interval: equal differences leave no spread to estimate
    assert "no spread" in stats.undefined["ci_low"] and stats.ci_method == "none"
    assert stats.mde is None and "spread" in stats.undefined["mde"]


def test_zeros_do_not_change_the_exact_distribution() -> None:
    # Flipping a zero changes nothing: (1, 2, 3, 0) has the same proportions as (1, 2, 3).
    assert sign_flip_p_value([1.0, 2.0, 3.0, 0.0])[0] == pytest.approx(0.25)


def test_no_pairs_is_undefined_with_a_reason() -> None:
    stats = compare_paired([], [])
    assert stats.n == 0 and stats.p_value is None and stats.diff is None
    assert set(stats.undefined) == {
        "mean_a",
        "mean_b",
        "diff",
        "ci_low",
        "ci_high",
        "p_value",
        "mde",
    }
    assert set(stats.undefined.values()) == {NO_PAIRS}


def test_compare_paired_means_by_hand() -> None:
    stats = compare_paired([0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], n_resamples=2000)
    assert stats.n == 4
    assert (stats.mean_a, stats.mean_b, stats.diff) == (0.5, 1.0, 0.5)
    # d = (1, 0, 0, 1): t interval 0.5 +- 3.182 * 0.577 / 2 (not clipped: a generic difference)
    assert stats.ci_method == "t"
    assert (stats.ci_low, stats.ci_high) == pytest.approx((-0.4187, 1.4187), abs=1e-4)
    # d = (1, 0, 0, 1): non-zero m = 2, sums 2, 0, 0, -2 -> P(T >= 0.5) = 1/4 -> p = 1/2.
    assert stats.exact and stats.p_value == pytest.approx(0.5)


def test_mismatched_or_non_finite_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="equal length"):
        compare_paired([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        compare_paired([float("nan")], [1.0])


def _paired_sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.0, 1.0, n)
    b = np.clip(a + rng.normal(0.08, 0.2, n), 0.0, 1.0)
    return a, b


def _scipy_p(a: np.ndarray, b: np.ndarray, n_resamples: int) -> float:
    result = scipy_stats.permutation_test(
        (b, a),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        random_state=7,
    )
    return float(result.pvalue)


def test_exact_p_value_equals_scipy() -> None:
    a, b = _paired_sample(10, seed=1)  # 2**10 = 1024 <= 9999: both enumerate every pattern
    p, exact = sign_flip_p_value(b - a, n_resamples=9999)
    assert exact
    assert p == pytest.approx(_scipy_p(a, b, 9999), rel=1e-12)


def test_monte_carlo_p_value_is_close_to_scipy() -> None:
    a, b = _paired_sample(60, seed=2)
    p, exact = sign_flip_p_value(b - a, n_resamples=20000, seed=3)
    assert not exact
    reference = _scipy_p(a, b, 20000)
    assert 0.001 < reference < 0.5  # a case where the comparison is informative
    assert p == pytest.approx(reference, abs=0.01)


def test_paired_interval_is_scipy_paired_bca() -> None:
    a, b = _paired_sample(80, seed=4)
    interval = paired_interval(a, b, n_resamples=2000, seed=5)
    reference = scipy_stats.bootstrap(
        (b - a,), np.mean, n_resamples=2000, method="BCa", rng=np.random.default_rng(5)
    ).confidence_interval
    assert interval.method == "bca"
    assert (interval.low, interval.high) == pytest.approx((reference.low, reference.high))
    assert interval.low < float(np.mean(b - a)) < interval.high


def test_small_n_pairs_get_the_t_interval_and_an_mde() -> None:
    a, b = [0.2, 0.5, 0.4, 0.9, 0.3], [0.4, 0.5, 0.7, 0.8, 0.6]
    stats = compare_paired(a, b)
    d = np.subtract(b, a)
    low, high = scipy_stats.t.interval(0.95, 4, loc=d.mean(), scale=scipy_stats.sem(d))
    assert stats.ci_method == "t" and (stats.ci_low, stats.ci_high) == pytest.approx((low, high))
    assert stats.mde == pytest.approx(d.std(ddof=1) * 1.6819969, rel=1e-5)  # TTestPower, n=5
    assert stats.detect_fields()["mde_power"] == 0.8


def test_bootstrap_is_seeded() -> None:
    a, b = _paired_sample(30, seed=6)
    assert paired_interval(a, b, seed=1) == paired_interval(a, b, seed=1)
    assert compare_paired(a, b, seed=9) == compare_paired(a, b, seed=9)


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.02, 0.03, 0.04 times 4, 3, 2, 1 = 0.04, 0.06, 0.06, 0.04 -> monotone:
    # 0.04, 0.06, 0.06, 0.06; back in input order.
    adjusted = holm([0.03, 0.01, 0.04, 0.02])
    assert adjusted == pytest.approx([0.06, 0.04, 0.06, 0.06])
    # capping at 1 and None passthrough (None does not count towards m = 2)
    assert holm([0.6, None, 0.7]) == [pytest.approx(1.0), None, pytest.approx(1.0)]
    assert holm([]) == []
    with pytest.raises(ValueError):
        holm([1.5])


# -- pairing two runs' per-query values ----------------------------------------------------------


@dataclass(frozen=True)
class Value:
    qid: str
    facet_key: str
    value: float | None
    metric: str = "recall@5"
    evaluation: str = "retrieval"


def _values(label: str, values: dict[str, float | None]) -> list[Value]:
    key = facet_key({"label": label, "text_weight": 0.5})
    return [Value(qid, key, v) for qid, v in values.items()]


def test_compare_runs_pairs_by_question_pools_labels_and_applies_holm() -> None:
    a = _values("summary", {"q1": 0.0, "q2": 1.0, "q3": 1.0}) + _values(
        "reasoning", {"q4": 0.0, "q5": 0.0, "q6": None}
    )
    b = _values("summary", {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q9": 1.0}) + _values(
        "reasoning", {"q4": 1.0, "q5": 1.0, "q6": 1.0}
    )
    rows = {r.facets["label"]: r for r in compare_runs(a, b, n_resamples=1000)}
    assert set(rows) == {"summary", "reasoning", "inclusive"}
    summary = rows["summary"]
    # paired q1..q3 only: d = (1, 0, 0) -> diff 1/3; m = 1 non-zero -> signs +-1 -> p = 2 * 1/2
    assert summary.stats.n == 3 and summary.only_in_b == 1 and summary.only_in_a == 0
    assert summary.stats.diff == pytest.approx(1 / 3) and summary.stats.p_value == 1.0
    reasoning = rows["reasoning"]  # q6 undefined in A: not paired
    assert reasoning.stats.n == 2 and reasoning.only_in_b == 1
    assert reasoning.stats.p_value == pytest.approx(0.5)  # d = (1, 1): 2 * 1/4
    inclusive = rows["inclusive"]  # q1..q5 pooled: d = (1, 0, 0, 1, 1): 2 * 1/8
    assert inclusive.stats.n == 5 and inclusive.stats.p_value == pytest.approx(0.25)
    # Holm over the three cells: sorted 0.25, 0.5, 1.0 -> 0.75, 1.0, 1.0
    assert inclusive.p_holm == pytest.approx(0.75)
    assert reasoning.p_holm == pytest.approx(1.0) and summary.p_holm == pytest.approx(1.0)
    jsonsafe.dumps([r.as_record() for r in rows.values()])


def test_compare_runs_identical_runs_and_cells_without_pairs() -> None:
    a = _values("summary", {"q1": 0.2, "q2": 0.9})
    (same,) = [r for r in compare_runs(a, a, pool_labels=False)]
    assert (same.stats.diff, same.stats.p_value, same.p_holm) == (0.0, 1.0, 1.0)
    (lonely,) = compare_runs(a, [], pool_labels=False)
    assert lonely.stats.n == 0 and lonely.p_holm is None
    record = lonely.as_record()
    assert record["p_holm"] is None and record["undefined"]["p_holm"] == NO_PAIRS
    assert record["diff"] is None and record["undefined"]["diff"] == NO_PAIRS
