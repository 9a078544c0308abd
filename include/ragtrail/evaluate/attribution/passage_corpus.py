"""What the attributed-answer scenarios need from a corpus: hybrid search and chunk lookup.

:class:`PassageCorpus` is the small protocol the scenarios run on, so tests can use a tiny
in-memory corpus; :class:`IndexedCorpus` implements it over a :class:`HybridIndex` with the one
hybrid fusion of :mod:`ragtrail.index.fusion` at a given text weight (the same ranking the
retrieval evaluation scores).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ragtrail.index.base import HybridIndex, fetch_candidates
from ragtrail.index.fusion import fuse
from ragtrail.records import SearchHit


@dataclass(frozen=True)
class CorpusPassage:
    """One chunk as the scenarios see it; ``score`` is its retrieval score (0 when looked up)."""

    chunk_id: str
    doc_id: str
    text: str
    score: float = 0.0


class PassageCorpus(Protocol):
    """Hybrid search over a corpus's chunks, at a given text weight."""

    def search(
        self, queries: Sequence[str], k: int, text_weight: float
    ) -> list[list[CorpusPassage]]:
        """The top-``k`` chunks for each query, best first (one list per query, in order)."""
        ...

    def rank_within(
        self, query: str, doc_ids: Sequence[str], k: int, text_weight: float
    ) -> list[CorpusPassage]:
        """The top-``k`` chunks of the given documents only, best first."""
        ...

    def document_chunks(self, doc_ids: Sequence[str]) -> list[CorpusPassage]:
        """Every chunk of the given documents, document by document, in reading order."""
        ...


@dataclass
class IndexedCorpus:
    """:class:`PassageCorpus` over a hybrid index.

    Args:
        index: the corpus's index.
        encode: query texts -> embedding matrix (the embedder used to index it).
        chunks_of: document ids -> their chunks (from the metadata store).
        candidates_per_modality: lexical and dense candidates fetched per query before fusion.
    """

    index: HybridIndex
    encode: Callable[[Sequence[str]], np.ndarray]
    chunks_of: Callable[[Sequence[str]], list[CorpusPassage]]
    candidates_per_modality: int = 100

    def search(
        self, queries: Sequence[str], k: int, text_weight: float
    ) -> list[list[CorpusPassage]]:
        if not queries:
            return []
        depth = max(k, self.candidates_per_modality)
        vectors = self.encode(list(queries))
        out = []
        for i, query in enumerate(queries):
            candidates = fetch_candidates(self.index, query, vectors[i], depth)
            out.append([_passage(hit) for hit in fuse(candidates, text_weight, k)])
        return out

    def rank_within(
        self, query: str, doc_ids: Sequence[str], k: int, text_weight: float
    ) -> list[CorpusPassage]:
        """Searches the whole index (every chunk a candidate), so each chunk of the documents
        gets the score it would have in an unrestricted search."""
        wanted = set(doc_ids)
        depth = max(1, self.index.count_chunks())
        candidates = fetch_candidates(self.index, query, self.encode([query])[0], depth)
        ranked = fuse(candidates, text_weight, len(candidates.lexical) + len(candidates.dense))
        return [_passage(hit) for hit in ranked if hit.doc_id in wanted][:k]

    def document_chunks(self, doc_ids: Sequence[str]) -> list[CorpusPassage]:
        return self.chunks_of(doc_ids)


def _passage(hit: SearchHit) -> CorpusPassage:
    return CorpusPassage(hit.chunk_id, hit.doc_id, hit.text, hit.score)
