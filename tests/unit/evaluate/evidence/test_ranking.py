"""Ranks and lambda-weighted preference pairs on small lists worked out by hand."""

from __future__ import annotations

import math

import pytest

from ragtrail.evaluate.evidence.ranking import (
    PreferencePair,
    lambda_weight,
    preference_pairs,
    ranks,
)


def test_ranks_put_the_best_first_and_keep_ties_in_order() -> None:
    assert ranks([0.9, 0.5, 0.1]) == [1, 2, 3]
    assert ranks([0.1, 0.9, 0.5]) == [3, 1, 2]
    assert ranks([0.5, 0.9, 0.5, 0.1]) == [2, 1, 3, 4]
    assert ranks([]) == []
    with pytest.raises(ValueError, match="finite"):
        ranks([0.5, math.nan])


def test_lambda_weight_by_hand() -> None:
    # 0.9 * |1 - 1/2| + 0.5 * |1/2 - 1| = 0.45 + 0.25 = 0.7
    assert lambda_weight(0.9, 1, 0.5, 2) == pytest.approx(0.7)
    # 0.5 * |1/2 - 1/3| + 0.1 * |1/3 - 1/2| = 0.5/6 + 0.1/6 = 0.1
    assert lambda_weight(0.5, 2, 0.1, 3) == pytest.approx(0.1)
    assert lambda_weight(0.5, 2, 0.5, 2) == 0.0
    with pytest.raises(ValueError, match="ranks start at 1"):
        lambda_weight(0.9, 0, 0.5, 2)


def test_lambda_pairs_of_three_samples_by_hand() -> None:
    # ranks 1, 2, 3
    # (0, 1): (0.9 + 0.5) * |1 - 1/2|   = 1.4 * 1/2 = 0.7
    # (0, 2): (0.9 + 0.1) * |1 - 1/3|   = 1.0 * 2/3 = 0.6666666667
    # (1, 2): (0.5 + 0.1) * |1/2 - 1/3| = 0.6 * 1/6 = 0.1
    pairs = preference_pairs([0.9, 0.5, 0.1])
    assert [(p.winner, p.loser) for p in pairs] == [(0, 1), (0, 2), (1, 2)]
    assert [p.weight for p in pairs] == pytest.approx([0.7, 2 / 3, 0.1])


def test_pairs_come_by_winner_rank_then_loser_rank_with_indices_into_the_input() -> None:
    pairs = preference_pairs([0.1, 0.9, 0.5])
    assert pairs == [
        PreferencePair(1, 2, pytest.approx(0.7)),  # type: ignore[arg-type]
        PreferencePair(1, 0, pytest.approx(2 / 3)),  # type: ignore[arg-type]
        PreferencePair(2, 0, pytest.approx(0.1)),  # type: ignore[arg-type]
    ]


def test_uniform_weighting_gives_one_per_pair() -> None:
    pairs = preference_pairs([0.9, 0.5, 0.1], weighting="uniform")
    assert [(p.winner, p.loser, p.weight) for p in pairs] == [(0, 1, 1.0), (0, 2, 1.0), (1, 2, 1.0)]
    with pytest.raises(ValueError, match="weighting"):
        preference_pairs([0.9, 0.5], weighting="mrr")  # type: ignore[arg-type]


def test_pair_counts_all_distinct_and_with_ties() -> None:
    scores = [0.3, 0.8, 0.1, 0.6, 0.95]
    assert len(preference_pairs(scores)) == 5 * 4 // 2
    # ties give no pair: (0.5, 0.5) is skipped, 0.5 > 0.1 twice
    tied = preference_pairs([0.5, 0.5, 0.1])
    assert [(p.winner, p.loser) for p in tied] == [(0, 2), (1, 2)]
    assert preference_pairs([0.4, 0.4, 0.4]) == []
    assert preference_pairs([0.4]) == []


def test_every_pair_prefers_the_higher_score_and_top_pairs_weigh_more() -> None:
    scores = [0.2, 0.7, 0.4, 0.9]
    pairs = preference_pairs(scores)
    assert all(scores[p.winner] > scores[p.loser] for p in pairs)
    weight = {(p.winner, p.loser): p.weight for p in pairs}
    # swapping ranks 1 and 2 moves more reciprocal rank than swapping ranks 3 and 4
    assert weight[(3, 1)] > weight[(2, 0)]
