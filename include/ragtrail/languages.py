"""The language of a document, detected offline at ingest or forced by configuration.

Detection uses py3langid (a maintained, faster fork of langid.py: a naive Bayes model over byte
n-grams for more than a hundred languages, :func:`known_languages`, that ships inside the wheel),
so it works without any download and is deterministic. A text shorter than :data:`MIN_CHARS` letters is too short to call and gets
:data:`UNDETERMINED`; a text longer than :data:`SAMPLE_CHARS` characters is judged on slices spread
over all of it (bounded time on a long manual, and no verdict from its first pages alone). A
document written in two languages gets the one most of its text is in. Codes are ISO 639-1 (``en``, ``fr``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

UNDETERMINED = "und"
"""ISO 639-2 "undetermined": too little text to call."""
AUTO = "auto"
LIBRARY = "py3langid"
MIN_CHARS = 20
SAMPLE_CHARS = 200_000
_LETTERS = re.compile(r"[^\W\d_]", re.UNICODE)
_CODE = re.compile(r"^[a-z]{2,3}$")

Method = Literal["detected", "configured", "too short"]


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


@lru_cache(maxsize=1)
def _identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


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


def detect_language(text: str, *, configured: str = AUTO) -> LanguageGuess:
    """The language of ``text``: ``configured`` when it names one, else the detector's call."""
    if configured != AUTO:
        return LanguageGuess(check_language_setting(configured), 1.0, "configured")
    sample = _sample(text)
    if len(_LETTERS.findall(sample)) < MIN_CHARS:
        return LanguageGuess(UNDETERMINED, 0.0, "too short")
    code, probability = _identifier().classify(sample)
    return LanguageGuess(str(code), round(float(probability), 4), "detected")


__all__ = [
    "AUTO",
    "LIBRARY",
    "UNDETERMINED",
    "LanguageGuess",
    "check_language_setting",
    "detect_language",
    "known_languages",
]
