"""SEER's smoothing coefficient-of-variation weighting of the three experts (METHODS §10).

Over the scored samples (ragtrail computes the weights once over every sample of a training
run, so all questions rank on one scale) each expert x gives scores s_x; its coefficient of
variation ``c_x = std(s_x) / mean(s_x)`` says how much it separates the samples relative to its
level. The
weights ``alpha = softmax(c / tau)`` favour the experts that discriminate; a large ``tau`` smooths
them towards equal weights. The combined score of a sample is ``sum_x alpha_x * s_x``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

EXPERTS: tuple[str, ...] = ("faithfulness", "helpfulness", "conciseness")
"""The experts in SEER's order: faithfulness s_f, helpfulness s_h, conciseness s_c."""

__all__ = ["EXPERTS", "combine", "cov_weights", "equal_weights"]


def _finite(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{what} holds a non-finite score")
    return out


def _coefficient_of_variation(values: Sequence[float]) -> float:
    """Population std / mean; 0 when there is no value or the mean is <= 0.

    An expert whose mean is not positive carries no spread information relative to its level
    (the ratio would be undefined or change sign), so it gets the neutral 0.
    """
    if not values:
        return 0.0
    mean = math.fsum(values) / len(values)
    if mean <= 0.0:
        return 0.0
    variance = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return math.sqrt(variance) / mean


def cov_weights(scores: Mapping[str, Sequence[float]], tau: float) -> dict[str, float]:
    """``alpha_x = softmax(c_x / tau)`` over the experts of ``scores`` (in its order); sums to 1."""
    if not (isinstance(tau, int | float) and math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
    if not scores:
        raise ValueError("no expert scores to weight")
    logits = {
        name: _coefficient_of_variation(_finite(values, f"expert {name!r}")) / tau
        for name, values in scores.items()
    }
    top = max(logits.values())
    exps = {name: math.exp(z - top) for name, z in logits.items()}  # stable: largest is exp(0)
    total = math.fsum(exps.values())
    return {name: e / total for name, e in exps.items()}


def equal_weights(names: Sequence[str]) -> dict[str, float]:
    """``1 / len(names)`` for each expert: the ablation without CoV weighting."""
    if not names:
        raise ValueError("no expert names")
    if len(set(names)) != len(names):
        raise ValueError(f"expert names repeat: {list(names)}")
    return dict.fromkeys(names, 1.0 / len(names))


def combine(row: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """``sum_x alpha_x * s_x`` over the experts of ``weights``; a missing expert is a ValueError."""
    missing = [name for name in weights if name not in row]
    if missing:
        raise ValueError(f"scores lack expert(s) {missing}; have {sorted(row)}")
    terms = [float(alpha) * float(row[name]) for name, alpha in weights.items()]
    if not all(math.isfinite(t) for t in terms):
        raise ValueError("a weight or score is not finite")
    return math.fsum(terms)
