"""Paired comparison of two runs on the same questions: mean difference, CI, p-value and MDE.

Two runs evaluated on the same QA-set version give, per question, a value A and a value B of each
metric. The questions are the unit of resampling, so the statistics work on the per-question
differences ``d = B - A``:

- mean difference: ``mean(d)`` (equal to ``mean(B) - mean(A)``);
- confidence interval of ``mean(d)`` by :func:`ragtrail.stats.intervals.mean_interval`: the t
  interval below 20 pairs, the BCa bootstrap resampling questions (pairs) from 20 on, none (with
  the reason) for one pair or differences that are all equal;
- p-value: two-sided paired permutation test that flips the sign of each difference (under the null
  hypothesis A and B are exchangeable within a question). Exact over all ``2**m`` sign patterns of
  the ``m`` non-zero differences when that is at most ``n_resamples``, otherwise Monte Carlo with
  ``(hits + 1) / (n_resamples + 1)`` so a p-value is never 0. Same definition as
  ``scipy.stats.permutation_test(..., permutation_type="samples")`` with statistic ``mean(B - A)``;
- Holm's step-down correction across the facets of one metric (:func:`holm`);
- minimum detectable effect at this n (:func:`ragtrail.stats.power.detectable`: 80% power, the
  comparison's alpha, the observed spread of ``d``), and with a ``target`` effect the n that
  would detect it.

Undefined results are ``None`` with a reason (``PairedStats.undefined``), never NaN: no pair at all
leaves everything undefined; all differences zero give ``p = 1`` (every sign pattern is as extreme).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ragtrail.jsonsafe import JsonObject
from ragtrail.stats.intervals import Interval, mean_interval
from ragtrail.stats.power import ALPHA, POWER, Detectable, detectable

DEFAULT_RESAMPLES = 9999
DEFAULT_SEED = 13
NO_PAIRS = "no question has a value in both runs"
_EXACT_LIMIT_BITS = 20  # never enumerate more than 2**20 sign patterns


@dataclass(frozen=True)
class PairedStats:
    """Paired statistics of one metric and facet; ``undefined`` maps a None field to its reason."""

    n: int
    mean_a: float | None
    mean_b: float | None
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    exact: bool
    undefined: dict[str, str] = field(default_factory=dict)
    ci_method: str = "none"
    detectable: Detectable = field(default_factory=lambda: _undetectable(0, "not computed"))

    @property
    def mde(self) -> float | None:
        """The smallest difference this comparison detects with 80% power (None: unknown)."""
        return self.detectable.mde

    def detect_fields(self) -> JsonObject:
        """The CI's method, ``mde`` and ``needed_n`` with the power they refer to (strict JSON)."""
        d = self.detectable
        return {
            "ci_method": self.ci_method,
            "mde": d.mde,
            "mde_power": d.power,
            "needed_n": d.needed_n,
        }


def _undetectable(n: int, reason: str) -> Detectable:
    return Detectable(n=n, sd=None, mde=None, alpha=ALPHA, power=POWER, reason=reason)


def paired_interval(
    a: Sequence[float],
    b: Sequence[float],
    *,
    bounds: tuple[float, float] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """The interval of ``mean(b - a)`` over pairs (questions), by n (see the module doc)."""
    return mean_interval(
        _differences(a, b), bounds=bounds, n_resamples=n_resamples, confidence=confidence, seed=seed
    )


def sign_flip_p_value(
    differences: Sequence[float],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[float, bool]:
    """Two-sided sign-flip permutation p-value of ``mean(differences)`` and whether it is exact.

    ``p = min(1, 2 * min(P(T <= t), P(T >= t)))`` over the sign-flip distribution of the mean
    ``T``. Comparisons allow a relative tolerance of 1e-14 so that float noise does not decide
    ties (as scipy does).
    """
    d = np.asarray(differences, dtype=float)
    if d.size == 0:
        raise ValueError("no differences to test")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    observed = float(d.mean())
    nonzero = d[d != 0.0]
    m = nonzero.size
    if m == 0:
        return 1.0, True
    exact = m <= _EXACT_LIMIT_BITS and 2**m <= n_resamples
    if exact:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m)))
    else:
        rng = np.random.default_rng(seed)
        signs = rng.choice(np.array([1.0, -1.0]), size=(n_resamples, m))
    # Zeros contribute nothing to the sum whatever their sign, so flipping only the non-zero
    # differences gives the same distribution of the mean as flipping all of them.
    null = (signs * nonzero).sum(axis=1) / d.size
    eps = 1e-14 * max(1.0, abs(observed))
    less = int(np.count_nonzero(null <= observed + eps))
    greater = int(np.count_nonzero(null >= observed - eps))
    if exact:
        p_less, p_greater = less / len(null), greater / len(null)
    else:
        p_less, p_greater = (less + 1) / (n_resamples + 1), (greater + 1) / (n_resamples + 1)
    return min(1.0, 2.0 * min(p_less, p_greater)), exact


def compare_paired(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
    target: float | None = None,
) -> PairedStats:
    """Means, mean difference (B - A), its CI, the sign-flip p-value and the MDE of paired data
    (with ``target``, a difference in the metric's unit, also the n that would detect it)."""
    d = _differences(a, b)
    if d.size == 0:
        fields = ("mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_value", "mde")
        return PairedStats(
            n=0,
            mean_a=None,
            mean_b=None,
            diff=None,
            ci_low=None,
            ci_high=None,
            p_value=None,
            exact=False,
            undefined=dict.fromkeys(fields, NO_PAIRS),
            detectable=_undetectable(0, NO_PAIRS),
        )
    interval = mean_interval(
        d, bounds=None, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    p_value, exact = sign_flip_p_value(d, n_resamples=n_resamples, seed=seed)
    power = detectable(d, alpha=1.0 - confidence, target=target)
    undefined = (
        dict.fromkeys(("ci_low", "ci_high"), interval.reason) if not interval.defined else {}
    )
    if power.mde is None:
        undefined["mde"] = power.reason
    return PairedStats(
        n=int(d.size),
        mean_a=math.fsum(a) / d.size,
        mean_b=math.fsum(b) / d.size,
        diff=float(d.mean()),
        ci_low=interval.low,
        ci_high=interval.high,
        p_value=p_value,
        exact=exact,
        undefined=undefined,
        ci_method=interval.method.value,
        detectable=power,
    )


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values; ``None`` entries stay ``None`` and do not count.

    Sort the m defined p-values ascending, ``p_(i) * (m - i + 1)``, make the sequence
    non-decreasing (running maximum) and cap at 1; results come back in the input order.
    """
    defined = [(p, i) for i, p in enumerate(p_values) if p is not None]
    m = len(defined)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(defined)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p-value {p!r} is not in [0, 1]")
        running = max(running, min(1.0, p * (m - rank)))
        adjusted[i] = running
    return adjusted


def _differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired samples must be flat and of equal length: {x.shape} vs {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("paired samples must be finite (drop undefined values before pairing)")
    return y - x
