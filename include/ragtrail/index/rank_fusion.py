"""Fusion of several ranked lists for one query (sub-query retrieval, METHODS §8).

Each input list maps an id to its score, best first. Three methods:

* ``combsum``: min-max normalise each list, then add the normalised scores; an id missing from a
  list adds 0 there.
* ``combmnz``: the CombSUM sum times the number of lists that contain the id.
* ``rrf``: reciprocal rank fusion, sum over lists of ``1 / (rrf_k + rank)`` with 1-based ranks
  taken from the list's order (scores are ignored); ``rrf_k`` defaults to 60.

The min-max normaliser follows ranx (``ranx.fuse(norm="min-max")``) exactly, so the two agree to
floating-point precision (``tests/contract/test_fusion_vs_ranx.py``): ``(s - min) / max(max - min,
1e-9)``. A list whose scores are all equal (a single hit included) therefore normalises to 0, not
1 as the hybrid normaliser in :mod:`ragtrail.index.fusion` does; for CombMNZ such an id still gains
nothing. Ties in the fused score break on the best 1-based rank the id reached in any input list,
then on the id, ascending, so every fused ranking is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragtrail.records import FUSION_METHODS, FusionMethod

RRF_K = 60
MIN_SPAN = 1e-9
"""The smallest min-max denominator (ranx's floor), so constant lists do not divide by zero."""


def min_max_ranx(scores: Mapping[str, float]) -> dict[str, float]:
    """Each id's min-max normalised score, with ranx's floor on the denominator."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    span = max(hi - lo, MIN_SPAN)
    return {doc: (score - lo) / span for doc, score in scores.items()}


def reciprocal_ranks(ranking: Mapping[str, float], rrf_k: int = RRF_K) -> dict[str, float]:
    """``1 / (rrf_k + rank)`` for each id, rank 1 being the list's first entry."""
    return {doc: 1.0 / (rrf_k + rank) for rank, doc in enumerate(ranking, start=1)}


def fuse_rankings(
    rankings: Sequence[Mapping[str, float]],
    method: FusionMethod = FusionMethod.RRF,
    *,
    rrf_k: int = RRF_K,
) -> list[tuple[str, float]]:
    """The fused ranking of ``rankings`` (each ``{id: score}``, best first) as ``(id, score)``
    pairs, best first (see the module docstring for the methods and the tie-break)."""
    if method not in FUSION_METHODS:
        raise ValueError(f"unknown fusion method {method!r}; known: {', '.join(FUSION_METHODS)}")
    if rrf_k < 0:
        raise ValueError(f"rrf_k must be >= 0, got {rrf_k}")
    if method == FusionMethod.RRF:
        parts = [reciprocal_ranks(r, rrf_k) for r in rankings]
    else:
        parts = [min_max_ranx(r) for r in rankings]
    fused: dict[str, float] = {}
    hits: dict[str, int] = {}
    best_rank: dict[str, int] = {}
    for ranking, part in zip(rankings, parts, strict=True):
        for rank, doc in enumerate(ranking, start=1):
            fused[doc] = fused.get(doc, 0.0) + part[doc]
            hits[doc] = hits.get(doc, 0) + 1
            best_rank[doc] = min(best_rank.get(doc, rank), rank)
    if method == FusionMethod.COMBMNZ:
        fused = {doc: score * hits[doc] for doc, score in fused.items()}
    order = sorted(fused, key=lambda doc: (-fused[doc], best_rank[doc], doc))
    return [(doc, fused[doc]) for doc in order]
