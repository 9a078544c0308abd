"""Intervals by kind and n, checked against scipy and statsmodels on fixed inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from ragtrail.stats.intervals import (
    AGREEMENT_MIN_N,
    BOOTSTRAP_MIN_N,
    NO_BOOTSTRAP,
    IntervalMethod,
    agreement_interval,
    bca_interval,
    mean_interval,
    mean_intervals,
    median_coverage,
    median_interval,
    method_label,
    proportion_interval,
    wilson_interval,
)


@pytest.mark.parametrize(
    ("k", "n"), [(0, 1), (1, 1), (2, 3), (0, 6), (6, 6), (17, 40), (333, 1000)]
)
def test_wilson_matches_statsmodels(k: int, n: int) -> None:
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    interval = proportion_interval(k, n)
    assert interval.method is IntervalMethod.WILSON and interval.n == n
    assert interval.low == pytest.approx(low, abs=1e-12)
    assert interval.high == pytest.approx(high, abs=1e-12)


def test_wilson_by_hand_and_never_zero_width() -> None:
    # 2 of 3 at 95%: z = 1.959964; centre (2/3 + z^2/6) / (1 + z^2/3), half-width from the formula
    z = 1.959963984540054
    centre = (2 / 3 + z * z / 6) / (1 + z * z / 3)
    half = z / (1 + z * z / 3) * math.sqrt((2 / 3) * (1 / 3) / 3 + z * z / 36)
    assert wilson_interval(2, 3) == pytest.approx((centre - half, centre + half))
    low, high = wilson_interval(1, 1)  # one success: still a wide interval
    assert high == 1.0 and low == pytest.approx(0.2065493, abs=1e-6)
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(4, 3)


def test_zero_one_outcomes_get_wilson_even_when_all_equal() -> None:
    interval = mean_interval([1.0, 1.0, 1.0])
    assert interval.method is IntervalMethod.WILSON
    assert interval.low == pytest.approx(proportion_confint(3, 3, method="wilson")[0])
    assert interval.high == 1.0


def test_small_n_bounded_mean_is_the_t_interval_clipped() -> None:
    values = [0.2, 0.5, 0.9, 0.4, 0.6]
    interval = mean_interval(values)
    low, high = stats.t.interval(0.95, 4, loc=np.mean(values), scale=stats.sem(values))
    assert interval.method is IntervalMethod.STUDENT_T
    assert (interval.low, interval.high) == pytest.approx((low, high))
    clipped = mean_interval([0.95, 0.99, 0.5])
    assert clipped.high == 1.0  # the t interval would pass 1; a recall cannot
    unbounded = mean_interval([30.0, 10.0, 52.0], bounds=None)
    assert unbounded.low == pytest.approx(
        stats.t.interval(0.95, 2, loc=np.mean([30, 10, 52]), scale=stats.sem([30, 10, 52]))[0]
    )


def test_moderate_n_mean_is_scipy_bca_with_the_same_draws() -> None:
    values = np.random.default_rng(3).uniform(0.0, 1.0, 30)
    ours = mean_interval(values, n_resamples=2000, seed=5)
    ref = stats.bootstrap(
        (values,), np.mean, n_resamples=2000, method="BCa", rng=np.random.default_rng(5)
    ).confidence_interval
    assert ours.method is IntervalMethod.BCA
    assert ours.low == pytest.approx(ref.low, abs=1e-12)
    assert ours.high == pytest.approx(ref.high, abs=1e-12)


def test_bca_of_a_custom_statistic_matches_scipy() -> None:
    values = np.random.default_rng(9).normal(0.0, 1.0, 25)
    ours = bca_interval(
        25,
        lambda idx: float(np.median(values[idx])),
        estimate=float(np.median(values)),
        n_resamples=999,
        seed=2,
    )
    ref = stats.bootstrap(
        (values,),
        np.median,
        n_resamples=999,
        method="BCa",
        vectorized=False,
        rng=np.random.default_rng(2),
    ).confidence_interval
    assert (ours.low, ours.high) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_no_interval_below_the_minimum_or_without_spread() -> None:
    one = mean_interval([0.5])
    assert one.low is None and one.method is IntervalMethod.NONE and "at least 2" in one.reason
    same = mean_interval([0.5, 0.5, 0.5])
    assert same.low is None and "no spread" in same.reason
    assert mean_interval([]).reason == "no items"
    off = mean_interval(np.linspace(0.1, 0.9, BOOTSTRAP_MIN_N), n_resamples=0)
    assert off.low is None and off.reason == NO_BOOTSTRAP
    assert mean_interval([0.1, 0.7], n_resamples=0).method is IntervalMethod.STUDENT_T
    with pytest.raises(ValueError):
        mean_interval([0.1, math.nan])


def test_same_inputs_same_interval() -> None:
    values = np.random.default_rng(1).uniform(size=50)
    assert mean_interval(values, seed=4) == mean_interval(values, seed=4)
    assert mean_interval(values, seed=4) != mean_interval(values, seed=5)


def test_wider_confidence_gives_a_wider_interval() -> None:
    values = [math.sin(i) ** 2 for i in range(1, 41)]
    narrow, wide = mean_interval(values, confidence=0.90), mean_interval(values, confidence=0.99)
    assert wide.low < narrow.low and narrow.high < wide.high
    with pytest.raises(ValueError, match="confidence"):
        mean_interval(values, confidence=1.0)


def test_large_input_is_resampled_in_blocks_but_deterministically() -> None:
    values = [float(i % 7) / 6 for i in range(5000)]
    interval = mean_interval(values, n_resamples=1000)
    assert interval.method is IntervalMethod.BCA
    assert interval.low < sum(values) / len(values) < interval.high
    assert interval == mean_interval(values, n_resamples=1000)


def _agreement(ref: list[int], pred: list[int]):
    from ragtrail.judges.calibration import cohen_kappa

    def kappa(idx: np.ndarray) -> float | None:
        return cohen_kappa([str(ref[i]) for i in idx], [str(pred[i]) for i in idx], ("0", "1"))

    return kappa


def test_agreement_needs_the_minimum_n() -> None:
    ref, pred = [0, 1, 0, 1, 1, 0], [1, 0, 0, 1, 0, 1]
    interval = agreement_interval(6, _agreement(ref, pred))
    assert interval.low is None and interval.method is IntervalMethod.NONE
    assert f"at least {AGREEMENT_MIN_N} items" in interval.reason and "n=6" in interval.reason


def test_agreement_interval_at_moderate_n_is_bca_and_holds_the_value() -> None:
    rng = np.random.default_rng(0)
    ref = rng.integers(0, 2, 60).tolist()
    pred = [r if rng.random() < 0.8 else 1 - r for r in ref]
    kappa = _agreement(ref, pred)
    interval = agreement_interval(60, kappa, n_resamples=1000, seed=3)
    assert interval.method is IntervalMethod.BCA
    value = kappa(np.arange(60))
    assert interval.low < value < interval.high
    assert interval.low >= -1.0 and interval.high <= 1.0


def test_method_labels() -> None:
    assert [method_label(m) for m in ("wilson", "t", "bca", "order_statistics", "none", None)] == [
        "Wilson",
        "t",
        "BCa",
        "order statistics",
        "no CI",
        "",
    ]


def test_mean_intervals_equal_mean_interval_column_by_column() -> None:
    """One shared bootstrap draw gives each column the interval mean_interval gives it alone."""
    rng = np.random.default_rng(5)
    n = 60
    columns = np.column_stack(
        [
            rng.uniform(0, 1, n),  # bounded values: BCa
            rng.integers(0, 2, n).astype(float),  # 0/1 outcomes: Wilson
            np.full(n, 0.4),  # no spread: null with its reason
            rng.choice([0.0, 0.5, 1.0], n),  # BCa again, sharing the draw
        ]
    )
    together = mean_intervals(columns, n_resamples=500, seed=21)
    alone = [mean_interval(col, n_resamples=500, seed=21) for col in columns.T]
    assert [i.method for i in together] == ["bca", "wilson", "none", "bca"]
    for got, want in zip(together, alone, strict=True):
        assert (got.method, got.n, got.reason) == (want.method, want.n, want.reason)
        assert got.bounds() == pytest.approx(want.bounds(), abs=1e-12)
    small = mean_intervals(columns[:8], n_resamples=500, seed=21)  # below BOOTSTRAP_MIN_N: t
    assert small[0].method == "t"
    off = mean_intervals(columns, n_resamples=0)
    assert off[0].reason == NO_BOOTSTRAP and off[1].method == "wilson"
    with pytest.raises(ValueError, match="matrix"):
        mean_intervals(columns[:, 0])


@pytest.mark.parametrize(
    ("n", "k", "coverage"),
    # 1 - 2 P(Binomial(n, 1/2) <= k - 1), by hand: P(B = 0) = 2^-n, P(B <= 1) = (1 + n) 2^-n, ...
    [(5, 1, 1 - 2 / 32), (6, 1, 1 - 2 / 64), (6, 2, 1 - 2 * 7 / 64), (10, 2, 1 - 2 * 11 / 1024)],
)
def test_median_coverage_by_hand(n: int, k: int, coverage: float) -> None:
    assert median_coverage(n, k) == pytest.approx(coverage, abs=1e-12)


def test_median_interval_takes_the_widest_order_statistics_that_still_cover() -> None:
    values = [0.81, 0.77, 0.84, 0.79, 0.80, 0.72, 0.83, 0.78, 0.75, 0.82]  # n = 10, unsorted
    # k = 2 covers 97.9% >= 95%, k = 3 only 89.1%: the 2nd smallest to the 2nd largest
    interval = median_interval(values, 0.95)
    assert (interval.low, interval.high) == (0.75, 0.83)
    assert interval.method is IntervalMethod.ORDER_STATISTICS and interval.n == 10
    # at 90% k = 3 (89.1%) still falls short, so the interval is the same
    assert median_interval(values, 0.90).bounds() == (0.75, 0.83)
    # at 80% k = 3 qualifies
    assert median_interval(values, 0.80).bounds() == (0.77, 0.82)


def test_median_interval_is_null_when_n_is_too_small() -> None:
    five = [0.79, 0.82, 0.80, 0.76, 0.81]
    assert median_interval(five, 0.90).bounds() == (0.76, 0.82)  # 93.75% >= 90%
    at_95 = median_interval(five, 0.95)  # 93.75% < 95%: no order statistics cover enough
    assert not at_95.defined and at_95.method is IntervalMethod.NONE
    assert "5 values are too few for a 95% interval" in at_95.reason
    assert not median_interval([0.8, 0.8, 0.8], 0.90).defined
    assert not median_interval([], 0.90).defined
    with pytest.raises(ValueError, match="finite"):
        median_interval([0.8, math.nan, 0.7, 0.9, 0.85])
