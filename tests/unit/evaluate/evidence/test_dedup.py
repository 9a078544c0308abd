"""Word n-grams, their Jaccard similarity and near-duplicate removal on hand-made texts."""

from __future__ import annotations

import pytest

from ragtrail.evaluate.evidence.dedup import dedupe, ngram_similarity, word_ngrams

MAT = "the cat sat on the mat"
MAT_AGAIN = "The cat sat on the MAT!"
RUG = "the cat sat on the rug"
DOG = "a dog barked loudly"


def test_word_ngrams_lowercase_and_short_texts_give_one_tuple() -> None:
    assert word_ngrams("The cat sat on", 3) == {("the", "cat", "sat"), ("cat", "sat", "on")}
    assert word_ngrams("Hi, there", 3) == {("hi", "there")}
    assert word_ngrams("Été chaud", 1) == {("été",), ("chaud",)}
    assert word_ngrams("", 3) == set()
    assert word_ngrams(" ... ", 2) == set()
    with pytest.raises(ValueError, match="n must be"):
        word_ngrams("a b", 0)


def test_ngram_similarity_by_hand() -> None:
    assert ngram_similarity(MAT, MAT_AGAIN) == 1.0
    # trigrams of MAT: the cat sat | cat sat on | sat on the | on the mat
    # RUG shares the first three, has "on the rug" instead: 3 / 5
    assert ngram_similarity(MAT, RUG) == pytest.approx(0.6)
    # bigrams: MAT has 5, RUG 5, 4 shared -> 4 / 6
    assert ngram_similarity(MAT, RUG, n=2) == pytest.approx(4 / 6)
    assert ngram_similarity(MAT, DOG) == 0.0
    # short texts still compare: {("hi", "there")} against itself
    assert ngram_similarity("hi there", "Hi there.") == 1.0


def test_ngram_similarity_of_texts_without_words() -> None:
    assert ngram_similarity("", "  ") == 1.0
    assert ngram_similarity("", MAT) == 0.0
    assert ngram_similarity(MAT, "?!") == 0.0


def test_dedupe_keeps_the_first_of_near_duplicates_and_drops_blanks() -> None:
    texts = [MAT, MAT_AGAIN, RUG, "", DOG, "  ...  ", DOG.upper()]
    assert dedupe(texts, threshold=0.8) == [0, 2, 4]
    # at threshold 0.6 the rug sentence (similarity exactly 0.6) is a duplicate too
    assert dedupe(texts, threshold=0.6) == [0, 4]
    assert dedupe(texts, threshold=1.0) == [0, 2, 4]
    assert dedupe([]) == []
    assert dedupe(["", " "]) == []


def test_dedupe_compares_with_kept_texts_only() -> None:
    # B is a duplicate of A (dropped); C is close to B but not to A, so C is kept
    a = "one two three four five six"
    b = "one two three four five six seven eight"  # 4 of 6 trigrams shared with a: 4/6
    c = "three four five six seven eight"  # with a: 2/6; with b: 4/6
    assert ngram_similarity(a, b) == pytest.approx(4 / 6)
    assert ngram_similarity(a, c) == pytest.approx(2 / 6)
    assert dedupe([a, b, c], threshold=0.6) == [0, 2]


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.5])
def test_dedupe_refuses_a_threshold_outside_0_1(threshold: float) -> None:
    with pytest.raises(ValueError, match="threshold"):
        dedupe([MAT], threshold=threshold)
