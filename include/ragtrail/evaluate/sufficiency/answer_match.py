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

Other languages (the question's, detected by the caller): elided words go with their apostrophe
(``l’architecture`` -> ``architecture``, :func:`ragtrail.text.strip_elisions`), any other
apostrophe breaks words, and the stop words removed are the ``stop-words`` package's list minus
the language's meaning words in :data:`MEANING_WORDS_BY_LANGUAGE`. A language without such a
list keeps all its words: a stricter match, never a wrong one (the correctness judge decides the
rest). Undetermined text is treated as English.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from ragtrail.languages import UNDETERMINED
from ragtrail.text import ENGLISH, contains_word_run, stop_words, strip_elisions, word_tokens

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

MEANING_WORDS_BY_LANGUAGE: dict[str, frozenset[str]] = {
    "fr": frozenset(
        [
            "ne",
            "pas",
            "non",
            "ni",
            "aucun",
            "aucune",
            "jamais",
            "sans",
            "rien",
            "personne",
            "nul",
            "nulle",
            "un",
            "une",
            "deux",
            "trois",
            "quatre",
            "cinq",
            "six",
            "sept",
            "huit",
            "neuf",
            "dix",
            "premier",
            "première",
            "premiers",
            "dernier",
            "dernière",
            "avant",
            "après",
            "plus",
            "moins",
            "tout",
            "tous",
            "toute",
            "toutes",
            "chaque",
            "seul",
            "seule",
            "seulement",
            "toujours",
            "souvent",
            "peu",
            "beaucoup",
            "trop",
            "dessus",
            "dessous",
            "haut",
            "bas",
        ]
    ),
    "de": frozenset(
        [
            "nicht",
            "kein",
            "keine",
            "keinen",
            "keinem",
            "keiner",
            "nie",
            "niemals",
            "ohne",
            "nichts",
            "niemand",
            "eins",
            "ein",
            "eine",
            "zwei",
            "drei",
            "vier",
            "fünf",
            "sechs",
            "sieben",
            "acht",
            "neun",
            "zehn",
            "erste",
            "erster",
            "erstes",
            "letzte",
            "letzter",
            "vor",
            "nach",
            "mehr",
            "weniger",
            "alle",
            "jeder",
            "jede",
            "jedes",
            "nur",
            "immer",
            "oft",
            "viel",
            "viele",
            "wenig",
            "oben",
            "unten",
            "über",
            "unter",
        ]
    ),
    "es": frozenset(
        [
            "no",
            "ni",
            "nunca",
            "jamás",
            "sin",
            "nada",
            "nadie",
            "ninguno",
            "ninguna",
            "uno",
            "una",
            "dos",
            "tres",
            "cuatro",
            "cinco",
            "seis",
            "siete",
            "ocho",
            "nueve",
            "diez",
            "primero",
            "primera",
            "último",
            "última",
            "antes",
            "después",
            "más",
            "menos",
            "todo",
            "todos",
            "toda",
            "todas",
            "cada",
            "solo",
            "sólo",
            "siempre",
            "mucho",
            "muchos",
            "poco",
            "pocos",
            "arriba",
            "abajo",
            "sobre",
            "bajo",
        ]
    ),
}
"""Per language, negations, numbers and words of quantity, order and position that its stop
list holds but that change what a short answer says; kept as content."""


@functools.cache
def answer_stop_words() -> frozenset[str]:
    """sklearn's ``ENGLISH_STOP_WORDS`` minus :data:`MEANING_WORDS` (loaded on first use:
    importing scikit-learn takes a second)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS) - MEANING_WORDS


@functools.cache
def _stop_words_for(language: str) -> frozenset[str]:
    meaning = MEANING_WORDS_BY_LANGUAGE.get(language)
    return stop_words(language) - meaning if meaning is not None else frozenset()


def answer_tokens(text: str, language: str = ENGLISH) -> list[str]:
    """The words of ``text`` left after normalisation in ``language``, in order."""
    if language in (ENGLISH, UNDETERMINED):
        bare = text.replace("'", "").replace("\u2019", "").replace("\u2018", "")
        stop = answer_stop_words()
        return [w for w in word_tokens(bare) if w not in stop]
    stop = _stop_words_for(language)
    return [w for w in word_tokens(strip_elisions(text, language)) if w not in stop]


def normalise_answer(text: str, language: str = ENGLISH) -> str:
    """``text`` lower-cased, without punctuation, articles or stop words, single-spaced."""
    return " ".join(answer_tokens(text, language))


def matches_gold(answer: str, golds: Iterable[str], language: str = ENGLISH) -> bool:
    """True when some gold answer's normalised words occur in the normalised answer as a
    contiguous run of whole words (equality included); an empty normalised gold never matches."""
    words = answer_tokens(answer, language)
    return any(contains_word_run(words, answer_tokens(gold, language)) for gold in golds)


__all__ = [
    "MEANING_WORDS",
    "MEANING_WORDS_BY_LANGUAGE",
    "answer_stop_words",
    "answer_tokens",
    "matches_gold",
    "normalise_answer",
]
