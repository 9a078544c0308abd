"""Text normalisation shared by every stage that compares words: one stop-word list, one word
tokeniser, one comparison key, one list of phrases by which a question points at its source.

Test-set dedup, the GX question-uniqueness check, statement de-duplication, the overlap scores of
generation and the word bans of prompts all go through here, so two questions that one stage
calls equal are equal for every stage. Likewise the generation check that rejects "according to
the passage" questions and the GX suite that verifies accepted items use one pattern list.
"""

from __future__ import annotations

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


def content_words(text: str, *, min_length: int = 2) -> frozenset[str]:
    """The distinct folded words of ``text`` that are not stop words and have at least
    ``min_length`` characters (the vocabulary that overlap scores compare)."""
    return frozenset(w for w in word_tokens(text) if len(w) >= min_length and w not in STOP_WORDS)


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
