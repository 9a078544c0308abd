"""Near-duplicate removal among one query's sampled evidence (METHODS §10, SEER).

Of the M samples an extractor writes for one (question, passages), many are near copies; keeping
them all would over-weight the most frequent phrasing in the preference pairs. Two samples are
near duplicates when the Jaccard similarity of their word n-gram sets reaches a threshold.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"\w+")

__all__ = ["dedupe", "ngram_similarity", "word_ngrams"]


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """The word n-grams of lowercased ``text``; a text of fewer than n words gives its one
    shorter tuple (so short texts still compare), a text without words the empty set."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    words = _words(text)
    if not words:
        return set()
    if len(words) < n:
        return {tuple(words)}
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def ngram_similarity(a: str, b: str, n: int = 3) -> float:
    """Jaccard similarity of the n-gram sets; 1.0 for two texts without words, 0.0 for one."""
    grams_a, grams_b = word_ngrams(a, n), word_ngrams(b, n)
    if not grams_a and not grams_b:
        return 1.0
    if not grams_a or not grams_b:
        return 0.0
    return len(grams_a & grams_b) / len(grams_a | grams_b)


def dedupe(texts: Sequence[str], *, threshold: float = 0.8, n: int = 3) -> list[int]:
    """Indices of the texts kept, in order: the first of near duplicates wins.

    A text whose similarity to any kept text is ``>= threshold`` is dropped. Blank texts (no word
    at all: empty, whitespace or punctuation only) are dropped too: they are no evidence, and a
    training pair against one teaches nothing about content.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    kept: list[int] = []
    for i, text in enumerate(texts):
        if not _words(text):
            continue
        if all(ngram_similarity(text, texts[j], n) < threshold for j in kept):
            kept.append(i)
    return kept
