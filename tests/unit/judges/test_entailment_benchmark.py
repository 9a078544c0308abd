"""The entailment benchmark's agreement figures (kappa from judges/calibration.py, intervals from stats)."""

from __future__ import annotations

import pytest

from benchmarks.bench_entailment import (
    _interval,
    _kappa,
    agreement,
    best_threshold,
    split_by_query,
)
from ragtrail.judges.contract import NOT_SUPPORTED as N
from ragtrail.judges.contract import SUPPORTED as S
from ragtrail.judges.contract import Verdict
from ragtrail.judges.references import EntailmentExample


def test_kappa_by_hand() -> None:
    # observed 3/4; chance 0.75*0.5 + 0.25*0.5 = 0.5; kappa (0.75-0.5)/(1-0.5)
    assert _kappa([S, S, S, N], [S, S, N, N]) == pytest.approx(0.5)
    assert _kappa([S, N], [N, S]) == pytest.approx(-1.0)
    assert _kappa([S, S], [S, S]) is None  # chance agreement 1: undefined
    assert _kappa([], []) is None


def test_agreement_counts_failures_apart() -> None:
    verdicts = [
        Verdict("j", S),
        Verdict("j", S),
        Verdict("j", N),
        Verdict("j", N),
        Verdict("j", None, error="parse_error"),
    ]
    result = agreement([S, S, S, N, S], verdicts)
    assert (result.n, result.failed) == (4, 1)
    assert result.accuracy == pytest.approx(0.75) and result.kappa == pytest.approx(0.5)
    assert result.precision == pytest.approx(1.0) and result.recall == pytest.approx(2 / 3)
    assert result.balanced_accuracy == pytest.approx((2 / 3 + 1) / 2)
    low, high = result.accuracy_ci or (0.0, 0.0)
    assert 0.0 <= low <= 0.75 <= high <= 1.0
    assert _interval(0, lambda idx: 1.0) is None
    assert _interval(6, lambda idx: 1.0) is None  # kappa on 6 items: too few for an interval


def test_threshold_and_split() -> None:
    assert best_threshold([0.1, 0.4, 0.6, 0.9], [N, N, S, S]) == (0.41, 1.0)
    examples = [
        EntailmentExample("p", "h", S, f"q{q}:a0:s{s}") for q in range(10) for s in range(3)
    ]
    tune, test = split_by_query(examples, seed=3)
    tune_queries = {e.source_id.split(":")[0] for e in tune}
    assert tune_queries.isdisjoint({e.source_id.split(":")[0] for e in test})
    assert len(tune) == len(test) == 15
    assert split_by_query(examples, seed=3) == (tune, test)
