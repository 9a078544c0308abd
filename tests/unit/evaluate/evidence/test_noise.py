"""Relevant passages mixed with distractors: counts, what is drawn, and seeded determinism."""

from __future__ import annotations

import random

import pytest

from ragtrail.evaluate.evidence.noise import NOISE_RATIOS, noisy_passages

RELEVANT = ["r1", "r2"]
DISTRACTORS = [f"d{i}" for i in range(1, 11)]


@pytest.mark.parametrize(("ratio", "added"), [(1.0, 2), (2.0, 4), (4.0, 8), (0.5, 1)])
def test_ratio_sets_the_number_of_distractors(ratio: float, added: int) -> None:
    mixed = noisy_passages(RELEVANT, DISTRACTORS, ratio, random.Random(0))
    assert len(mixed) == len(RELEVANT) + added
    assert sorted(p for p in mixed if p.startswith("r")) == RELEVANT
    drawn = [p for p in mixed if p.startswith("d")]
    assert len(set(drawn)) == added  # without replacement
    assert set(drawn) <= set(DISTRACTORS)


def test_ratio_zero_returns_an_unchanged_copy() -> None:
    rng = random.Random(0)
    state = rng.getstate()
    out = noisy_passages(RELEVANT, DISTRACTORS, 0.0, rng)
    assert out == RELEVANT
    assert out is not RELEVANT
    assert rng.getstate() == state  # nothing drawn


def test_the_same_seed_gives_the_same_mix_and_relevant_passages_move() -> None:
    first = noisy_passages(RELEVANT, DISTRACTORS, 2.0, random.Random(7))
    again = noisy_passages(RELEVANT, DISTRACTORS, 2.0, random.Random(7))
    assert first == again
    mixes = [noisy_passages(RELEVANT, DISTRACTORS, 2.0, random.Random(s)) for s in range(20)]
    assert len({tuple(m) for m in mixes}) > 1
    assert any(m.index("r1") != 0 for m in mixes)


def test_too_few_distractors_names_the_shortfall() -> None:
    with pytest.raises(ValueError, match=r"needs 8 distractors .* got 5 \(3 short\)"):
        noisy_passages(RELEVANT, DISTRACTORS[:5], 4.0, random.Random(0))


@pytest.mark.parametrize("ratio", [-1.0, float("nan"), float("inf")])
def test_a_bad_ratio_is_refused(ratio: float) -> None:
    with pytest.raises(ValueError, match="ratio"):
        noisy_passages(RELEVANT, DISTRACTORS, ratio, random.Random(0))


def test_the_ratios_of_the_robustness_check() -> None:
    assert NOISE_RATIOS == (0.0, 1.0, 2.0, 4.0)
