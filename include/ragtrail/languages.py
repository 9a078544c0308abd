"""The language of a document, detected offline at ingest or forced by configuration.

Detection uses py3langid (a maintained, faster fork of langid.py: a naive Bayes model over byte
n-grams for more than a hundred languages, :func:`known_languages`, that ships inside the wheel),
so it works without any download and is deterministic. A text shorter than :data:`MIN_CHARS`
letters is too short to call, and a call less sure than :data:`MIN_CONFIDENCE` is not taken: both
get :data:`UNDETERMINED`; a text longer than :data:`SAMPLE_CHARS` characters is judged on slices spread
over all of it (bounded time on a long manual, and no verdict from its first pages alone). A
document written in two languages gets the one most of its text is in. Codes are ISO 639-1 (``en``, ``fr``).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

UNDETERMINED = "und"
"""ISO 639-2 "undetermined": too little text to call."""
AUTO = "auto"
LIBRARY = "py3langid"
MIN_CHARS = 20
MIN_CONFIDENCE = 0.5
"""Below this probability the detector's call is not taken: the text is :data:`UNDETERMINED`
("uncertain"). English headings alone ("# Code Review Guidelines") come out as Afrikaans or
German at 0.07 to 0.17; real paragraphs score above 0.8."""
SAMPLE_CHARS = 200_000
_LETTERS = re.compile(r"[^\W\d_]", re.UNICODE)
_CODE = re.compile(r"^[a-z]{2,3}$")

Method = Literal["detected", "configured", "too short", "uncertain"]


@dataclass(frozen=True)
class LanguageGuess:
    """A document's language, how it was decided and how sure the detector was (1.0 when
    configured, 0.0 when undetermined)."""

    code: str
    confidence: float
    method: Method


def check_language_setting(value: str) -> str:
    """``auto`` or a lower-case ISO 639 code the detector knows; a ValueError otherwise."""
    text = value.strip().lower()
    if text == AUTO:
        return text
    if not _CODE.match(text) or text not in known_languages():
        raise ValueError(
            f"language {value!r} is not 'auto' or an ISO 639-1 code the detector knows "
            f"({', '.join(sorted(known_languages()))})"
        )
    return text


_DETECTOR: list[Any] = []
_DETECTOR_LOCK = threading.Lock()


def _identifier() -> Any:
    """The detector, loaded once per process (about 0.4 s of CPU). Threads that need it first
    at the same moment (a night's side-by-side steps each render a prompt) wait for one load
    instead of each loading their own copy on the same cores."""
    if not _DETECTOR:
        with _DETECTOR_LOCK:
            if not _DETECTOR:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                _DETECTOR.append(LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True))
    return _DETECTOR[0]


def load_detector() -> None:
    """Load the detector now, before work that would otherwise wait for it on first use."""
    _identifier()


@lru_cache(maxsize=1)
def known_languages() -> frozenset[str]:
    """The codes the detector can answer."""
    return frozenset(str(code) for code in _identifier().nb_classes)


def _sample(text: str, windows: int = 20) -> str:
    """``text`` itself up to :data:`SAMPLE_CHARS`; beyond, ``windows`` evenly spaced slices of
    it, so a long document's later chapters count as much as its opening pages."""
    if len(text) <= SAMPLE_CHARS:
        return text
    width = SAMPLE_CHARS // windows
    step = (len(text) - width) / (windows - 1)
    return "\n".join(text[round(i * step) : round(i * step) + width] for i in range(windows))


LANGUAGE_NAMES: dict[str, str] = {
    "ar": "Arabic", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French",
    "ga": "Irish", "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian",
    "hy": "Armenian", "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "lt": "Lithuanian", "lv": "Latvian", "nb": "Norwegian", "nl": "Dutch", "nn": "Norwegian",
    "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sv": "Swedish", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian",
    "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip
"""English names of common languages, as prompts name them to a model."""


def language_name(code: str) -> str:
    """The language's English name (``fr`` -> ``French``); the code itself when not listed."""
    return LANGUAGE_NAMES.get(code, code)


def _callable_sample(text: str) -> str | None:
    """What the detector reads of ``text`` (:func:`_sample`); None when it has fewer than
    :data:`MIN_CHARS` letters, too few to call."""
    sample = _sample(text)
    return sample if len(_LETTERS.findall(sample)) >= MIN_CHARS else None


@lru_cache(maxsize=4096)
def _classify(sample: str) -> tuple[str, float]:
    """The detector's language and probability (rounded) for ``sample``. Remembered: a night's
    prompts ask for the language of the same documents again and again (eight critiques of one
    question, three raters of one context), and each call costs milliseconds of the GIL."""
    code, probability = _identifier().classify(sample)
    return str(code), round(float(probability), 4)


def language_probability(text: str, code: str) -> float | None:
    """The detector's probability that ``text`` is in ``code``; None when ``text`` is too short
    to call (fewer than :data:`MIN_CHARS` letters)."""
    sample = _callable_sample(text)
    if sample is None:
        return None
    return round(float(dict(_identifier().rank(sample)).get(code, 0.0)), 4)


def detect_language(text: str, *, configured: str = AUTO) -> LanguageGuess:
    """The language of ``text``: ``configured`` when it names one, else the detector's call."""
    if configured != AUTO:
        return LanguageGuess(check_language_setting(configured), 1.0, "configured")
    sample = _callable_sample(text)
    if sample is None:
        return LanguageGuess(UNDETERMINED, 0.0, "too short")
    code, confidence = _classify(sample)
    if confidence < MIN_CONFIDENCE:
        return LanguageGuess(UNDETERMINED, confidence, "uncertain")
    return LanguageGuess(str(code), confidence, "detected")


__all__ = [
    "AUTO",
    "LIBRARY",
    "UNDETERMINED",
    "LanguageGuess",
    "check_language_setting",
    "detect_language",
    "known_languages",
    "language_name",
    "language_probability",
    "load_detector",
]
