"""Text normalisation shared by every stage that compares words: one stop-word list, one word
tokeniser, one comparison key, one list of phrases by which a question points at its source.

Test-set dedup, the GX question-uniqueness check, statement de-duplication, the overlap scores of
generation and the word bans of prompts all go through here, so two questions that one stage
calls equal are equal for every stage. Likewise the generation check that rejects "according to
the passage" questions and the GX suite that verifies accepted items use one pattern list.

Languages. English keeps its own short list (:data:`STOP_WORDS`); every other language takes the
list of the ``stop-words`` package (33 languages, shipped in the wheel) where it has one, and
none otherwise. Languages that elide articles and pronouns before a vowel (French, Italian,
Catalan) drop the elided word with its apostrophe (``l’architecture`` -> ``architecture``), as
Elasticsearch's elision filter does.
"""

from __future__ import annotations

import functools
import re
import unicodedata

_STOP_WORD_TEXT = """
a an the and or but if of to in on at by for with from as is are was were be been being it its
this that these those what which who whom whose when where why how do does did can could should
would will shall may might must not no yes there than then so such any all each per into about
over under i you we they he she his her our your their my me us them one two three
"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_WORD_TEXT.split())
"""English function words: never content (overlap scores) and never a subject (word bans)."""

_WORD = re.compile(r"[^\W_]+")
"""A word: a maximal run of letters and digits (any script); everything else separates."""


ENGLISH = "en"
_UNDETERMINED = "und"
"""ragtrail.languages.UNDETERMINED (a sibling module this one may not import)."""
_APOSTROPHES = "'\u2019\u02bc"
_ELIDED: dict[str, tuple[str, ...]] = {
    "fr": ("l", "d", "j", "m", "n", "s", "t", "c", "qu", "jusqu", "lorsqu", "puisqu", "quoiqu"),
    "it": ("l", "dell", "dall", "nell", "sull", "all", "un", "quest", "quell", "c", "d"),
    "ca": ("l", "d", "s", "m", "n", "t"),
}
"""Per language, the words written with an apostrophe before a vowel (elision)."""
_ELISION = {
    code: re.compile(rf"\b(?:{'|'.join(words)})[{_APOSTROPHES}](?=\w)", re.IGNORECASE)
    for code, words in _ELIDED.items()
}


def strip_elisions(text: str, language: str) -> str:
    """``text`` without the language's elided words (``l’`` , ``qu'``); unchanged for others."""
    pattern = _ELISION.get(language)
    return pattern.sub("", text) if pattern else text


@functools.cache
def stop_words(language: str = ENGLISH) -> frozenset[str]:
    """The stop words of ``language`` (ISO 639-1), folded: :data:`STOP_WORDS` for English and
    for undetermined text (``und``), the ``stop-words`` package's list for the 32 other languages
    it has, empty for the rest."""
    if language in (ENGLISH, _UNDETERMINED):
        return STOP_WORDS
    from stop_words import LANGUAGE_MAPPING, get_stop_words

    if language not in LANGUAGE_MAPPING:
        return frozenset()
    return frozenset(fold(w) for w in get_stop_words(language))


def fold(text: str) -> str:
    """Unicode-compatibility form (NFKC: full-width letters, ligatures) in case-folded form."""
    return unicodedata.normalize("NFKC", text).casefold()


def word_tokens(text: str) -> list[str]:
    """The words of ``text`` in order, folded (punctuation and underscores separate words)."""
    return _WORD.findall(fold(text))


def text_key(text: str) -> str:
    """Comparison key of a question or statement: its folded words joined by single spaces, so
    case, punctuation and spacing do not count (``"What's the PTO-policy?!"`` ->
    ``"what s the pto policy"``)."""
    return " ".join(word_tokens(text))


def contains_word_run(words: list[str], run: list[str]) -> bool:
    """True when ``run`` occurs in ``words`` as a contiguous sequence of whole words (an empty
    ``run`` never does): ``["27", "days"]`` is in ``["staff", "get", "27", "days"]``."""
    width = len(run)
    return width > 0 and any(words[i : i + width] == run for i in range(len(words) - width + 1))


def content_words(text: str, *, min_length: int = 2, language: str = ENGLISH) -> frozenset[str]:
    """The distinct folded words of ``text`` that are not stop words of ``language`` (elisions
    dropped first) and have at least ``min_length`` characters (what overlap scores compare)."""
    stop = stop_words(language)
    words = word_tokens(strip_elisions(text, language))
    return frozenset(w for w in words if len(w) >= min_length and w not in stop)


_SOURCE_NOUNS = r"(?:passage|context|excerpt|paragraph|document|text|article|snippet)s?"
SOURCE_REFERENCE_PATTERNS: tuple[str, ...] = (
    # "the passage", "this excerpt", "that paragraph"; not "in the context of ..."
    r"\b(?:the|this|that|these)\s+(?:passage|excerpt|paragraph|snippet|context)s?\b(?!\s+of\b)",
    # "the document" / "the text" where they end a clause or point at the source ("in the
    # document?", "the text says"), while "the document retention policy" is a topic
    r"\b(?:the|this|that|these)\s+(?:document|text|article)s?\b"
    r"(?=\s*(?:[?.!,;:)]|$)|\s+(?:above|below|says?|states?|mentions?|describes?|provided|given)\b)",
    # "the given passage", "the above text", "the following context"
    r"\b(?:given|provided|above|following|preceding|aforementioned)\s+" + _SOURCE_NOUNS + r"\b",
    # "the text above", "the passage below"
    r"\b" + _SOURCE_NOUNS + r"\s+(?:above|below)\b",
    # "as mentioned above", "described above"
    r"\b(?:mentioned|described|stated|listed|discussed)\s+above\b",
    # "according to the ...", "according to this ..."
    r"\baccording\s+to\s+(?:the|this|that|these)\b",
)
"""Case-insensitive patterns of a question that refers to its source instead of its topic: a
search user has no "passage", so such a question cannot stand alone. Word-bounded; no capturing
groups (pandas ``str.contains`` reads the joined pattern too)."""

_SOURCE_REFERENCE_RE = re.compile("|".join(SOURCE_REFERENCE_PATTERNS), re.IGNORECASE)


def source_reference(text: str) -> str | None:
    """The first phrase of ``text`` matching :data:`SOURCE_REFERENCE_PATTERNS` (lower-cased,
    single-spaced), or None."""
    match = _SOURCE_REFERENCE_RE.search(text)
    return " ".join(match.group(0).lower().split()) if match else None
