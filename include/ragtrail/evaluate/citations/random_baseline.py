"""The random citation baseline (RAGE): cite 1-3 passages of the mixture uniformly at random.

One draw: a count c uniform in {1, ..., min(3, n)}, then a uniform c-subset of the n passages.
:func:`simulate_random_citations` repeats the draw (seeded) and averages the per-draw scores, which
is the baseline's value for one mixture. :func:`expected_random_scores` is the exact expectation,
used to check the simulation and to read what a mixture's make-up alone predicts.

Closed form for n passages of which r are relevant: given c, the number k of relevant passages
cited is hypergeometric with mean c·r/n. Precision k/c, recall k/r and F1 = 2k/(c + r) are all
linear in k, so E[P] = r/n, E[R] = E[c]/n and E[F1] = mean over c of 2·c·r / (n·(c + r)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragtrail.evaluate.citations.rage_metrics import f1_score

MAX_RANDOM_CITATIONS = 3


@dataclass(frozen=True)
class RandomScores:
    """Mean scores of random citing; recall and F1 are None when the mixture has no relevant
    passage (precision is then 0: every random citation is wrong)."""

    precision: float
    recall: float | None
    f1: float | None
    distinct_citations: float


def _check(n: int, r: int) -> None:
    if n < 1:
        raise ValueError(f"a mixture needs at least one passage, got n={n}")
    if not 0 <= r <= n:
        raise ValueError(f"relevant count r={r} must be in 0..n={n}")


def expected_random_scores(n: int, r: int) -> RandomScores:
    """Exact expectation of the random baseline's scores (see the module docstring)."""
    _check(n, r)
    counts = np.arange(1, min(MAX_RANDOM_CITATIONS, n) + 1, dtype=float)
    mean_c = float(counts.mean())
    if r == 0:
        return RandomScores(0.0, None, None, mean_c)
    f1 = float(np.mean(2 * counts * r / (n * (counts + r))))
    return RandomScores(r / n, mean_c / n, f1, mean_c)


def simulate_random_citations(
    n: int, relevant: frozenset[int] | set[int], rng: np.random.Generator, repeats: int
) -> RandomScores:
    """Mean scores over ``repeats`` random draws for a mixture of ``n`` passages whose relevant
    numbers (1-based) are ``relevant``."""
    _check(n, len(relevant))
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    is_relevant = np.zeros(n, dtype=bool)
    is_relevant[[k - 1 for k in relevant]] = True
    r = len(relevant)
    counts = rng.integers(1, min(MAX_RANDOM_CITATIONS, n) + 1, size=repeats)
    # A uniform c-subset = the first c positions of a uniform permutation (one per repeat).
    order = np.argsort(rng.random((repeats, n)), axis=1)
    hits = np.array([is_relevant[order[i, : counts[i]]].sum() for i in range(repeats)], dtype=float)
    precision = float(np.mean(hits / counts))
    if r == 0:
        return RandomScores(precision, None, None, float(counts.mean()))
    recalls = hits / r
    f1s = [f1_score(p, q) for p, q in zip(hits / counts, recalls, strict=True)]
    return RandomScores(precision, float(recalls.mean()), float(np.mean(f1s)), float(counts.mean()))
