"""CombSUM, CombMNZ and RRF on tiny lists, checked against hand-computed scores and tie-breaks."""

from __future__ import annotations

import pytest

from ragtrail.index.rank_fusion import fuse_rankings, min_max_ranx, reciprocal_ranks

# A: x=9, y=5, z=1 -> normalised x=1, y=0.5, z=0
# B: w=4, y=3, v=2 -> normalised w=1, y=0.5, v=0
A = {"x": 9.0, "y": 5.0, "z": 1.0}
B = {"w": 4.0, "y": 3.0, "v": 2.0}


def ids(fused: list[tuple[str, float]]) -> list[str]:
    return [doc for doc, _ in fused]


def test_min_max_follows_ranx_floor() -> None:
    assert min_max_ranx(A) == {"x": 1.0, "y": 0.5, "z": 0.0}
    # constant lists (a single hit too) normalise to 0: (s - min) / max(0, 1e-9)
    assert min_max_ranx({"q": 7.0}) == {"q": 0.0}
    assert min_max_ranx({"q": 2.0, "r": 2.0}) == {"q": 0.0, "r": 0.0}
    assert min_max_ranx({}) == {}


def test_reciprocal_ranks_use_list_order() -> None:
    assert reciprocal_ranks({"b": 0.1, "a": 0.9}) == {"b": 1 / 61, "a": 1 / 62}
    assert reciprocal_ranks({"b": 0.1, "a": 0.9}, rrf_k=0) == {"b": 1.0, "a": 0.5}


def test_combsum_hand_computed_with_ties() -> None:
    fused = fuse_rankings([A, B], "combsum")
    # x = 1, w = 1, y = 0.5 + 0.5 = 1: a three-way tie; best ranks x=1, w=1, y=2; then id.
    # v = 0 and z = 0 tie, both best rank 3: id order.
    assert fused == [("w", 1.0), ("x", 1.0), ("y", 1.0), ("v", 0.0), ("z", 0.0)]


def test_combmnz_multiplies_by_list_count() -> None:
    fused = fuse_rankings([A, B], "combmnz")
    assert fused == [("y", 2.0), ("w", 1.0), ("x", 1.0), ("v", 0.0), ("z", 0.0)]


def test_rrf_hand_computed() -> None:
    fused = fuse_rankings([A, B], "rrf")
    assert ids(fused) == ["y", "w", "x", "v", "z"]
    assert dict(fused) == pytest.approx(
        {"y": 2 / 62, "w": 1 / 61, "x": 1 / 61, "v": 1 / 63, "z": 1 / 63}, abs=1e-15
    )


def test_three_lists() -> None:
    first = {"a": 3.0, "b": 2.0, "c": 1.0}  # a=1, b=0.5, c=0
    second = {"b": 10.0, "d": 6.0}  # b=1, d=0
    third = {"c": 5.0, "a": 4.0}  # c=1, a=0
    assert fuse_rankings([first, second, third], "combsum") == [
        ("b", 1.5),
        ("a", 1.0),
        ("c", 1.0),
        ("d", 0.0),
    ]
    assert fuse_rankings([first, second, third], "combmnz") == [
        ("b", 3.0),
        ("a", 2.0),
        ("c", 2.0),
        ("d", 0.0),
    ]
    # a = 1/61 + 1/62 equals b = 1/62 + 1/61; both reached rank 1, so the id decides.
    assert ids(fuse_rankings([first, second, third], "rrf")) == ["a", "b", "c", "d"]


def test_single_list_keeps_its_order_and_empty_input_is_empty() -> None:
    assert ids(fuse_rankings([A], "rrf")) == ["x", "y", "z"]
    assert ids(fuse_rankings([A], "combsum")) == ["x", "y", "z"]
    assert fuse_rankings([], "rrf") == []


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fusion method 'pm2'"):
        fuse_rankings([A], "pm2")  # type: ignore[arg-type]
