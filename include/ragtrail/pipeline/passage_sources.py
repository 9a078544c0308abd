"""The corpus as the answer-side evaluations see it, built from a :class:`Runtime`.

- :func:`corpus_from_runtime`: the corpus relevance mixtures are drawn from (METHODS §6): the
  corpus's chunks from the metadata store, the dense and hybrid searches of its index;
- :func:`scenario_corpus`: the attributed-answer scenarios' passages (METHODS §8): the corpus's
  hybrid index and stored chunks as a
  :class:`~ragtrail.evaluate.attribution.passage_corpus.PassageCorpus`.

The evaluations themselves never see the Runtime; this module only wires it into them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragtrail.evaluate.attribution.passage_corpus import CorpusPassage, IndexedCorpus
from ragtrail.evaluate.citations.mixtures import MixtureCorpus
from ragtrail.evaluate.retrieval.evaluator import collect_candidates
from ragtrail.index.fusion import fuse
from ragtrail.records import QAItem, SearchHit
from ragtrail.runtime import Runtime

DEFAULT_CANDIDATES = 100
"""Candidates per modality the scenarios' hybrid search fuses."""
DEFAULT_TEXT_WEIGHT = 0.5
"""Weight of BM25 in the hybrid ranking that picks relevant chunks of document-level items."""


def corpus_from_runtime(
    rt: Runtime,
    corpus: str,
    *,
    text_weight: float = DEFAULT_TEXT_WEIGHT,
    candidates_per_modality: int = 100,
) -> MixtureCorpus:
    """A :class:`MixtureCorpus` over ``corpus``'s stored chunks and index.

    Questions are embedded with the runtime's embedder in one batch per search (the same
    encoder the retrieval evaluation uses); the hybrid ranking fuses each question's lexical and
    dense candidates with ``text_weight``.
    """
    index = rt.index(corpus)
    languages = {d: r.language for d, r in rt.store.get_documents(corpus).items()}
    chunks = [record.to_chunk(languages[record.doc_id]) for record in rt.store.get_chunks(corpus)]

    def dense_search(questions: Sequence[str], k: int) -> list[list[SearchHit]]:
        if not questions:
            return []
        vectors = rt.cached_embedder.encode(list(questions))
        return [list(index.search_dense(vectors[i], k)) for i in range(len(questions))]

    def hybrid_search(questions: Sequence[str], k: int) -> list[list[SearchHit]]:
        if not questions:
            return []
        items = [QAItem(qid=str(i), question=q, label="") for i, q in enumerate(questions)]
        depth = max(k, candidates_per_modality)
        candidates = collect_candidates(index, rt.cached_embedder.encode, items, depth)
        return [fuse(c, text_weight, k) for c in candidates]

    return MixtureCorpus(chunks=chunks, dense_search=dense_search, hybrid_search=hybrid_search)


def scenario_corpus(
    rt: Runtime, corpus: str, *, candidates_per_modality: int = DEFAULT_CANDIDATES
) -> IndexedCorpus:
    """Hybrid search over ``corpus``'s index (the retrieval evaluation's embedder and fusion),
    with ground chunks read from the metadata store."""
    store = rt.store

    def chunks_of(doc_ids: Sequence[str]) -> list[CorpusPassage]:
        return [
            CorpusPassage(c.chunk_id, c.doc_id, c.text)
            for doc_id in dict.fromkeys(doc_ids)
            for c in store.get_chunks(corpus, doc_id)
        ]

    return IndexedCorpus(
        rt.index(corpus), rt.cached_embedder.encode, chunks_of, candidates_per_modality
    )
