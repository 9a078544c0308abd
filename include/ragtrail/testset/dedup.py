"""Near-duplicate question removal: word n-gram Jaccard on normalised text, plus embedding cosine.

Greedy in input order, so the first occurrence of a question is the one kept: each question is
compared with the earlier questions that were kept, and with the questions of the previous test-set
version. Two questions are duplicates when their normalised texts are equal, their word n-gram
Jaccard similarity reaches ``jaccard_threshold``, or (with embeddings) their cosine similarity
reaches ``cos_threshold``.

Short questions (fewer than ``ngram_n + 2`` words, i.e. under three n-grams) are compared on word
unigrams instead, as is any pair with a short member — a 3-word question has a single trigram, so a
one-word change would otherwise make it look unrelated.

Jaccard uses inverted indices (only questions sharing a gram are touched) and cosine one numpy
matrix product per block of questions: fine for a few thousand questions.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragtrail.text import text_key

COSINE_BLOCK = 256
"""Queries whose cosines are computed in one matrix product."""


@dataclass(frozen=True)
class Duplicate:
    """Question ``i`` duplicates question ``of_index`` of the current list, or — when
    ``of_previous`` — of the previous version's list. ``cosine`` is None without embeddings."""

    of_index: int
    of_previous: bool
    cosine: float | None
    jaccard: float


@dataclass(frozen=True)
class _Features:
    key: str  # normalised text
    unigrams: frozenset[str]
    ngrams: frozenset[tuple[str, ...]]
    short: bool


def normalize_question(text: str) -> str:
    """NFKC, casefold, punctuation (and underscores) to spaces, whitespace collapsed: the
    shared :func:`ragtrail.text.text_key` (the GX uniqueness check keys questions the same way)."""
    return text_key(text)


def word_ngrams(normalized: str, n: int) -> frozenset[tuple[str, ...]]:
    """The set of word n-grams of already-normalised text (empty when it has fewer than n words)."""
    words = normalized.split()
    return frozenset(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _features(question: str, n: int) -> _Features:
    key = normalize_question(question)
    words = key.split()
    short = len(words) < n + 2
    return _Features(key, frozenset(words), frozenset() if short else word_ngrams(key, n), short)


def _unit_rows(vectors: np.ndarray | None, n_rows: int, name: str) -> np.ndarray | None:
    """Rows scaled to unit length (zero rows stay zero), after checking the shape."""
    if vectors is None:
        return None
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n_rows:
        raise ValueError(f"{name} must have shape ({n_rows}, dim), got {arr.shape}")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return np.divide(arr, norms, out=np.zeros_like(arr), where=norms > 0)


def _overlap(postings: dict[object, array[int]], grams: frozenset, size: int) -> np.ndarray:
    """Per pool position, how many of ``grams`` it shares (postings hold unique positions)."""
    counts = np.zeros(size, dtype=np.float64)
    for gram in grams:
        positions = postings.get(gram)
        if positions:
            counts[np.frombuffer(positions, dtype=np.int64)] += 1.0
    return counts


def _postings() -> defaultdict[object, array[int]]:
    """gram -> positions, as int64 arrays numpy reads without copying."""
    return defaultdict(lambda: array("q"))


def _jaccard(inter: np.ndarray, n_query: int, sizes: np.ndarray) -> np.ndarray:
    union = n_query + sizes - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


class _Pool:
    """Questions later ones are compared with; positions index the pool's source list."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.members = np.zeros(size, dtype=bool)
        self.short = np.zeros(size, dtype=bool)
        self.n_uni = np.zeros(size, dtype=np.float64)
        self.n_ngr = np.zeros(size, dtype=np.float64)
        self.by_key: dict[str, int] = {}
        self.uni_all = _postings()  # for short queries
        self.uni_short = _postings()  # short members only
        self.ngr = _postings()  # non-short members only

    def add(self, pos: int, f: _Features) -> None:
        self.members[pos] = True
        self.short[pos] = f.short
        self.n_uni[pos] = len(f.unigrams)
        self.n_ngr[pos] = len(f.ngrams)
        self.by_key.setdefault(f.key, pos)
        for word in f.unigrams:
            self.uni_all[word].append(pos)
            if f.short:
                self.uni_short[word].append(pos)
        for gram in f.ngrams:
            self.ngr[gram].append(pos)

    def jaccard(self, f: _Features) -> np.ndarray:
        """Jaccard similarity of ``f`` with every position (unigrams for pairs with a short one)."""
        uni_postings = self.uni_all if f.short else self.uni_short
        uni = _jaccard(_overlap(uni_postings, f.unigrams, self.size), len(f.unigrams), self.n_uni)
        if f.short:
            return uni
        ngr = _jaccard(_overlap(self.ngr, f.ngrams, self.size), len(f.ngrams), self.n_ngr)
        return np.where(self.short, uni, ngr)

    def match(
        self, f: _Features, cos: np.ndarray | None, cos_threshold: float, jac_threshold: float
    ) -> tuple[int, float | None, float] | None:
        """The earliest member that ``f`` duplicates, as (position, cosine, jaccard), or None.

        ``cos`` holds the query's cosine with the first ``len(cos)`` positions (None: no test).
        """
        if not self.members.any():
            return None
        jac = self.jaccard(f)
        exact = self.by_key.get(f.key)
        if exact is not None:
            jac[exact] = 1.0
        hit = jac >= jac_threshold
        if cos is not None:
            hit[: cos.size] |= cos >= cos_threshold
        positions = np.flatnonzero(hit & self.members)
        if positions.size == 0:
            return None
        pos = int(positions[0])
        cosine = float(cos[pos]) if cos is not None and pos < cos.size else None
        return pos, cosine, float(jac[pos])


def find_duplicates(
    questions: Sequence[str],
    *,
    embeddings: np.ndarray | None = None,
    previous: Sequence[str] = (),
    previous_embeddings: np.ndarray | None = None,
    cos_threshold: float = 0.92,
    ngram_n: int = 3,
    jaccard_threshold: float = 0.7,
) -> list[Duplicate | None]:
    """For each question, the :class:`Duplicate` it is of, or None when it is kept.

    ``embeddings`` (n, dim) and ``previous_embeddings`` (len(previous), dim) enable the cosine
    test; without them only text is compared (cosine against the previous version needs both).
    A question duplicating a previous-version question is reported as such first; otherwise the
    earliest kept question it duplicates is named. Duplicates are dropped from the pool, so a
    chain a~b~c with a !~ c keeps a and c.
    """
    if ngram_n < 1:
        raise ValueError(f"ngram_n must be >= 1, got {ngram_n}")
    current_vecs = _unit_rows(embeddings, len(questions), "embeddings")
    previous_vecs = _unit_rows(previous_embeddings, len(previous), "previous_embeddings")
    if current_vecs is None:
        previous_vecs = None
    elif previous_vecs is not None and previous_vecs.shape[1] != current_vecs.shape[1]:
        raise ValueError("embeddings and previous_embeddings have different dimensions")

    prior = _Pool(len(previous))
    for pos, question in enumerate(previous):
        prior.add(pos, _features(question, ngram_n))
    kept = _Pool(len(questions))

    out: list[Duplicate | None] = []
    for start in range(0, len(questions), COSINE_BLOCK):
        stop = min(start + COSINE_BLOCK, len(questions))
        # one matrix product per block of queries: cosine with every earlier question / previous
        cur_cos = None if current_vecs is None else current_vecs[start:stop] @ current_vecs[:stop].T
        prev_cos = None if previous_vecs is None else current_vecs[start:stop] @ previous_vecs.T
        for i in range(start, stop):
            f = _features(questions[i], ngram_n)
            row = i - start
            found = prior.match(
                f, None if prev_cos is None else prev_cos[row], cos_threshold, jaccard_threshold
            )
            of_previous = found is not None
            if found is None:
                cos = None if cur_cos is None else cur_cos[row, :i]
                found = kept.match(f, cos, cos_threshold, jaccard_threshold)
            if found is None:
                kept.add(i, f)
                out.append(None)
            else:
                out.append(Duplicate(found[0], of_previous, found[1], found[2]))
    return out


def kept_indices(duplicates: Sequence[Duplicate | None]) -> list[int]:
    """Indices of the questions :func:`find_duplicates` kept."""
    return [i for i, d in enumerate(duplicates) if d is None]
