"""Token counts, compression, helpfulness and cosine on values worked out by hand."""

from __future__ import annotations

import math

import pytest

from ragtrail.evaluate.evidence.measures import compression, cosine, helpfulness, token_count


def test_token_count_counts_words_and_punctuation_marks() -> None:
    # Paris | is | the | capital | of | France | .
    assert token_count("Paris is the capital of France.") == 7
    # L | ' | été | , | c | ' | est | chaud | .  (unicode words, each apostrophe one token)
    assert token_count("L'été, c'est chaud.") == 9
    assert token_count("") == 0
    assert token_count("   \n\t") == 0


def test_compression_is_passage_over_evidence_and_undefined_for_empty_evidence() -> None:
    assert compression(100, 10) == 10.0
    assert compression(37, 4) == 9.25
    assert compression(0, 5) == 0.0
    assert compression(10, 0) is None
    with pytest.raises(ValueError, match=">= 0"):
        compression(-1, 3)
    with pytest.raises(ValueError, match=">= 0"):
        compression(3, -1)


def test_helpfulness_is_the_sigmoid_of_the_log_prob_gain() -> None:
    # sigmoid(1) = 1 / (1 + e^-1) = 1 / 1.3678794412 = 0.7310585786
    assert helpfulness(-2.0, -3.0) == pytest.approx(0.7310585786, abs=1e-10)
    # sigmoid(-1) = 1 - sigmoid(1) = 0.2689414214
    assert helpfulness(-3.0, -2.0) == pytest.approx(0.2689414214, abs=1e-10)
    assert helpfulness(-4.0, -4.0) == 0.5


def test_helpfulness_is_stable_far_from_zero() -> None:
    assert helpfulness(1000.0, 0.0) == 1.0
    assert helpfulness(-1000.0, 0.0) == 0.0
    assert helpfulness(0.0, 1000.0) == 0.0
    # the gap itself overflows to +-inf: still no NaN and no OverflowError
    assert helpfulness(1e308, -1e308) == 1.0
    assert helpfulness(-1e308, 1e308) == 0.0


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_helpfulness_refuses_non_finite_log_probs(bad: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        helpfulness(bad, -1.0)
    with pytest.raises(ValueError, match="finite"):
        helpfulness(-1.0, bad)


def test_cosine_on_hand_vectors() -> None:
    assert cosine([1.0, 0.0], [1.0, 1.0]) == pytest.approx(1.0 / math.sqrt(2.0))
    assert cosine([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0)
    assert cosine([1.0, 0.0], [0.0, 3.0]) == 0.0
    assert cosine([1.0, 2.0], [-1.0, -2.0]) == pytest.approx(-1.0)
    # (3, 4) . (4, 3) = 24; norms 5 and 5
    assert cosine([3, 4], [4, 3]) == pytest.approx(24 / 25)


def test_cosine_is_undefined_for_a_zero_vector_and_refuses_mismatched_lengths() -> None:
    assert cosine([0.0, 0.0], [1.0, 2.0]) is None
    assert cosine([1.0, 2.0], [0.0, 0.0]) is None
    with pytest.raises(ValueError, match="lengths"):
        cosine([1.0, 2.0], [1.0])
