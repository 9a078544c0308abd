"""Hybrid fusion semantics, checked against hand-computed scores."""

from __future__ import annotations

import itertools

import pytest

from ragtrail.index.fusion import fuse, min_max
from ragtrail.records import Candidates, SearchHit


def hits(*pairs: tuple[str, float]) -> tuple[SearchHit, ...]:
    return tuple(
        SearchHit(chunk_id=c, doc_id=f"doc-{c}", score=s, text=f"text {c}") for c, s in pairs
    )


# lexical: a=10, b=6, c=2 -> normalised a=1, b=0.5, c=0
# dense:   b=0.9, d=0.5, a=0.1 -> normalised b=1, d=0.5, a=0
LEX = hits(("a", 10.0), ("b", 6.0), ("c", 2.0))
DEN = hits(("b", 0.9), ("d", 0.5), ("a", 0.1))
CANDS = Candidates(lexical=LEX, dense=DEN)


def ids(ranked: list[SearchHit]) -> list[str]:
    return [h.chunk_id for h in ranked]


def test_min_max_hand_computed() -> None:
    assert min_max(LEX) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert min_max(DEN) == pytest.approx({"b": 1.0, "d": 0.5, "a": 0.0})
    assert min_max(hits(("x", 3.0))) == {"x": 1.0}
    assert min_max(hits(("x", 2.0), ("y", 2.0))) == {"x": 1.0, "y": 1.0}
    assert min_max(()) == {}


def test_weight_one_is_bm25_order() -> None:
    ranked = fuse(CANDS, 1.0, 10)
    assert ids(ranked)[:3] == ["a", "b", "c"]
    # d is only a dense candidate: it scores 0, like c, and loses the tie on raw BM25 (-inf)
    assert ids(ranked) == ["a", "b", "c", "d"]
    assert [h.score for h in ranked] == pytest.approx([1.0, 0.5, 0.0, 0.0])


def test_weight_zero_is_dense_order() -> None:
    ranked = fuse(CANDS, 0.0, 10)
    assert ids(ranked) == ["b", "d", "a", "c"]
    assert [h.score for h in ranked] == pytest.approx([1.0, 0.5, 0.0, 0.0])


def test_half_weight_hand_computed() -> None:
    # a: .5*1 + .5*0 = .5; b: .5*.5 + .5*1 = .75; c: 0; d: .5*.5 = .25
    ranked = fuse(CANDS, 0.5, 10)
    assert ids(ranked) == ["b", "a", "d", "c"]
    assert [h.score for h in ranked] == pytest.approx([0.75, 0.5, 0.25, 0.0])


def test_small_text_weight_hand_computed() -> None:
    # w=0.2: a=.2, b=.2*.5+.8=.9, c=0, d=.8*.5=.4
    ranked = fuse(CANDS, 0.2, 10)
    assert ids(ranked) == ["b", "d", "a", "c"]
    assert [h.score for h in ranked] == pytest.approx([0.9, 0.4, 0.2, 0.0])


def test_k_truncates_and_hits_keep_their_metadata() -> None:
    ranked = fuse(CANDS, 0.5, 2)
    assert ids(ranked) == ["b", "a"]
    assert ranked[0].doc_id == "doc-b"
    assert ranked[0].text == "text b"
    assert fuse(Candidates((), ()), 0.5, 5) == []


def test_ties_break_on_dominant_raw_score_then_chunk_id() -> None:
    # x and y tie at fused 0.5 at w=0.5; lexical dominates (w >= .5): raw BM25 x=4 > y=1
    cands = Candidates(
        lexical=hits(("x", 4.0), ("y", 1.0)),
        dense=hits(("y", 0.8), ("x", 0.2)),
    )
    assert ids(fuse(cands, 0.5, 2)) == ["x", "y"]
    # everything equal -> chunk id order, whatever the input order
    tie = Candidates(lexical=hits(("p", 5.0), ("q", 5.0)), dense=())
    assert ids(fuse(tie, 1.0, 2)) == ["p", "q"]  # equal everything -> chunk id order
    assert ids(fuse(Candidates(lexical=hits(("q", 5.0), ("p", 5.0)), dense=()), 1.0, 2)) == [
        "p",
        "q",
    ]


def test_dense_dominant_tie_break_below_half() -> None:
    # w=0.2: m = .2*1 + .8*0 = .2 ; n = .2*0 + .8*.25 = .2 (exact in binary) -> tie;
    # dense dominates below 0.5, so n's raw cosine 0.25 beats m's 0.0
    cands = Candidates(
        lexical=hits(("m", 9.0), ("n", 3.0), ("o", 3.0)),
        dense=hits(("o", 1.0), ("n", 0.25), ("m", 0.0)),
    )
    ranked = fuse(cands, 0.2, 3)
    assert [h.score for h in ranked] == [0.8, 0.2, 0.2]
    assert ids(ranked) == ["o", "n", "m"]


@pytest.mark.parametrize("weight", [0.0, 0.05, 0.1, 0.2, 0.5, 1.0])
def test_ranking_is_independent_of_input_order(weight: float) -> None:
    lexical = hits(("a", 2.0), ("b", 2.0), ("c", 1.0), ("e", 1.0))
    dense = hits(("e", 0.5), ("a", 0.5), ("f", 0.5), ("c", 0.1))
    expected = ids(fuse(Candidates(lexical, dense), weight, 10))
    for lex_perm, den_perm in itertools.product(
        itertools.permutations(lexical), itertools.permutations(dense)
    ):
        assert ids(fuse(Candidates(lex_perm, den_perm), weight, 10)) == expected


@pytest.mark.parametrize("weight", [-0.01, 1.01, float("nan"), 2.0])
def test_invalid_weight_raises(weight: float) -> None:
    with pytest.raises(ValueError, match="text_weight"):
        fuse(CANDS, weight, 5)


def test_fusion_table_ranks_exactly_as_fuse_at_every_weight() -> None:
    """Random candidate lists with many exact ties (scores on a coarse grid, shared chunks,
    chunks in one modality only): the table's order must be fuse's, ties and all."""
    import random

    from ragtrail.index.fusion import FusionTable

    rng = random.Random(7)
    for _ in range(200):
        pool = [f"c{i:02d}" for i in range(rng.randint(1, 30))]
        lexical = hits(
            *((c, float(rng.randint(0, 4))) for c in rng.sample(pool, rng.randint(0, len(pool))))
        )
        dense = hits(
            *((c, rng.randint(0, 4) / 4) for c in rng.sample(pool, rng.randint(0, len(pool))))
        )
        cands = Candidates(lexical=lexical, dense=dense)
        table = FusionTable(cands)
        for weight in (0.0, 0.05, 0.1, 0.2, 0.5, 0.7, 1.0):
            expected = fuse(cands, weight, len(pool))
            assert [str(c) for c in table.chunk_ids[table.order(weight)]] == ids(expected)
            by_doc = list(dict.fromkeys(h.doc_id for h in expected))[:5]
            assert table.ranking(weight, "document", 5) == by_doc
    with pytest.raises(ValueError, match="text_weight"):
        FusionTable(CANDS).order(1.5)
