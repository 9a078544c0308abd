"""Hybrid fusion of lexical and dense candidates with one ``text_weight``.

Normaliser (per query, per modality): min-max over that modality's candidate list, so the best
candidate scores 1 and the worst 0; a list with a single or constant score maps to 1. A chunk absent
from a modality's list scores 0 there. Fused score = w * lexical + (1 - w) * dense, so w = 1 ranks by
BM25 only and w = 0 by cosine only. Ties break on the raw score of the dominant modality, then on
chunk id, which makes every ranking deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragtrail.records import Candidates, SearchHit


def min_max(hits: Sequence[SearchHit]) -> dict[str, float]:
    """Map each chunk id to its min-max normalised score within ``hits``."""
    if not hits:
        return {}
    scores = [h.score for h in hits]
    lo, hi = min(scores), max(scores)
    span = hi - lo
    return {h.chunk_id: (h.score - lo) / span if span > 0 else 1.0 for h in hits}


def fuse(candidates: Candidates, text_weight: float, k: int) -> list[SearchHit]:
    """Rank the union of both candidate lists by the weighted sum of normalised scores."""
    if not 0.0 <= text_weight <= 1.0:
        raise ValueError(f"text_weight must be in [0, 1], got {text_weight}")
    lex, den = min_max(candidates.lexical), min_max(candidates.dense)
    raw_lex = {h.chunk_id: h.score for h in candidates.lexical}
    raw_den = {h.chunk_id: h.score for h in candidates.dense}
    by_id: dict[str, SearchHit] = {}
    for hit in (*candidates.lexical, *candidates.dense):
        by_id.setdefault(hit.chunk_id, hit)
    lexical_first = text_weight >= 0.5

    def key(chunk_id: str) -> tuple[float, float, float, str]:
        fused = text_weight * lex.get(chunk_id, 0.0) + (1.0 - text_weight) * den.get(chunk_id, 0.0)
        first, second = (raw_lex, raw_den) if lexical_first else (raw_den, raw_lex)
        return (
            -fused,
            -first.get(chunk_id, float("-inf")),
            -second.get(chunk_id, float("-inf")),
            chunk_id,
        )

    ranked = sorted(by_id, key=key)[:k]
    return [
        SearchHit(
            chunk_id=cid,
            doc_id=by_id[cid].doc_id,
            score=-key(cid)[0],
            text=by_id[cid].text,
        )
        for cid in ranked
    ]


class FusionTable:
    """One query's candidates laid out once, so ranking them at many weights is one numpy sort
    each (the weight scan): the same order as :func:`fuse`, ties included.

    The normalised and raw scores do not depend on the weight; only the weighted sum does, and
    it is computed in float64 exactly as :func:`fuse` computes it.
    """

    def __init__(self, candidates: Candidates) -> None:
        lex, den = min_max(candidates.lexical), min_max(candidates.dense)
        raw_lex = {h.chunk_id: h.score for h in candidates.lexical}
        raw_den = {h.chunk_id: h.score for h in candidates.dense}
        by_id: dict[str, SearchHit] = {}
        for hit in (*candidates.lexical, *candidates.dense):
            by_id.setdefault(hit.chunk_id, hit)
        self.chunk_ids = np.array(list(by_id), dtype=object)
        self.doc_ids = np.array([by_id[c].doc_id for c in by_id], dtype=object)
        ids = list(by_id)
        self._lex = np.array([lex.get(c, 0.0) for c in ids], dtype=np.float64)
        self._den = np.array([den.get(c, 0.0) for c in ids], dtype=np.float64)
        self._raw_lex = np.array([raw_lex.get(c, -np.inf) for c in ids], dtype=np.float64)
        self._raw_den = np.array([raw_den.get(c, -np.inf) for c in ids], dtype=np.float64)
        self._id_rank = np.argsort(np.argsort(np.array(ids, dtype=str), kind="stable"))

    def order(self, text_weight: float) -> np.ndarray:
        """Candidate positions, best first, at ``text_weight``."""
        if not 0.0 <= text_weight <= 1.0:
            raise ValueError(f"text_weight must be in [0, 1], got {text_weight}")
        fused = text_weight * self._lex + (1.0 - text_weight) * self._den
        first, second = (
            (self._raw_lex, self._raw_den) if text_weight >= 0.5 else (self._raw_den, self._raw_lex)
        )
        # lexsort sorts by the last key first: fused desc, then raw scores desc, then chunk id.
        return np.lexsort((self._id_rank, -second, -first, -fused))

    def ranking(self, text_weight: float, level: str, depth: int) -> list[str]:
        """Top ``depth`` chunk ids, or document ids ranked by their best chunk."""
        order = self.order(text_weight)
        if level == "chunk":
            return [str(c) for c in self.chunk_ids[order[:depth]]]
        return list(dict.fromkeys(self.doc_ids[order].tolist()))[:depth]
