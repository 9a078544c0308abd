"""Selective accuracy against coverage: the curve, its area and the threshold for a coverage.

Rows are sorted by confidence; each distinct confidence value, taken as the threshold, keeps the
rows at or above it (tied rows are kept or dropped together), giving the coverage (share of rows
answered) and the selective accuracy (share of kept rows that are correct; a kept abstention is
not correct). :func:`area_under_curve` integrates the curve as a step function over coverage
from 0 to 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragtrail.jsonsafe import JsonObject

_COVERAGE_TOLERANCE = 1e-12


@dataclass(frozen=True)
class CurvePoint:
    """Keeping the rows with confidence >= ``threshold``: ``n_kept`` rows, ``coverage`` of all,
    ``accuracy`` = correct share among them."""

    coverage: float
    accuracy: float
    threshold: float
    n_kept: int

    def as_dict(self) -> JsonObject:
        return {
            "coverage": self.coverage,
            "accuracy": self.accuracy,
            "threshold": self.threshold,
            "n_kept": self.n_kept,
        }


def selective_curve(confidences: Sequence[float], correct: Sequence[bool]) -> list[CurvePoint]:
    """One point per distinct confidence, highest threshold (lowest coverage) first; the last
    point keeps every row (coverage 1)."""
    conf = np.asarray(confidences, dtype=float)
    hits = np.asarray(correct, dtype=bool)
    if conf.ndim != 1 or conf.shape != hits.shape:
        raise ValueError(f"{conf.size} confidences but {hits.size} outcomes")
    if not conf.size:
        raise ValueError("a selective curve needs at least one row")
    if not np.isfinite(conf).all():
        raise ValueError("confidences must be finite")
    order = np.argsort(-conf, kind="stable")
    ranked = conf[order]
    correct_so_far = np.cumsum(hits[order])
    n = conf.size
    points = []
    for i in range(n):
        if i + 1 == n or ranked[i + 1] != ranked[i]:  # the last row of a tie group
            kept = i + 1
            points.append(
                CurvePoint(kept / n, float(correct_so_far[i]) / kept, float(ranked[i]), kept)
            )
    return points


def area_under_curve(curve: Sequence[CurvePoint]) -> float:
    """Step-function area over coverage 0..1: each point's accuracy holds from the previous
    point's coverage (0 for the first) up to its own. Without ties this is the mean, over
    k = 1..n, of the accuracy of the k most confident rows."""
    if not curve:
        raise ValueError("an empty curve has no area")
    area, previous = 0.0, 0.0
    for point in curve:
        area += (point.coverage - previous) * point.accuracy
        previous = point.coverage
    return area


def threshold_for_coverage(curve: Sequence[CurvePoint], target: float) -> CurvePoint:
    """The point with the largest threshold whose coverage reaches ``target`` (in (0, 1])."""
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target coverage must be in (0, 1], got {target}")
    for point in curve:
        if point.coverage >= target - _COVERAGE_TOLERANCE:
            return point
    raise ValueError("the curve never reaches the target coverage (it must end at coverage 1)")
