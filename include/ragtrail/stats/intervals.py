"""Confidence intervals chosen by what a number is, and valid at the n it was measured on.

Every interval ragtrail shows comes from here and names its method (:class:`IntervalMethod`):

- **proportions** and means of per-item 0/1 outcomes: the Wilson score interval. It stays inside
  [0, 1] and keeps a width at 0 or n successes, from n = 1 on.
- **means of bounded values** (Recall@5 with several relevant passages, citation F1, paired
  differences): below :data:`BOOTSTRAP_MIN_N` items the Student t interval, clipped to the bounds;
  from :data:`BOOTSTRAP_MIN_N` on the bias-corrected and accelerated (BCa) bootstrap, which
  corrects the percentile bootstrap's bias and skew at moderate n. One value, or n values that
  are all equal (not 0/1 outcomes), leave no spread to build an interval from: null with the
  reason, never a zero-width interval.
- **agreement statistics** (Cohen's and Fleiss' kappa): the BCa bootstrap over items from
  :data:`AGREEMENT_MIN_N` items on; below it null with the reason, since kappa's sampling
  distribution over a handful of items is too lumpy for any resampling to describe.
- **medians of repeated measurements** (a benchmark's nights): the distribution-free interval
  between two order statistics, whose coverage follows from the binomial distribution alone
  (no assumption on the measurements' shape); null below the n at which even the smallest
  and largest values cover the median at the asked confidence.

The bootstrap draws its resample indices with ``numpy.random.default_rng(seed)`` in one
``(n_resamples, n)`` block, as ``scipy.stats.bootstrap`` does, so the same inputs always give the
same interval (and the same as scipy's BCa on the mean).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 13
BOOTSTRAP_MIN_N = 20
"""From this many items a mean's interval is the BCa bootstrap; below it the t interval."""
AGREEMENT_MIN_N = 20
"""Fewer items than this give an agreement statistic (kappa) no interval."""
MAX_UNDEFINED_SHARE = 0.05
"""A statistic undefined on more than this share of the resamples gets no interval."""
NO_BOOTSTRAP = "no bootstrap interval: bootstrap_samples is 0"
"""Why an interval that needs the bootstrap is null when resampling is turned off."""
NO_SPREAD = "every resample gives the same value: no spread to estimate from"
"""Why a bootstrap interval is null when the statistic is the same on every resample (e.g. a
judge right on every item): the value is then as certain as the items allow."""
_MAX_BLOCK = 2**22  # resample indices held at once (32 MiB of int64)


class IntervalMethod(StrEnum):
    """How an interval was computed (written next to every interval in tables and JSON)."""

    WILSON = "wilson"
    STUDENT_T = "t"
    BCA = "bca"
    ORDER_STATISTICS = "order_statistics"
    NONE = "none"

    @property
    def label(self) -> str:
        """How tables name it."""
        return _LABELS[self]


_LABELS = {
    IntervalMethod.WILSON: "Wilson",
    IntervalMethod.STUDENT_T: "t",
    IntervalMethod.BCA: "BCa",
    IntervalMethod.ORDER_STATISTICS: "order statistics",
    IntervalMethod.NONE: "no CI",
}


def method_label(method: str | None) -> str:
    """The table name of a stored method (empty for records written before methods were)."""
    return IntervalMethod(method).label if method else ""


@dataclass(frozen=True)
class Interval:
    """A confidence interval over ``n`` items; ``low``/``high`` None with ``reason`` when none
    is valid at that n. ``skipped`` counts bootstrap resamples on which the statistic was
    undefined (left out)."""

    low: float | None
    high: float | None
    method: IntervalMethod
    n: int
    reason: str = ""
    skipped: int = 0

    @property
    def defined(self) -> bool:
        return self.low is not None and self.high is not None

    def bounds(self) -> tuple[float | None, float | None]:
        return self.low, self.high

    def as_dict(self) -> dict[str, object]:
        """Strict JSON: the bounds (null with the reason under ``undefined``), method and n."""
        out: dict[str, object] = {
            "low": self.low,
            "high": self.high,
            "method": self.method.value,
            "n": self.n,
        }
        if not self.defined:
            out["undefined"] = {"low": self.reason, "high": self.reason}
        return out


def no_interval(n: int, reason: str) -> Interval:
    """The null interval with why it is null."""
    return Interval(None, None, IntervalMethod.NONE, n, reason)


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def wilson_interval(
    successes: int, n: int, confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """Wilson score interval of ``successes / n``; None when ``n == 0``."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n], got {successes} of {n}")
    _check_confidence(confidence)
    if n == 0:
        return None
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = successes / n
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n))
    # at 0 (or n) successes the bound is exactly 0 (or 1); float residue would say 2e-17
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def proportion_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """The Wilson interval of a proportion as an :class:`Interval` (null when n is 0)."""
    bounds = wilson_interval(successes, n, confidence)
    if bounds is None:
        return no_interval(0, "no items")
    return Interval(bounds[0], bounds[1], IntervalMethod.WILSON, n)


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The distribution-free interval of the median of ``values``: the k-th smallest to the
    k-th largest value, k as large as keeps the coverage, 1 - 2 P(Binomial(n, 1/2) < k), at
    least ``confidence``. Null when even the smallest and largest values fall short (n = 5 is
    the least for 90%, n = 6 for 95%)."""
    _check_confidence(confidence)
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    if any(not math.isfinite(v) for v in ordered):
        raise ValueError("values must be finite")
    k = 0
    while k < n // 2 and median_coverage(n, k + 1) >= confidence:
        k += 1
    if k == 0:
        return no_interval(
            n, f"{n} values are too few for a {confidence:.0%} interval of their median"
        )
    return Interval(ordered[k - 1], ordered[n - k], IntervalMethod.ORDER_STATISTICS, n)


def median_coverage(n: int, k: int) -> float:
    """The probability that the k-th smallest and k-th largest of n values enclose their
    distribution's median: 1 - 2 P(Binomial(n, 1/2) <= k - 1)."""
    if not 1 <= k <= (n + 1) // 2:
        raise ValueError(f"k must be in [1, {(n + 1) // 2}] for n = {n}, got {k}")
    return 1.0 - 2.0 * float(scipy_stats.binom.cdf(k - 1, n, 0.5))


def mean_interval(
    values: Sequence[float] | np.ndarray,
    *,
    bounds: tuple[float, float] | None = (0.0, 1.0),
    confidence: float = CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """The interval of the mean of ``values`` by their kind and number (see the module doc).

    ``bounds`` is the range the values can take (the t interval is clipped to it; None for an
    unbounded quantity); values that are all 0 or 1 with bounds (0, 1) are 0/1 outcomes and get
    the Wilson interval.
    """
    data = np.asarray(values, dtype=float)
    if data.ndim != 1:
        raise ValueError("values must be a flat sequence of numbers")
    if not np.isfinite(data).all():
        raise ValueError("values must be finite (leave undefined values out)")
    _check_confidence(confidence)
    n = int(data.size)
    if n == 0:
        return no_interval(0, "no items")
    if bounds == (0.0, 1.0) and np.isin(data, (0.0, 1.0)).all():
        return proportion_interval(int(data.sum()), n, confidence)
    if n == 1:
        return no_interval(1, "one value: an interval needs at least 2")
    if np.ptp(data) == 0.0:
        return no_interval(n, f"all {n} values are {data[0]:.4g}: no spread to estimate from")
    if n < BOOTSTRAP_MIN_N:
        return _t_interval(data, bounds, confidence)
    if n_resamples == 0:
        return no_interval(n, NO_BOOTSTRAP)
    return bca_interval(
        n,
        statistic=lambda idx: float(data[idx].mean()),
        estimate=float(data.mean()),
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
        resample_means=data,
    )


def mean_intervals(
    columns: np.ndarray,
    *,
    bounds: tuple[float, float] | None = (0.0, 1.0),
    confidence: float = CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> list[Interval]:
    """:func:`mean_interval` of each column of an ``(n, c)`` matrix, all with ``seed``.

    Equal, column by column, to ``mean_interval(columns[:, j], seed=seed, ...)`` up to float
    rounding; the columns that need the bootstrap share one draw of resample indices, so c
    intervals cost about one. Shared resamples also make the intervals of columns measured on the
    same items (one metric at several text weights) directly comparable.
    """
    data = np.asarray(columns, dtype=float)
    if data.ndim != 2:
        raise ValueError("columns must be an (items, columns) matrix")
    n, width = data.shape
    out = [
        mean_interval(data[:, j], bounds=bounds, confidence=confidence, n_resamples=0, seed=seed)
        for j in range(width)
    ]
    # mean_interval decides each column's method: those that need the bootstrap come back null
    # for the lack of one
    needs_bootstrap = (
        [j for j, interval in enumerate(out) if interval.reason == NO_BOOTSTRAP]
        if n_resamples > 0
        else []
    )
    if not needs_bootstrap:
        return out
    boot = data[:, needs_bootstrap]
    replicates = _shared_resample_means(boot, np.random.default_rng(seed), n_resamples)
    jackknives = (boot.sum(axis=0) - boot) / (n - 1)
    for k, j in enumerate(needs_bootstrap):
        out[j] = _bca_from(
            replicates[:, k], float(boot[:, k].mean()), jackknives[:, k], n, confidence
        )
    return out


def _shared_resample_means(
    data: np.ndarray, rng: np.random.Generator, n_resamples: int
) -> np.ndarray:
    """Column means of ``data`` on each resample: indices drawn in blocks of whole resamples, so
    any number of columns consumes ``rng`` as one column does."""
    n = data.shape[0]
    out = np.empty((n_resamples, data.shape[1]))
    block = max(1, _MAX_BLOCK // n)
    for start in range(0, n_resamples, block):
        stop = min(start + block, n_resamples)
        rows = stop - start
        indices = rng.integers(0, n, size=(rows, n))
        flat = (indices + n * np.arange(rows)[:, None]).ravel()
        counts = np.bincount(flat, minlength=rows * n).reshape(rows, n)
        out[start:stop] = counts @ data / n
    return out


def _t_interval(
    data: np.ndarray, bounds: tuple[float, float] | None, confidence: float
) -> Interval:
    n = data.size
    mean = float(data.mean())
    sem = float(data.std(ddof=1)) / math.sqrt(n)
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * sem
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(bounds[0], low), min(bounds[1], high)
    return Interval(low, high, IntervalMethod.STUDENT_T, n)


def agreement_interval(
    n: int,
    statistic: Callable[[np.ndarray], float | None],
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    min_n: int = AGREEMENT_MIN_N,
) -> Interval:
    """BCa interval of an agreement statistic of the items ``statistic(indices)`` (None where it
    is undefined); null below ``min_n`` items, or when the statistic itself is undefined."""
    if n < min_n:
        return no_interval(
            n, f"an agreement statistic needs at least {min_n} items for an interval (n={n})"
        )
    estimate = statistic(np.arange(n))
    if estimate is None or not math.isfinite(estimate):
        return no_interval(n, "the statistic is undefined on the items themselves")
    if n_resamples == 0:
        return no_interval(n, NO_BOOTSTRAP)
    return bca_interval(
        n,
        statistic=statistic,
        estimate=estimate,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )


def bca_interval(
    n: int,
    statistic: Callable[[np.ndarray], float | None],
    *,
    estimate: float,
    confidence: float = CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    resample_means: np.ndarray | None = None,
) -> Interval:
    """The bias-corrected and accelerated bootstrap interval of ``statistic`` over ``n`` items.

    ``statistic`` maps item indices to a value (None or non-finite where undefined: such
    resamples are skipped and counted; over :data:`MAX_UNDEFINED_SHARE` of them, no interval).
    The bias correction is the normal quantile of the share of resampled values below
    ``estimate`` (ties count half); the acceleration comes from the leave-one-out jackknife.
    ``resample_means`` (the values themselves, when the statistic is their mean) takes the
    vectorised path.
    """
    _check_confidence(confidence)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if n < 2:
        return no_interval(n, "the bootstrap needs at least 2 items")
    rng = np.random.default_rng(seed)
    replicates = _replicates(n, statistic, rng, n_resamples, resample_means)
    defined = replicates[np.isfinite(replicates)]
    undefined = n_resamples - defined.size
    if undefined > MAX_UNDEFINED_SHARE * n_resamples:
        reason = (
            f"the statistic is undefined on {undefined} of {n_resamples} resamples "
            f"(more than {MAX_UNDEFINED_SHARE:.0%})"
        )
        return Interval(None, None, IntervalMethod.NONE, n, reason, skipped=undefined)
    return _bca_from(
        defined,
        estimate,
        lambda: _jackknife(n, statistic, resample_means),
        n,
        confidence,
        skipped=undefined,
    )


def _bca_from(
    replicates: np.ndarray,
    estimate: float,
    jackknife: np.ndarray | Callable[[], np.ndarray],
    n: int,
    confidence: float,
    skipped: int = 0,
) -> Interval:
    """The BCa interval from finite bootstrap replicates and the leave-one-out values (or a
    callable giving them, computed only when the interval is defined)."""
    if np.ptp(replicates) == 0.0:
        return no_interval(n, NO_SPREAD)
    share_below = (np.sum(replicates < estimate) + np.sum(replicates <= estimate)) / (
        2 * replicates.size
    )
    z0 = float(scipy_stats.norm.ppf(share_below))
    if not math.isfinite(z0):
        return no_interval(n, "the estimate lies outside every resampled value (BCa undefined)")
    loo = jackknife() if callable(jackknife) else jackknife
    acceleration = _acceleration(loo[np.isfinite(loo)])
    levels = []
    for tail in (0.5 - confidence / 2.0, 0.5 + confidence / 2.0):
        z = z0 + float(scipy_stats.norm.ppf(tail))
        levels.append(float(scipy_stats.norm.cdf(z0 + z / (1.0 - acceleration * z))))
    low, high = np.percentile(replicates, [100.0 * level for level in levels])
    return Interval(float(low), float(high), IntervalMethod.BCA, n, skipped=skipped)


def _replicates(
    n: int,
    statistic: Callable[[np.ndarray], float | None],
    rng: np.random.Generator,
    n_resamples: int,
    resample_means: np.ndarray | None,
) -> np.ndarray:
    if resample_means is not None:
        return _shared_resample_means(resample_means[:, None], rng, n_resamples)[:, 0]
    indices = rng.integers(0, n, size=(n_resamples, n))
    return np.array([_finite_or_nan(statistic(row)) for row in indices])


def _jackknife(
    n: int, statistic: Callable[[np.ndarray], float | None], resample_means: np.ndarray | None
) -> np.ndarray:
    if resample_means is not None:
        return (resample_means.sum() - resample_means) / (n - 1)
    everything = np.arange(n)
    return np.array([_finite_or_nan(statistic(np.delete(everything, i))) for i in range(n)])


def _acceleration(jackknife: np.ndarray) -> float:
    deviations = jackknife.mean() - jackknife if jackknife.size else jackknife
    spread = float(np.sum(deviations**2))
    if spread == 0.0:
        return 0.0
    return float(np.sum(deviations**3)) / (6.0 * spread**1.5)


def _finite_or_nan(value: float | None) -> float:
    return float(value) if value is not None and math.isfinite(value) else math.nan


__all__ = [
    "AGREEMENT_MIN_N",
    "BOOTSTRAP_MIN_N",
    "CONFIDENCE",
    "NO_BOOTSTRAP",
    "NO_SPREAD",
    "Interval",
    "IntervalMethod",
    "agreement_interval",
    "bca_interval",
    "mean_interval",
    "mean_intervals",
    "method_label",
    "no_interval",
    "proportion_interval",
    "wilson_interval",
]
