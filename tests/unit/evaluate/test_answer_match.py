"""Normalised answer matching: lower case, no punctuation, no stop words, whole-word runs."""

from __future__ import annotations

import pytest

from ragtrail.evaluate.sufficiency.answer_match import (
    MEANING_WORDS,
    answer_stop_words,
    matches_gold,
    normalise_answer,
)


def test_stop_words_are_sklearns_minus_the_meaning_words() -> None:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    assert MEANING_WORDS <= ENGLISH_STOP_WORDS  # each kept word really is one sklearn drops
    assert answer_stop_words() == ENGLISH_STOP_WORDS - MEANING_WORDS
    assert {"the", "a", "an", "of", "is"} <= answer_stop_words()
    assert (
        not {"not", "no", "two", "three", "before", "after", "more", "less"} & answer_stop_words()
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 27 days.", "answer 27 days"),  # "answer" is a content word
        ("An Extension: 4444!", "extension 4444"),
        ("Staff don't get it", "staff dont"),
        ("Mary\u2019s office", "marys office"),
        ("every Tuesday at 10:00", "every tuesday 10 00"),
        ("$1,200", "1 200"),
        ("It is not paid", "not paid"),
        ("the of and", ""),
        ("", ""),
    ],
)
def test_normalise_answer(text: str, expected: str) -> None:
    assert normalise_answer(text) == expected


@pytest.mark.parametrize(
    ("answer", "golds", "expected"),
    [
        ("27 days", ["27 days"], True),  # equal
        ("Full-time staff get 27 days of annual leave.", ["27 days"], True),  # contained
        ("They get 27 days.", ["28 days", "The 27 days"], True),  # any gold
        ("127 days", ["27 days"], False),  # whole tokens only
        ("27 working days", ["27 days"], False),  # one contiguous run
        ("days 27", ["27 days"], False),  # in order
        ("Two approvals are needed.", ["three approvals"], False),  # numbers kept
        ("Leave is not paid.", ["Leave is paid"], False),  # negation kept
        ("after the meeting", ["before the meeting"], False),
        ("Extension 4444", ["extension 4444"], True),
        ("anything at all", ["the"], False),  # an all-stop-word gold never matches
        ("", ["the"], False),
        ("27 days", [], False),
    ],
)
def test_matches_gold(answer: str, golds: list[str], expected: bool) -> None:
    assert matches_gold(answer, golds) is expected
