"""Does a short answer contain a gold answer? Normalised token matching (METHODS §9).

Both sides are normalised the same way (:func:`normalise_answer`): folded to lower case,
apostrophes dropped ("don't" -> "dont"), every other punctuation mark a word break, and stop
words removed. An answer matches a gold answer when the gold's remaining words appear in the
answer's as one contiguous run of whole words ("27 days" matches "Staff get 27 days of leave",
not "127 days"); a gold answer with no word left (all stop words) matches nothing, so the
correctness judge decides those.

The stop words are scikit-learn's ``ENGLISH_STOP_WORDS`` (318 words) minus
:data:`MEANING_WORDS`: negations, numbers, and words of quantity, order and position, which
sklearn lists but which change what a short answer says ("not paid" vs "paid", "two approvals"
vs "three approvals", "before the meeting" vs "after the meeting"). Removing them would let a
wrong answer match.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from ragtrail.text import contains_word_run, word_tokens

_NEGATIONS = "no not nor never none nothing nobody noone neither cannot cant couldnt hasnt without"
_NUMBERS = (
    "one two three four five six eight nine ten eleven twelve fifteen twenty forty fifty sixty "
    "hundred first third"
)
_QUANTITY_ORDER_POSITION = (
    "all every each both few many more most less least several only once always often "
    "sometimes last next former latter before after above below over under up down back front "
    "top bottom empty full thick thin"
)
MEANING_WORDS: frozenset[str] = frozenset(
    " ".join((_NEGATIONS, _NUMBERS, _QUANTITY_ORDER_POSITION)).split()
)
"""Words of sklearn's stop list that are kept as content (every one of them is in that list)."""


@functools.cache
def answer_stop_words() -> frozenset[str]:
    """sklearn's ``ENGLISH_STOP_WORDS`` minus :data:`MEANING_WORDS` (loaded on first use:
    importing scikit-learn takes a second)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS) - MEANING_WORDS


def answer_tokens(text: str) -> list[str]:
    """The words of ``text`` left after normalisation, in order."""
    bare = text.replace("'", "").replace("\u2019", "").replace("\u2018", "")
    stop = answer_stop_words()
    return [w for w in word_tokens(bare) if w not in stop]


def normalise_answer(text: str) -> str:
    """``text`` lower-cased, without punctuation, articles or stop words, single-spaced."""
    return " ".join(answer_tokens(text))


def matches_gold(answer: str, golds: Iterable[str]) -> bool:
    """True when some gold answer's normalised words occur in the normalised answer as a
    contiguous run of whole words (equality included); an empty normalised gold never matches."""
    words = answer_tokens(answer)
    return any(contains_word_run(words, answer_tokens(gold)) for gold in golds)


__all__ = [
    "MEANING_WORDS",
    "answer_stop_words",
    "answer_tokens",
    "matches_gold",
    "normalise_answer",
]
