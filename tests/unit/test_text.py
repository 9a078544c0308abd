"""The shared text normalisation: one stop-word list, one tokeniser, one comparison key."""

from __future__ import annotations

from ragtrail.generate.prompts import statement_key
from ragtrail.generate.steps import tokens
from ragtrail.testset.dedup import normalize_question
from ragtrail.text import STOP_WORDS, contains_word_run, content_words, text_key, word_tokens


def test_word_tokens_fold_case_width_and_punctuation() -> None:
    assert word_tokens("What's the PTO-policy?!") == ["what", "s", "the", "pto", "policy"]
    assert word_tokens("Ｗｈａｔ\tis_it… Straße 2024") == ["what", "is", "it", "strasse", "2024"]
    assert word_tokens(" -- ") == []


def test_one_key_for_questions_and_statements() -> None:
    for text in ("  What's the  PTO-policy?! ", "Ｗｈａｔ\tis_it…", "???", "Café: 3 days."):
        assert text_key(text) == normalize_question(text) == statement_key(text)
    assert text_key("What's the PTO-policy?") == "what s the pto policy"


def test_stop_words_are_the_union_of_the_former_lists() -> None:
    # from the generation overlap list and from the prompts' function words respectively
    assert {"being", "shall"} <= STOP_WORDS
    assert {"yes", "them", "his", "her", "one", "two", "three"} <= STOP_WORDS


def test_content_words_drop_stop_words_and_short_words() -> None:
    assert content_words("What is THE annual-leave rule for them?") == {"annual", "leave", "rule"}
    assert content_words("An x-ray of one policy", min_length=3) == {"ray", "policy"}
    assert tokens("Two of his three days") == {"days"}


def test_contains_word_run() -> None:
    words = ["staff", "get", "27", "days"]
    assert contains_word_run(words, ["27", "days"]) and contains_word_run(words, words)
    assert not contains_word_run(words, ["get", "days"])  # not contiguous
    assert not contains_word_run(words, ["days", "27"])  # not in order
    assert not contains_word_run(words, []) and not contains_word_run([], ["27"])
    assert not contains_word_run(["27"], ["27", "days"])
