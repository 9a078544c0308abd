"""Near-duplicate question detection: n-gram Jaccard, embedding cosine, previous versions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragtrail.testset.dedup import (
    Duplicate,
    find_duplicates,
    kept_indices,
    normalize_question,
    word_ngrams,
)


def test_normalize_question() -> None:
    assert normalize_question("  What's the  PTO-policy?! ") == "what s the pto policy"
    assert normalize_question("Ｗｈａｔ\tis_it…") == "what is it"
    assert normalize_question("???") == ""


def test_word_ngrams() -> None:
    assert word_ngrams("a b c d", 3) == {("a", "b", "c"), ("b", "c", "d")}
    assert word_ngrams("a b", 3) == frozenset()


def test_exact_and_normalised_duplicates() -> None:
    questions = [
        "How many days of annual leave do full-time staff get?",
        "how many days of annual leave do full time staff get",
        "Which extension do I call to report a security incident?",
        "???",
        "!!!",
    ]
    dups = find_duplicates(questions)
    assert dups[0] is None and dups[2] is None and dups[3] is None
    assert dups[1] == Duplicate(of_index=0, of_previous=False, cosine=None, jaccard=1.0)
    assert dups[4] == Duplicate(3, False, None, 1.0)
    assert kept_indices(dups) == [0, 2, 3]


def test_paraphrase_with_high_ngram_overlap() -> None:
    base = "What is the maximum number of vacation days an employee can carry over?"
    longer = "What is the maximum number of vacation days an employee can carry over to next year?"
    different = "What is the minimum password length for an administrator account?"
    dups = find_duplicates([base, different, longer])
    assert dups[0] is None and dups[1] is None
    assert dups[2] is not None and dups[2].of_index == 0 and not dups[2].of_previous
    assert dups[2].jaccard == pytest.approx(11 / 14)
    # a stricter threshold keeps the paraphrase
    assert find_duplicates([base, longer], jaccard_threshold=0.8) == [None, None]


def test_short_questions_fall_back_to_unigrams() -> None:
    dups = find_duplicates(["Who approves leave?", "Who approves annual leave?", "Who pays?"])
    assert dups[0] is None and dups[2] is None
    assert dups[1] == Duplicate(0, False, None, pytest.approx(3 / 4))


def test_embedding_duplicates() -> None:
    questions = [
        "How much annual leave do I get?",
        "What is my yearly holiday allowance?",  # no word overlap, same meaning
        "Who do I call about a phishing email?",
        "Which office is closest to the station?",
    ]
    vectors = np.array(
        [
            [1.0, 0.0, 0.0],
            [0.99, 0.1, 0.0],  # cosine 0.995 with the first
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 3.0],  # unnormalised: still compared by direction
        ]
    )
    dups = find_duplicates(questions, embeddings=vectors)
    assert [d is None for d in dups] == [True, False, True, True]
    assert dups[1].of_index == 0 and dups[1].cosine == pytest.approx(0.995, abs=1e-3)
    assert dups[1].jaccard < 0.1
    assert find_duplicates(questions) == [None] * 4  # text alone sees no duplicates


def test_greedy_first_occurrence_kept_and_duplicates_leave_the_pool() -> None:
    def unit(deg: float) -> list[float]:
        return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]

    questions = ["alpha one", "bravo two", "charlie three"]
    vectors = np.array([unit(0), unit(20), unit(40)])  # a~b, b~c, a!~c at cos(25°)
    dups = find_duplicates(questions, embeddings=vectors, cos_threshold=math.cos(math.radians(25)))
    assert dups[0] is None and dups[2] is None
    assert dups[1].of_index == 0


def test_previous_version_duplicates_reported_distinctly() -> None:
    previous = [
        "How many days of annual leave do full-time staff get?",
        "What is the minimum password length for an admin account?",
    ]
    questions = [
        "What is the minimum password length for an admin account",  # text dup of previous[1]
        "Where is the expense policy published?",
        "Where is the expense policy published?",  # dup of the current question 1
        "Which days of leave can part-time staff claim?",  # embedding dup of previous[0]
    ]
    vectors = np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.01]])
    prev_vectors = np.array([[1.0, 0.0], [0.0, 1.0]])
    dups = find_duplicates(
        questions, embeddings=vectors, previous=previous, previous_embeddings=prev_vectors
    )
    assert dups[0] == Duplicate(1, True, pytest.approx(1.0), 1.0)
    assert dups[1] is None
    assert dups[2] == Duplicate(1, False, pytest.approx(1.0), 1.0)
    assert dups[3].of_index == 0 and dups[3].of_previous and dups[3].cosine > 0.99

    # without previous embeddings only the text test applies to the previous version
    text_only = find_duplicates(questions, embeddings=vectors, previous=previous)
    assert text_only[0].of_previous and text_only[3] is None


def test_shape_checks() -> None:
    with pytest.raises(ValueError, match="embeddings"):
        find_duplicates(["a", "b"], embeddings=np.zeros((3, 4)))
    with pytest.raises(ValueError, match="previous_embeddings"):
        find_duplicates(
            ["a"], embeddings=np.zeros((1, 4)), previous=["b"], previous_embeddings=np.zeros(4)
        )
    with pytest.raises(ValueError, match="dimensions"):
        find_duplicates(
            ["a"],
            embeddings=np.zeros((1, 4)),
            previous=["b"],
            previous_embeddings=np.zeros((1, 5)),
        )
    with pytest.raises(ValueError, match="ngram_n"):
        find_duplicates(["a"], ngram_n=0)
    assert find_duplicates([]) == []


def test_zero_vectors_are_not_duplicates() -> None:
    dups = find_duplicates(["first thing here", "second other words"], embeddings=np.zeros((2, 3)))
    assert dups == [None, None]


def test_a_few_thousand_questions() -> None:
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(400)]
    questions = [" ".join(rng.choice(words, size=12)) for _ in range(2000)]
    questions[1500] = questions[10] + " please"
    vectors = rng.standard_normal((2000, 64)).astype(np.float32)
    vectors[1999] = vectors[5] + 0.01
    dups = find_duplicates(questions, embeddings=vectors)
    assert dups[1500] is not None and dups[1500].of_index == 10
    assert dups[1999] is not None and dups[1999].of_index == 5
    assert sum(d is not None for d in dups) == 2
