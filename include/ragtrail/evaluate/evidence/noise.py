"""Noisy retrieval for the robustness check: relevant passages mixed with irrelevant ones.

SEER adds 0-400% irrelevant passages (noise-to-signal ratios 0, 1, 2, 4) and measures the
evidence's "silver faithfulness" against the relevant passages only (METHODS §10).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

NOISE_RATIOS: tuple[float, ...] = (0.0, 1.0, 2.0, 4.0)
"""The noise-to-signal ratios of the robustness check (0-400%)."""

__all__ = ["NOISE_RATIOS", "noisy_passages"]


def noisy_passages(
    relevant: Sequence[str], distractors: Sequence[str], ratio: float, rng: random.Random
) -> list[str]:
    """``relevant`` plus ``k = round(ratio * len(relevant))`` distractors drawn without
    replacement, shuffled together by ``rng`` (the relevant passages move too).

    With k = 0 (ratio 0, or too small to add one) it returns a copy of ``relevant`` in order.
    ``round`` is Python's (half to even); the ratios in use give whole numbers anyway.
    """
    if not (math.isfinite(ratio) and ratio >= 0):
        raise ValueError(f"ratio must be a finite number >= 0, got {ratio!r}")
    k = round(ratio * len(relevant))
    if k == 0:
        return list(relevant)
    if len(distractors) < k:
        raise ValueError(
            f"ratio {ratio} needs {k} distractors for {len(relevant)} relevant passage(s), "
            f"got {len(distractors)} ({k - len(distractors)} short)"
        )
    mixed = [*relevant, *rng.sample(list(distractors), k)]
    rng.shuffle(mixed)
    return mixed
