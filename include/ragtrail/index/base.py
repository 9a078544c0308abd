"""The search-index protocol shared by the embedded and the Elasticsearch backends.

An index stores chunks with their embedding and answers two kinds of candidate queries, one per
modality. Hybrid ranking is done once, here, by :mod:`ragtrail.index.fusion`, so both backends have
exactly the same ``text_weight`` semantics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ragtrail.records import Candidates, Chunk, SearchHit


@runtime_checkable
class HybridIndex(Protocol):
    """A persistent BM25 + dense-vector index over the chunks of one corpus."""

    name: str

    def upsert_documents(
        self, doc_ids: Sequence[str], chunks: Sequence[Chunk], vectors: np.ndarray
    ) -> None:
        """Replace everything stored for ``doc_ids`` by ``chunks`` (row i of vectors = chunk i).

        Idempotent: calling twice with the same input leaves one copy of each chunk.
        """

    def delete_documents(self, doc_ids: Sequence[str]) -> None:
        """Remove every chunk of the given documents; unknown ids are ignored."""

    def commit(self) -> None:
        """Make all previous writes durable and visible to searches."""

    def document_ids(self) -> set[str]:
        """Ids of the documents currently searchable (used to reconcile after a crash)."""

    def count_chunks(self) -> int: ...

    def begin_snapshot(self, snapshot_id: str, *, resume: bool = False) -> str | None:
        """Direct writes to the snapshot's index (Elasticsearch: a new physical index seeded with
        the published one; embedded: updated in place). ``resume`` reopens it from another task."""

    def publish(self, keep: int | None = None) -> object:
        """Make the snapshot the one searches see (Elasticsearch: atomic alias swap)."""

    def docs_to_repair(self) -> frozenset[str]:
        """Documents left half-written by a crash (present in one modality only, or with different
        chunks per modality); the pipeline re-upserts them from the metadata DB."""

    def search_lexical(self, query: str, k: int) -> list[SearchHit]:
        """BM25 top-k, best first, raw engine scores."""

    def search_dense(self, query_vector: np.ndarray, k: int) -> list[SearchHit]:
        """Cosine-similarity top-k, best first."""

    def close(self) -> None: ...


def fetch_candidates(
    index: HybridIndex, query: str, query_vector: np.ndarray, k: int
) -> Candidates:
    """Fetch each modality's top-k once; fusing for any number of weights reuses them."""
    return Candidates(
        lexical=tuple(index.search_lexical(query, k)),
        dense=tuple(index.search_dense(query_vector, k)),
    )
