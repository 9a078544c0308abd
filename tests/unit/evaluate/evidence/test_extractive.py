"""The extractive baseline with a bag-of-words ``encode`` over a fixed vocabulary: which
sentences fit the budget, in which order they come out, and the cut when none fits."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ragtrail.evaluate.evidence.extractive import extractive_evidence, truncate_tokens

VOCAB = ["paris", "capital", "france", "seine", "bananas", "spain"]
QUESTION = "What is the capital of France, Paris?"  # vector (1, 1, 1, 0, 0, 0)
PASSAGES = [
    # s0 "Bananas are yellow."            4 tokens, vector 0: norm 0, ranks last
    # s1 "France borders Spain."          4 tokens, cosine 1 / (sqrt 3 * sqrt 2) = 0.408
    "Bananas are yellow. France borders Spain.",
    # s2 "Paris is the capital of France." 7 tokens, cosine 1
    # s3 "The Seine flows through Paris."  6 tokens, cosine 0.408 (tie with s1: s1 first)
    "Paris is the capital of France. The Seine flows through Paris.",
]
S0, S1 = "Bananas are yellow.", "France borders Spain."
S2, S3 = "Paris is the capital of France.", "The Seine flows through Paris."
# by cosine: s2, s1, s3, s0
seen: list[list[str]] = []


def encode(texts: list[str]) -> np.ndarray:
    """Word counts over VOCAB; not normalised (the baseline must use the cosine)."""
    seen.append(texts)
    rows = []
    for text in texts:
        words = re.findall(r"\w+", text.lower())
        rows.append([3.0 * words.count(w) for w in VOCAB])
    return np.array(rows)


def pick(budget: int, passages: list[str] = PASSAGES) -> str:
    return extractive_evidence(QUESTION, passages, budget_tokens=budget, encode=encode)


def test_encode_sees_the_question_then_every_sentence() -> None:
    seen.clear()
    pick(11)
    assert seen == [[QUESTION, S0, S1, S2, S3]]


def test_the_best_sentences_that_fit_come_out_in_passage_order() -> None:
    # s2 (7) + s1 (4) = 11; s3 and s0 no longer fit; output order is passage order (s1 first)
    assert pick(11) == f"{S1} {S2}"
    # s2 (7) + s1 (4) = 11; s3 (6) -> 17 no; s0 (4) -> 15 yes
    assert pick(15) == f"{S0} {S1} {S2}"
    assert pick(100) == f"{S0} {S1} {S2} {S3}"


def test_a_sentence_that_does_not_fit_is_skipped_for_the_next() -> None:
    assert pick(7) == S2
    assert pick(8) == S2  # nothing else fits in the one token left
    # s2 (7) does not fit in 5; s1 (4) does; then s3 (6) and s0 (4 -> 8) do not
    assert pick(5) == S1


def test_when_no_sentence_fits_the_best_one_is_cut_at_a_word_boundary() -> None:
    assert pick(3) == "Paris is the"
    assert pick(1) == "Paris"
    assert truncate_tokens("L'été est chaud.", 3) == "L'été"
    assert truncate_tokens("Short one.", 10) == "Short one."


def test_no_sentence_gives_empty_evidence_and_a_bad_budget_is_refused() -> None:
    assert pick(10, []) == ""
    assert pick(10, ["", "  \n "]) == ""
    with pytest.raises(ValueError, match="budget_tokens"):
        pick(0)


def test_an_encoder_with_the_wrong_number_of_rows_is_refused() -> None:
    with pytest.raises(ValueError, match="one row per text"):
        extractive_evidence(
            QUESTION, PASSAGES, budget_tokens=10, encode=lambda texts: np.ones((2, 3))
        )
