"""Sizing an LLM step's sample from target_mde: the spread from history, the caps, the record."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sqlalchemy import Engine
from statsmodels.stats.power import TTestPower

from ragtrail.evaluation_records import QueryValue
from ragtrail.pipeline.sample_size import (
    DEFAULT_SD,
    bounded_by_budget,
    history_spread,
    size_sample,
)
from ragtrail.storage.db import upgrade
from ragtrail.storage.runs_store import RunStore


def test_n_is_the_smallest_that_detects_the_target() -> None:
    sizing = size_sample(0.1, 0.25, "test", available=1000)
    reference = TTestPower().solve_power(effect_size=0.4, alpha=0.05, power=0.8)
    assert sizing.n == sizing.needed_n == math.ceil(reference)  # 52
    assert sizing.bound_by == "target" and sizing.mde == pytest.approx(0.1, rel=0.02)
    assert "n=52 for a target MDE of 0.1" in sizing.text and "bounded" not in sizing.text


@pytest.mark.parametrize(
    ("caps", "n", "bound"),
    [
        ({"available": 20}, 20, "available"),
        ({"available": 1000, "max_items": 8}, 8, "max_items"),
        ({"available": 1000, "max_items": 40, "budget_cap": 12}, 12, "budget"),
    ],
)
def test_a_cap_bounds_n_and_the_mde_at_n_says_what_is_left(caps: dict, n: int, bound: str) -> None:
    sizing = size_sample(0.1, 0.25, "test", **caps)
    assert (sizing.n, sizing.bound_by) == (n, bound)
    mde = 0.25 * TTestPower().solve_power(nobs=n, alpha=0.05, power=0.8)
    assert sizing.mde == pytest.approx(mde, rel=1e-5) and sizing.mde > 0.1
    assert f"{bound.replace('_', ' ')} bounded n" in sizing.text


STEPS = [0.1, -0.1, 0.0, 0.2, 0.1, 0.0]


def test_a_budget_cut_rebinds_the_sizing_and_its_mde() -> None:
    sizing = size_sample(0.1, 0.25, "test", available=1000)
    assert bounded_by_budget(sizing, 60) is sizing  # no cut
    cut = bounded_by_budget(sizing, 10)
    assert cut is not None and (cut.n, cut.bound_by, cut.needed_n) == (10, "budget", 52)
    assert cut.mde == pytest.approx(0.25 * TTestPower().solve_power(nobs=10, alpha=0.05, power=0.8))
    assert bounded_by_budget(None, 3) is None


@pytest.fixture
def store(engine: Engine) -> RunStore:
    upgrade(engine)
    return RunStore(engine)


def _run(store: RunStore, run_id: str, values: dict[str, float], system: str = "model") -> None:
    store.start_run(
        run_id, "evaluate_citations", {"corpus": "hb", "snapshot_id": "s", "qa_set_version": "v"}
    )
    rows = [QueryValue(q, {"system": system}, "citation_f1", v) for q, v in values.items()]
    store.replace_query_results(run_id, "citations", rows)
    store.finish_run(run_id, "success")


def test_spread_from_paired_history_then_one_run_then_the_default(store: RunStore) -> None:
    where = {"system": "model"}
    assert history_spread(store, "hb", "citations", "citation_f1", where) == (
        DEFAULT_SD,
        "the default (no usable history)",
    )
    first = {f"q{i}": v for i, v in enumerate([0.2, 0.4, 0.9, 0.5, 0.7, 0.1])}
    _run(store, "r1", first)
    sd, source = history_spread(store, "hb", "citations", "citation_f1", where)
    assert sd == pytest.approx(np.std(list(first.values()), ddof=1) * math.sqrt(2))
    assert source.startswith("6 questions of r1")
    second = {q: v + d for (q, v), d in zip(first.items(), STEPS, strict=True)}
    _run(store, "r2", second)
    _run(store, "r3", {q: 0.0 for q in first}, system="random")  # another facet: not counted
    sd, source = history_spread(store, "hb", "citations", "citation_f1", where)
    assert sd == pytest.approx(np.std(STEPS, ddof=1))
    assert source == "6 paired questions of r1, r2"
