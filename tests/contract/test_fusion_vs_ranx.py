"""Conformance of ragtrail's CombSUM, CombMNZ and RRF with ranx on random runs.

ranx is a dev-only dependency; its numba kernels compile on first use (about 80 s), so every
fusion is compared in this one test. Rankings must agree up to the order inside groups of equal
fused score (ranx leaves that order to an unstable sort; ragtrail breaks it deterministically),
and scores within 1e-9.
"""

from __future__ import annotations

import numpy as np
import pytest

from ragtrail.index.rank_fusion import fuse_rankings

ranx = pytest.importorskip("ranx", reason="ranx (dev dependency) is not installed")

N_QUERIES = 30
N_RUNS = 4
TOLERANCE = 1e-9


def random_runs(seed: int) -> list[dict[str, dict[str, float]]]:
    """N_RUNS runs over the same queries; each query ranks 1-12 of 20 docs with distinct scores
    (a few lists hold one doc, so ranx's constant-list normalisation is exercised)."""
    rng = np.random.default_rng(seed)
    runs: list[dict[str, dict[str, float]]] = [{} for _ in range(N_RUNS)]
    for q in range(N_QUERIES):
        for run in runs:
            size = int(rng.integers(1, 13))
            docs = rng.choice(20, size=size, replace=False)
            scores = np.sort(rng.uniform(-5.0, 30.0, size=size))[::-1]
            run[f"q{q}"] = {f"d{d:02d}": float(s) for d, s in zip(docs, scores, strict=True)}
    return runs


def tie_groups(pairs: list[tuple[str, float]]) -> list[tuple[float, frozenset[str]]]:
    groups: list[tuple[float, set[str]]] = []
    for doc, score in pairs:
        if groups and abs(groups[-1][0] - score) <= TOLERANCE:
            groups[-1][1].add(doc)
        else:
            groups.append((score, {doc}))
    return [(score, frozenset(docs)) for score, docs in groups]


@pytest.mark.parametrize("seed", [7])
def test_fusions_match_ranx(seed: int) -> None:
    runs = random_runs(seed)
    ranx_runs = [ranx.Run(run, name=f"r{i}") for i, run in enumerate(runs)]
    cases = {
        "combsum": ranx.fuse(ranx_runs, norm="min-max", method="sum"),
        "combmnz": ranx.fuse(ranx_runs, norm="min-max", method="mnz"),
        "rrf": ranx.fuse(ranx_runs, norm=None, method="rrf", params={"k": 60}),
    }
    for method, expected in cases.items():
        reference = expected.to_dict()
        for qid in runs[0]:
            ours = fuse_rankings([run[qid] for run in runs], method)  # type: ignore[arg-type]
            theirs = sorted(reference[qid].items(), key=lambda kv: -kv[1])
            assert [doc for doc, _ in ours] and len(ours) == len(theirs), (method, qid)
            ours_groups, their_groups = tie_groups(ours), tie_groups(theirs)
            assert [g for _, g in ours_groups] == [g for _, g in their_groups], (method, qid)
            for (mine, _), (ref, _) in zip(ours_groups, their_groups, strict=True):
                assert mine == pytest.approx(ref, abs=TOLERANCE), (method, qid)
            scores = dict(theirs)
            for doc, score in ours:
                assert score == pytest.approx(scores[doc], abs=TOLERANCE), (method, qid, doc)
