"""Preference pairs for SEER's lambda-weighted preference optimisation (LPO, METHODS §10).

One query's samples are ranked by their combined score; every pair whose scores differ becomes a
(winner, loser) DPO pair weighted by ``lambda_wl = s_w*|1/r_w - 1/r_l| + s_l*|1/r_l - 1/r_w|``,
the reciprocal-rank gain of swapping the two, so pairs near the top of the list count most.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["PreferencePair", "lambda_weight", "preference_pairs", "ranks"]


@dataclass(frozen=True)
class PreferencePair:
    """A DPO pair: indices into the sample list of the preferred and the rejected sample."""

    winner: int
    loser: int
    weight: float


def _check_scores(scores: Sequence[float]) -> list[float]:
    out = [float(s) for s in scores]
    if not all(math.isfinite(s) for s in out):
        raise ValueError("scores must be finite (a NaN cannot be ranked)")
    return out


def ranks(scores: Sequence[float]) -> list[int]:
    """Rank of each score, 1 = best; equal scores keep their original order (stable)."""
    values = _check_scores(scores)
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0] * len(values)
    for rank, i in enumerate(order, start=1):
        out[i] = rank
    return out


def lambda_weight(s_w: float, r_w: int, s_l: float, r_l: int) -> float:
    """``s_w*|1/r_w - 1/r_l| + s_l*|1/r_l - 1/r_w|`` (ranks start at 1)."""
    if r_w < 1 or r_l < 1:
        raise ValueError(f"ranks start at 1, got {r_w} and {r_l}")
    return s_w * abs(1.0 / r_w - 1.0 / r_l) + s_l * abs(1.0 / r_l - 1.0 / r_w)


def preference_pairs(
    scores: Sequence[float], *, weighting: Literal["lambda", "uniform"] = "lambda"
) -> list[PreferencePair]:
    """Every (w, l) with ``scores[w] > scores[l]`` (ties give no pair), by winner rank then loser
    rank; ``"uniform"`` weighs each pair 1.0 (the ablation without lambda weights)."""
    if weighting not in ("lambda", "uniform"):
        raise ValueError(f"weighting must be 'lambda' or 'uniform', got {weighting!r}")
    values = _check_scores(scores)
    rank = ranks(values)
    order = sorted(range(len(values)), key=lambda i: rank[i])
    pairs = []
    for pos, w in enumerate(order):
        for lo in order[pos + 1 :]:
            if values[w] > values[lo]:
                weight = (
                    lambda_weight(values[w], rank[w], values[lo], rank[lo])
                    if weighting == "lambda"
                    else 1.0
                )
                pairs.append(PreferencePair(w, lo, weight))
    return pairs
