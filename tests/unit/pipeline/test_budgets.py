"""Budgets: affordable n from an estimate, estimates from the ledger's history, the budget gate
in the LLM client, and a budgeted step's ledger rows across runtimes (as Airflow tasks).

The LLM is :class:`ScriptedBackend` (a test double returning scripted texts, not a model).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from ragtrail.config import load_settings
from ragtrail.llm.budget import BudgetExhausted, BudgetGate, cost_usd, price_of
from ragtrail.llm.cache import MemoryLLMCache
from ragtrail.llm.client import LLMClient
from ragtrail.llm.prompts import Prompt
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.llm.usage import Price, UsageCounters
from ragtrail.pipeline.budgets import (
    Remaining,
    StepEstimate,
    affordable_items,
    binding_reason,
    budgeted_step,
    estimate_step,
    night_of,
    remaining_budgets,
)
from ragtrail.runtime import Runtime
from ragtrail.storage.budget_store import COMPLETE, BudgetStore, StepUsage
from ragtrail.storage.db import utcnow


class Item(BaseModel):
    text: str


class Reply(BaseModel):
    label: str


PROMPT: Prompt[Item, Reply] = Prompt(
    name="test.budget",
    version="1",
    instruction="Label the item.",
    input_model=Item,
    output_model=Reply,
    document_fields=frozenset({"text"}),
)


def estimate(**kw: object) -> StepEstimate:
    values: dict[str, object] = {
        "step": "citations",
        "scope": "s",
        "items": 10,
        "calls_per_item": 4.0,
        "cached_share": 0.0,
        "tokens_per_call": 100.0,
        "cost_per_call": 0.0,
        "seconds_per_item": 30.0,
        "source": "test",
    }
    values.update(kw)
    return StepEstimate(**values)  # type: ignore[arg-type]


def test_affordable_items_takes_the_tightest_ceiling() -> None:
    e = estimate()
    assert affordable_items(e, Remaining()) is None  # no ceiling
    assert affordable_items(e, Remaining(calls=10)) == 2  # 4 calls per item
    assert affordable_items(e, Remaining(minutes=2.0)) == 4  # 0.5 min per item
    assert affordable_items(e, Remaining(calls=100, tokens=1000, minutes=2.0)) == 2  # 400 tok
    assert affordable_items(e, Remaining(calls=-3)) == 0  # overspent: nothing
    # everything cached: calls and tokens never bind, minutes still do
    cached = estimate(cached_share=1.0, seconds_per_item=6.0)
    assert affordable_items(cached, Remaining(calls=0, tokens=0)) is None
    assert affordable_items(cached, Remaining(calls=0, minutes=1.0)) == 10
    # a local model costs 0: a cost ceiling never binds; an unpriced endpoint binds at 0
    assert affordable_items(e, Remaining(cost_usd=0.0)) is None
    assert affordable_items(estimate(cost_per_call=None), Remaining(cost_usd=5.0)) == 0
    assert affordable_items(estimate(cost_per_call=0.01), Remaining(cost_usd=0.2)) == 5


def test_binding_reason_names_the_ceiling() -> None:
    e = estimate()
    why = binding_reason(e, Remaining(calls=10, minutes=50, source={"calls": "night"}), 2)
    assert why.startswith("night calls budget") and why.endswith("n=2 of 10")


def test_estimate_totals_are_per_item_times_n() -> None:
    e = estimate(cached_share=0.25, cost_per_call=0.002)
    totals = e.for_items(4)
    assert totals == {"items": 4, "calls": 12.0, "tokens": 1200, "cost_usd": 0.024, "minutes": 2.0}
    assert json.loads(json.dumps(e.to_json(), allow_nan=False))["source"] == "test"


def test_prices_local_models_cost_nothing_and_unpriced_endpoints_are_unknown() -> None:
    prices = {"gpt-x": Price(1.0, 2.0)}
    assert price_of("transformers", "smollm", prices) == Price(0.0, 0.0)
    assert price_of("openai", "gpt-x", prices) == Price(1.0, 2.0)
    assert price_of("openai", "other", prices) is None
    used = UsageCounters(calls=2, prompt_tokens=1000, completion_tokens=500)
    assert cost_usd({("s", "openai", "gpt-x"): used}, prices) == pytest.approx(2.0)
    assert cost_usd({("s", "openai", "other"): used}, prices) is None
    assert cost_usd({("s", "openai", "other"): UsageCounters(cache_hits=3)}, prices) == 0.0


def test_top_level_prices_override_the_generation_table(tmp_path: Path) -> None:
    settings = load_settings(
        home=tmp_path,
        generation={"price_per_1k_tokens": {"a": (1.0, 1.0), "b": (2.0, 2.0)}},
        prices={"b": (3.0, 3.0)},
    )
    assert settings.model_prices() == {"a": (1.0, 1.0), "b": (3.0, 3.0)}
    rt = Runtime(settings)
    try:
        assert rt.llm_usage.prices["b"] == Price(3.0, 3.0)
    finally:
        rt.close()


def test_the_gate_stops_the_client_keeps_what_came_back_and_counts_only_sent_calls() -> None:
    backend = ScriptedBackend(lambda req, n: '{"label": "x"}')
    gate = BudgetGate()
    cache = MemoryLLMCache()
    client = LLMClient(backend, cache, gate=gate, report_every=2)
    sent = {"n": 0}

    def check() -> str | None:
        sent["n"] = len(backend.calls)
        return "night calls budget used up" if len(backend.calls) >= 4 else None

    gate.push(check)
    with pytest.raises(BudgetExhausted, match="night calls budget used up"):
        client.run(PROMPT, [Item(text=f"t{i}") for i in range(10)], stage="s")
    assert len(backend.calls) == 4  # two backend calls of 2, then the gate said stop
    assert client.usage.totals().calls == 4
    gate.pop(check)
    # the four replies were cached: a rerun without the budget sends only the six others
    outcomes = client.run(PROMPT, [Item(text=f"t{i}") for i in range(10)], stage="s")
    assert all(o.ok for o in outcomes)
    assert len(backend.calls) == 10
    assert client.usage.totals().cache_hits == 4


def _runtime(tmp_path: Path, **overrides: object) -> Runtime:
    return Runtime(load_settings(home=tmp_path / "home", **overrides))


def _row(night: str, scope: str, **kw: object) -> StepUsage:
    values: dict[str, object] = {
        "night": night,
        "corpus": "hb",
        "step": "citations",
        "scope": scope,
        "status": COMPLETE,
        "started_at": utcnow() - timedelta(days=1),
        "items_planned": 4,
        "items_run": 4,
        "items_done": 4,
        "calls": 40,
        "cache_hits": 0,
        "prompt_tokens": 3000,
        "completion_tokens": 1000,
        "cost_usd": 0.0,
        "seconds": 120.0,
        "fingerprint": "fp-a",
    }
    values.update(kw)
    return StepUsage(**values)  # type: ignore[arg-type]


def test_estimate_without_history_uses_the_documented_defaults(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    try:
        e = estimate_step(rt, "citations", corpus="hb", scope="s", items=3)
        bs = rt.settings.budgets
        assert e.source == "default (no history)"
        assert e.calls_per_item == bs.default_calls_per_item["citations"]
        assert e.seconds_per_item == bs.default_seconds_per_item["citations"]
        assert e.cached_share == 0.0
        assert e.cost_per_call == 0.0  # the bundled local model
    finally:
        rt.close()


def test_estimate_reads_calls_seconds_and_cache_share_from_history(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    try:
        store = BudgetStore(rt.engine)
        store.record(_row("n1", "n1.a"))  # cold: 10 calls, 30 s per item
        store.record(
            _row(
                "n2",
                "n2.a",
                calls=0,
                cache_hits=40,
                prompt_tokens=0,
                completion_tokens=0,
                seconds=8.0,
            )
        )  # same inputs: a cached rerun
        new = estimate_step(rt, "citations", corpus="hb", scope="x", items=4, fingerprint="fp-b")
        assert new.calls_per_item == pytest.approx(10.0)
        assert new.cached_share == 0.0
        assert new.tokens_per_call == pytest.approx(100.0)
        assert new.seconds_per_item == pytest.approx(30.0)
        assert new.model_calls_per_item == pytest.approx(10.0)
        same = estimate_step(rt, "citations", corpus="hb", scope="x", items=4, fingerprint="fp-a")
        assert same.cached_share == 1.0 and same.model_calls_per_item == 0.0
        assert same.seconds_per_item == pytest.approx(2.0)  # the rerun's 8 s over 4 items
        # more items than the cached run finished: not all of them can be cached
        more = estimate_step(rt, "citations", corpus="hb", scope="x", items=5, fingerprint="fp-a")
        assert more.cached_share == 0.0
    finally:
        rt.close()


def test_a_budgeted_step_is_cut_to_what_the_night_affords_and_marked_partial(
    tmp_path: Path,
) -> None:
    rt = _runtime(tmp_path, budgets={"night": {"max_calls": 25}})
    try:
        BudgetStore(rt.engine).record(_row("old", "old.a"))  # 10 calls per item
        rt.budget_night = "night-1"
        with budgeted_step(rt, "citations", corpus="hb", scope="night-1.a", planned=4) as a:
            assert a.items == 2 and a.partial
            assert "night calls budget" in (a.reason or "")
            rt.llm_usage.record("s", "transformers", "m", calls=15, prompt_tokens=10)
            a.done(2)
        rows = BudgetStore(rt.engine).night_rows("night-1")
        assert [
            (r.scope, r.status, r.items_planned, r.items_run, r.items_done, r.calls) for r in rows
        ] == [("night-1.a", "partial", 4, 2, 2, 15)]
    finally:
        rt.close()


def test_the_night_budget_holds_across_runtimes_and_stops_a_step_mid_way(
    tmp_path: Path,
) -> None:
    """Two runtimes on one database stand for two Airflow tasks of one night: the second sees
    what the first spent (from the ledger) and stops when the night's calls are used up."""
    overrides = {"budgets": {"night": {"max_calls": 12}}}
    first, second = _runtime(tmp_path, **overrides), _runtime(tmp_path, **overrides)
    try:
        first.budget_night = second.budget_night = "night-2"
        with budgeted_step(first, "citations", corpus="hb", scope="night-2.a", planned=0):
            first.llm_usage.record("s", "transformers", "m", calls=8)
        assert BudgetStore(second.engine).spent("night-2").calls == 8
        left = remaining_budgets(second, "sufficiency", "night-2")
        assert left.calls == 4 and left.source["calls"] == "night"
        backend = ScriptedBackend(lambda req, n: '{"label": "x"}')
        second.use_llm_backends({"scripted": backend})
        client = second.llm_for_spec("scripted")
        client.report_every = 1
        with (
            pytest.raises(BudgetExhausted) as stopped,
            budgeted_step(second, "sufficiency", corpus="hb", scope="night-2.a", planned=0),
        ):
            client.run(PROMPT, [Item(text=f"t{i}") for i in range(10)], stage="s")
        assert len(backend.calls) == 4  # 8 + 4 = the night's 12
        assert "night calls budget used up" in stopped.value.reason
        rows = {r.step: r for r in BudgetStore(second.engine).night_rows("night-2")}
        assert rows["sufficiency"].status == "partial" and rows["sufficiency"].calls == 4
        assert rows["sufficiency"].reason and "used up" in rows["sufficiency"].reason
    finally:
        first.close()
        second.close()


def test_airflow_tasks_join_the_newest_night_of_the_window(tmp_path: Path) -> None:
    first, second = _runtime(tmp_path), _runtime(tmp_path)
    try:
        night = night_of(first, "hb")  # no nightly process: a night is opened
        assert night.startswith("hb@")
        assert night_of(second, "hb") == night
        assert night_of(second, "other") != night
        second.budget_night = "nightly-x"  # ragtrail nightly names its own
        assert night_of(second, "hb") == "nightly-x"
    finally:
        first.close()
        second.close()


def test_a_calibration_inside_a_step_is_accounted_to_the_calibration_step(
    tmp_path: Path,
) -> None:
    rt = _runtime(tmp_path)
    try:
        rt.budget_night = "night-4"
        with budgeted_step(rt, "sufficiency", corpus="hb", scope="night-4.a", planned=3) as a:
            rt.llm_usage.record("s", "transformers", "m", calls=5)
            with a.calibrating(rt, "raters"):
                rt.llm_usage.record("cal", "transformers", "m", calls=20, prompt_tokens=7)
            a.done(3)
            assert a.note_now(rt).calls == 5
        rows = {(r.step, r.scope): r for r in BudgetStore(rt.engine).night_rows("night-4")}
        assert rows[("sufficiency", "night-4.a")].calls == 5
        aside = rows[("calibration", "night-4.a/sufficiency-raters")]
        assert (aside.calls, aside.prompt_tokens, aside.items_done) == (20, 7, 0)
        assert BudgetStore(rt.engine).spent("night-4").calls == 25  # the night pays for both
    finally:
        rt.close()


def test_the_report_section_lists_every_instance_and_says_which_were_partial() -> None:
    from ragtrail.report.budget_sections import budget_sections
    from ragtrail.summaries.budget_summary import StepBudgetNote

    note = StepBudgetNote(
        step="citations",
        scope="n.sample",
        items_planned=4,
        items_run=2,
        items_done=2,
        partial=True,
        reason="night minutes budget -> n=2 of 4",
        calls=9,
        cache_hits=1,
        tokens=900,
        cost_usd=None,
        seconds=12.5,
    )
    assert budget_sections([], "n") == []
    (section,) = budget_sections([note], "n")
    assert "PARTIAL: night minutes budget -&gt; n=2 of 4" in section.html
    assert "unknown (no price)" in section.html
    assert "1 step instance(s) bounded by a budget" in section.html


def test_the_dry_run_takes_each_instance_off_what_the_night_leaves(tmp_path: Path) -> None:
    from ragtrail.pipeline.dry_run import _apply_budgets

    rt = _runtime(
        tmp_path, budgets={"night": {"max_calls": 50}, "steps": {"evidence": {"max_calls": 8}}}
    )
    try:
        first = estimate(items=4, calls_per_item=10.0)  # 40 calls: fits
        second = estimate(step="sufficiency", items=4, calls_per_item=5.0)  # 10 left: n=2
        third = estimate(step="evidence", items=4, calls_per_item=4.0, cached_share=0.5)
        planned = _apply_budgets(
            rt, [(first, None, None), (second, None, None), (third, "note", (0.5, "x"))]
        )
        assert [p.n for p in planned] == [4, 2, 0]
        assert planned[0].reason is None
        assert planned[1].reason and planned[1].reason.startswith("night calls budget")
        # the night has 0 calls left; the step's own 8 would have afforded 4
        assert planned[2].reason and planned[2].reason.startswith("night calls budget")
        assert planned[2].to_json()["note"] == "note"
        assert planned[2].mde is None  # n = 0: nothing to detect with
        assert planned[1].to_json()["mde"] is None and planned[1].to_json()["mde_spread"] is None
    finally:
        rt.close()


def test_generation_quota_is_cut_to_what_the_budgets_afford(tmp_path: Path) -> None:
    from ragtrail.pipeline.tasks import _budgeted_per_label

    rt = _runtime(tmp_path, budgets={"steps": {"generation": {"max_calls": 100}}})
    try:
        rt.budget_night = "night-5"
        # no history: the default 12 calls per accepted item; 100 calls afford 8 items = 2 per label
        per_label, why = _budgeted_per_label(rt, "hb", "gen-1", None, 3, None)
        assert per_label == 2 and why and "step generation calls budget" in why
        row = next(
            r for r in BudgetStore(rt.engine).night_rows("night-5") if r.scope == "gen-1/plan"
        )
        assert (row.status, row.items_planned, row.items_run) == ("partial", 12, 8)
        unbounded = _runtime(tmp_path / "other")
        try:
            unbounded.budget_night = "night-6"
            assert _budgeted_per_label(unbounded, "hb", "gen-2", None, 3, None) == (3, None)
        finally:
            unbounded.close()
    finally:
        rt.close()
