"""The attributed-answer scenarios' corpus, built from a Runtime (index, embedder, metadata DB).

The scenarios themselves live in :mod:`ragtrail.evaluate.attribution.scenarios` and never see the Runtime;
this module only wires the corpus's hybrid index and stored chunks into a
:class:`~ragtrail.evaluate.attribution.passage_corpus.PassageCorpus`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragtrail.evaluate.attribution.passage_corpus import CorpusPassage, IndexedCorpus
from ragtrail.runtime import Runtime

DEFAULT_CANDIDATES = 100


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

    return IndexedCorpus(rt.index(corpus), rt.embedder.encode, chunks_of, candidates_per_modality)
