"""What a paired comparison can detect: the minimum detectable effect and the n it would need.

A paired comparison of two runs on n shared items tests the mean of the per-item differences
``d``. With the differences' standard deviation ``sd`` the one-sample t test on ``d`` at level
``alpha`` has power ``P(reject | true mean = delta)`` from the noncentral t distribution with
``n - 1`` degrees of freedom and noncentrality ``delta * sqrt(n) / sd``. The **minimum detectable
effect** (MDE) is the smallest ``delta`` detected with the wanted power (80% by default); the
**needed n** for an effect is the smallest n that detects it with that power. Both are exact
(no normal approximation), so they hold at the small n of a CPU night, and match
``statsmodels.stats.power.TTestPower``.

ragtrail's comparisons use a sign-flip permutation test, whose power at these n is close to the
t test's; the MDE is what the observed variance says a run of this size could have seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

POWER = 0.8
ALPHA = 0.05
MAX_N = 10_000_000
Alternative = Literal["two-sided", "larger"]


def power(
    effect_size: float, n: int, *, alpha: float = ALPHA, alternative: Alternative = "two-sided"
) -> float:
    """Power of the one-sample t test on ``n`` differences for a standardised effect
    ``effect_size`` (mean / sd)."""
    if n < 2:
        raise ValueError(f"a t test needs n >= 2, got {n}")
    if effect_size < 0.0:
        raise ValueError(f"effect_size must be >= 0 (the test is symmetric), got {effect_size}")
    df = n - 1
    nc = effect_size * math.sqrt(n)
    critical = scipy_stats.t.isf(alpha if alternative == "larger" else alpha / 2.0, df)
    upper = float(scipy_stats.nct.sf(critical, df, nc))
    if math.isnan(upper):  # scipy's nct fails far out in the tails, where the answer is plain
        upper = 1.0 if nc > critical else 0.0
    if alternative == "larger":
        return upper
    # the far tail on the wrong side: scipy's nct returns NaN there for a few (df, nc), where
    # the probability is below 1e-10 and cannot move the power
    lower = float(scipy_stats.nct.cdf(-critical, df, nc))
    return upper + (0.0 if math.isnan(lower) else lower)


def standardised_mde(
    n: int,
    *,
    alpha: float = ALPHA,
    target_power: float = POWER,
    alternative: Alternative = "two-sided",
) -> float:
    """The smallest effect size (mean / sd) detected with ``target_power`` at ``n``."""
    if power(0.0, n, alpha=alpha, alternative=alternative) >= target_power:
        return 0.0
    upper = 1.0
    while power(upper, n, alpha=alpha, alternative=alternative) < target_power:
        upper *= 2.0
    return float(
        optimize.brentq(
            lambda d: power(d, n, alpha=alpha, alternative=alternative) - target_power,
            0.0,
            upper,
            xtol=1e-12,
        )
    )


def needed_n(
    effect_size: float,
    *,
    alpha: float = ALPHA,
    target_power: float = POWER,
    alternative: Alternative = "two-sided",
) -> int:
    """The smallest n (>= 2) whose test detects the standardised ``effect_size`` with
    ``target_power``; ValueError for a non-positive effect."""
    if effect_size <= 0.0:
        raise ValueError(f"effect_size must be > 0, got {effect_size}")

    def enough(n: int) -> bool:
        return power(effect_size, n, alpha=alpha, alternative=alternative) >= target_power

    high = 2
    while not enough(high):
        if high >= MAX_N:
            raise ValueError(f"effect size {effect_size} needs more than {MAX_N} items")
        high *= 2
    low = max(2, high // 2)
    if enough(low):
        return low
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


@dataclass(frozen=True)
class Detectable:
    """What a paired comparison on ``n`` items could detect.

    ``mde`` is in the metric's own unit (None with ``reason`` when the spread of the differences
    cannot be estimated); ``needed_n`` is the n that would detect ``target`` (when one is set).
    """

    n: int
    sd: float | None
    mde: float | None
    alpha: float
    power: float
    target: float | None = None
    needed_n: int | None = None
    reason: str = ""

    def at(self, *, alpha: float, target: float | None = None) -> Detectable:
        """The same comparison judged at another ``alpha`` (and ``target``)."""
        if self.sd is None or self.sd == 0.0 or self.n < 2:
            return Detectable(self.n, self.sd, None, alpha, self.power, target, None, self.reason)
        mde = self.sd * standardised_mde(self.n, alpha=alpha, target_power=self.power)
        needed = None
        if target is not None and target > 0.0:
            needed = needed_n(target / self.sd, alpha=alpha, target_power=self.power)
        return Detectable(self.n, self.sd, mde, alpha, self.power, target, needed)

    def as_dict(self) -> dict[str, float | int | str | None]:
        out: dict[str, float | int | str | None] = {
            "n": self.n,
            "sd": self.sd,
            "mde": self.mde,
            "alpha": self.alpha,
            "power": self.power,
            "target": self.target,
            "needed_n": self.needed_n,
        }
        if self.reason:
            out["reason"] = self.reason
        return out


def detectable(
    differences: Sequence[float] | np.ndarray,
    *,
    alpha: float = ALPHA,
    target_power: float = POWER,
    target: float | None = None,
    alternative: Alternative = "two-sided",
) -> Detectable:
    """The MDE of a paired comparison from its observed differences (and the n needed to detect
    ``target``, in the metric's unit, when given)."""
    d = np.asarray(differences, dtype=float)
    n = int(d.size)
    common = {"n": n, "alpha": alpha, "power": target_power, "target": target}
    if n < 2:
        return Detectable(sd=None, mde=None, reason=f"{n} paired item(s): no spread", **common)
    sd = float(d.std(ddof=1))
    if np.ptp(d) == 0.0:  # equal differences (sd may still be 1e-17 of rounding)
        return Detectable(
            sd=0.0,
            mde=None,
            reason=f"all {n} differences are {d[0]:.4g}: their spread, and so the MDE, is unknown",
            **common,
        )
    mde = sd * standardised_mde(n, alpha=alpha, target_power=target_power, alternative=alternative)
    needed = None
    if target is not None and target > 0.0:
        needed = needed_n(
            target / sd, alpha=alpha, target_power=target_power, alternative=alternative
        )
    return Detectable(sd=sd, mde=mde, needed_n=needed, **common)


__all__ = ["Detectable", "detectable", "needed_n", "power", "standardised_mde"]
