"""Which lexical analysis each document language gets, per index engine.

A chunk carries its document's ISO 639-1 code (:mod:`ragtrail.languages`). Each engine indexes
it into the text field of its *analysis key*: the language itself where the engine has a stemmer
(and, where it has one, a stop-word list) for it; ``cjk`` for Chinese, Japanese and Korean, whose
words are not separated by spaces and are indexed as character uni- and bigrams; ``und`` for every
other language and for undetermined text (lower-cased words, no stemming, no stop words).

A query is analysed once per analysis key the index holds, each with that key's analyzer, so a
French query meets French documents through the French stemmer and English ones through the
English stemmer; no language has to be guessed from a short question.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ragtrail.languages import UNDETERMINED

ANALYSIS_VERSION = 1
"""Bumped when a language's analysis changes: the next ingest then reads every document again
(see :func:`ragtrail.pipeline.ingest.plan.plan_ingest`)."""
NEUTRAL = UNDETERMINED
"""The key of the language-neutral analysis (lower-cased words)."""
CJK = "cjk"
CJK_LANGUAGES = frozenset({"zh", "ja", "ko"})


@dataclass(frozen=True)
class TantivyAnalysis:
    """tantivy's filters for one language: a snowball stemmer, and a built-in stop-word list
    when tantivy has one for it (``None`` otherwise)."""

    stemmer: str
    stopwords: str | None


TANTIVY_ANALYSES: dict[str, TantivyAnalysis] = {
    "ar": TantivyAnalysis("arabic", None),
    "da": TantivyAnalysis("danish", "danish"),
    "de": TantivyAnalysis("german", "german"),
    "el": TantivyAnalysis("greek", None),
    "en": TantivyAnalysis("english", None),
    "es": TantivyAnalysis("spanish", "spanish"),
    "fi": TantivyAnalysis("finnish", "finnish"),
    "fr": TantivyAnalysis("french", "french"),
    "hu": TantivyAnalysis("hungarian", "hungarian"),
    "it": TantivyAnalysis("italian", "italian"),
    "nb": TantivyAnalysis("norwegian", "norwegian"),
    "nl": TantivyAnalysis("dutch", "dutch"),
    "nn": TantivyAnalysis("norwegian", "norwegian"),
    "no": TantivyAnalysis("norwegian", "norwegian"),
    "pt": TantivyAnalysis("portuguese", "portuguese"),
    "ro": TantivyAnalysis("romanian", None),
    "ru": TantivyAnalysis("russian", "russian"),
    "sv": TantivyAnalysis("swedish", "swedish"),
    "ta": TantivyAnalysis("tamil", None),
    "tr": TantivyAnalysis("turkish", None),
}
"""English keeps no stop words, exactly as the index analysed it before languages existed (BM25's
idf already discounts them, and phrases like "to be or not to be" stay searchable)."""

ELASTICSEARCH_ANALYZERS: dict[str, str] = {
    "ar": "arabic",
    "bg": "bulgarian",
    "bn": "bengali",
    "ca": "catalan",
    "cs": "czech",
    "da": "danish",
    "de": "german",
    "el": "greek",
    "en": "english",
    "es": "spanish",
    "et": "estonian",
    "eu": "basque",
    "fa": "persian",
    "fi": "finnish",
    "fr": "french",
    "ga": "irish",
    "gl": "galician",
    "hi": "hindi",
    "hu": "hungarian",
    "hy": "armenian",
    "id": "indonesian",
    "it": "italian",
    "lt": "lithuanian",
    "lv": "latvian",
    "nb": "norwegian",
    "nl": "dutch",
    "nn": "norwegian",
    "no": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sv": "swedish",
    "th": "thai",
    "tr": "turkish",
    CJK: "cjk",
    NEUTRAL: "standard",
}
"""Elasticsearch's built-in language analyzers (stemmer and stop words each), by analysis key."""


def _key(language: str, supported: Mapping[str, object]) -> str:
    code = (language or NEUTRAL).strip().lower()
    if code in CJK_LANGUAGES:
        return CJK
    return code if code in supported else NEUTRAL


def tantivy_key(language: str) -> str:
    """The embedded index's analysis key for a document language."""
    return _key(language, TANTIVY_ANALYSES)


def elasticsearch_key(language: str) -> str:
    """The Elasticsearch backend's analysis key for a document language."""
    return _key(language, ELASTICSEARCH_ANALYZERS)


def text_field(key: str) -> str:
    """The name of the text field analysed with ``key`` (the same in both engines)."""
    return f"text_{key}"


TANTIVY_KEYS: tuple[str, ...] = (*sorted(TANTIVY_ANALYSES), CJK, NEUTRAL)
ELASTICSEARCH_KEYS: tuple[str, ...] = tuple(sorted(ELASTICSEARCH_ANALYZERS))

__all__ = [
    "ANALYSIS_VERSION",
    "CJK",
    "ELASTICSEARCH_ANALYZERS",
    "ELASTICSEARCH_KEYS",
    "NEUTRAL",
    "TANTIVY_ANALYSES",
    "TANTIVY_KEYS",
    "TantivyAnalysis",
    "elasticsearch_key",
    "tantivy_key",
    "text_field",
]
