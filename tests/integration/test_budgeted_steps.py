"""Budgets on the real answer-side steps: a budget cuts a QA set's sample before the step runs,
a ceiling reached mid-way stops it cleanly and keeps the items it finished (replayed from the
cache, marked partial with the reason; the set's run is not failed, the night goes on), and ``nightly --dry-run`` estimates from the ledger.

On the ingested sample corpus with the scripted answering double (``tests/scripted_llm.py``;
not a model) and the real embedder and index.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from ragtrail.cli import app
from ragtrail.paths import sample_corpus_dir, sample_qa_set
from ragtrail.pipeline.citations.views import load_citations
from ragtrail.pipeline.dry_run import estimate_night
from ragtrail.pipeline.golden import register_golden_set
from ragtrail.pipeline.night import INGEST, run_flow
from ragtrail.pipeline.sample_size import DEFAULT_SD, mde_at
from ragtrail.pipeline.tasks import evaluate_set_citations
from ragtrail.records import QASetRef, SetKind
from ragtrail.storage.budget_store import COMPLETE, BudgetStore, StepUsage
from ragtrail.storage.db import utcnow
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.qa_sets import PlannedSet
from tests.scripted_llm import SPEC as SCRIPTED_SPEC

CORPUS = "hb"


def _history(rt, calls_per_item: float, seconds_per_item: float = 2.0) -> None:
    """One earlier night's citations on 4 items (the estimate's history)."""
    BudgetStore(rt.engine).record(
        StepUsage(
            night="earlier",
            corpus=CORPUS,
            step="citations",
            scope="earlier.sample",
            status=COMPLETE,
            started_at=utcnow() - timedelta(days=1),
            items_planned=4,
            items_run=4,
            items_done=4,
            calls=int(4 * calls_per_item),
            prompt_tokens=400,
            completion_tokens=100,
            cost_usd=0.0,
            seconds=4 * seconds_per_item,
            fingerprint="older-inputs",
        )
    )


def _entry(night: str) -> dict:
    ref = QASetRef(SetKind.FILE, str(sample_qa_set()))
    return PlannedSet(
        name="sample", kind=SetKind.FILE, qa_set=ref, run_id=f"{night}.sample"
    ).to_json()


@pytest.fixture
def make_rt(make_runtime, tmp_path):
    def build(**budgets):
        rt = make_runtime(
            home=tmp_path / "home",
            # 1 request per batch: a backend call of BATCHES_PER_CALL (4) requests
            generation={"llm": SCRIPTED_SPEC, "llm_batch_size": 1},
            citations={"max_items": 4, "scenarios": [], "bootstrap_samples": 100},
            budgets=budgets,
        )
        state = INGEST.resolve(
            {"corpus": CORPUS, "source": str(sample_corpus_dir())}, [], "ingest-1"
        )
        run_flow(rt, INGEST, state)
        return rt

    return build


def test_a_step_budget_cuts_the_sample_and_the_summary_says_so(make_rt) -> None:
    rt = make_rt(steps={"citations": {"max_calls": 25}})
    _history(rt, calls_per_item=10.0)  # 10 calls per item: 25 calls afford 2 of 4 items
    rt.budget_night = "night-1"
    result = evaluate_set_citations(rt, corpus=CORPUS, qa_set_entry=_entry("night-1"))
    assert "partial" not in result  # it ran, on fewer items
    summary = load_citations(rt, "night-1.sample")
    assert summary is not None and summary.budget is not None
    note = summary.budget
    assert (note.items_planned, note.items_run, note.items_done, note.partial) == (4, 2, 2, True)
    assert note.reason and "step citations calls budget" in note.reason
    assert len({q.qid for q in summary.mixture.queries}) == 2
    stored = json.loads(rt.artifacts.get_bytes("runs/night-1.sample/citations.json"))
    assert stored["budget"]["partial"] is True
    row = BudgetStore(rt.engine).night_rows("night-1")[0]
    assert (row.status, row.items_done, row.calls) == ("partial", 2, note.calls)


def test_a_ceiling_reached_mid_way_keeps_what_was_finished(make_rt) -> None:
    rt = make_rt(steps={"citations": {"max_calls": 5}})
    _history(rt, calls_per_item=1.0)  # the estimate says 1 call per item: all 4 fit ...
    rt.budget_night = "night-2"
    result = evaluate_set_citations(rt, corpus=CORPUS, qa_set_entry=_entry("night-2"))
    # ... but every item asks 3 mixtures (12 requests): the gate, asked before each backend call
    # of 4 requests, stops it once 5 are used up (8 sent, less than one call's batch over). The
    # 8 replies are cached: the first 2 items' 6 mixtures are complete, so the step runs again
    # on those 2 from the cache alone and publishes them, marked partial with the reason.
    assert "partial" not in result and result["name"] == "sample"
    summary = load_citations(rt, "night-2.sample")
    assert summary is not None and summary.budget is not None
    note = summary.budget
    assert (note.items_planned, note.items_run, note.items_done, note.partial) == (4, 2, 2, True)
    assert note.reason and "step citations calls budget used up" in note.reason
    assert "kept the 2 of 4 items finished before it" in note.reason
    assert len({q.qid for q in summary.mixture.queries}) == 2
    assert rt.llm_usage.totals().calls == 8  # the replays sent nothing
    run = RunStore(rt.engine).get_run("night-2.sample")
    assert run is not None and run.status != "failed"
    row = BudgetStore(rt.engine).night_rows("night-2")[0]
    assert (row.status, row.items_run, row.items_done, row.calls) == ("partial", 2, 2, 8)


def test_a_budget_that_affords_nothing_runs_nothing(make_rt) -> None:
    rt = make_rt(night={"max_minutes": 0.5})  # less than the 1-minute reserve
    rt.budget_night = "night-3"
    result = evaluate_set_citations(rt, corpus=CORPUS, qa_set_entry=_entry("night-3"))
    assert result["partial"] is True and "night minutes budget" in result["budget_reason"]
    assert rt.llm_usage.totals().calls == 0


def test_dry_run_estimates_from_history_and_calls_no_model(make_rt, monkeypatch) -> None:
    rt = make_rt(steps={"citations": {"max_calls": 25}})
    register_golden_set(rt, sample_qa_set(), corpus=CORPUS, name="handbook-sample")
    _history(rt, calls_per_item=10.0, seconds_per_item=3.0)
    night = estimate_night(rt, corpus=CORPUS, generate=False)
    cited = [s for s in night.steps if s.estimate.step == "citations"]
    assert len(cited) == 1
    row = cited[0].to_json()
    assert row["planned_items"] == 4 and row["n"] == 2 and cited[0].reason
    assert row["calls"] == pytest.approx(20.0) and row["minutes"] == pytest.approx(0.1)
    # what n = 2 could detect, from the default spread (no stored citation values yet)
    assert row["mde"] == pytest.approx(mde_at(DEFAULT_SD, 2))
    assert row["mde_spread"] == "the default (no usable history)"
    assert rt.llm_usage.totals().calls == 0
    json.dumps(night.to_json(), allow_nan=False)

    monkeypatch.setenv("RAGTRAIL_HOME", str(rt.settings.home))
    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM", SCRIPTED_SPEC)
    monkeypatch.setenv("RAGTRAIL_CITATIONS__MAX_ITEMS", "4")
    monkeypatch.setenv("RAGTRAIL_CITATIONS__SCENARIOS", "[]")
    monkeypatch.setenv("RAGTRAIL_BUDGETS__STEPS__CITATIONS__MAX_CALLS", "25")
    out = CliRunner().invoke(
        app, ["nightly", "--corpus", CORPUS, "--dry-run", "--no-generate", "--json"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert [s["n"] for s in data["steps"] if s["step"] == "citations"] == [2]

    # target_mde sizes the sample the budgets then cap: a change of 0.5 at the default spread
    # of 0.5 (effect size 1) needs 10 questions; 25 calls at 10 per question afford 2
    monkeypatch.setenv("RAGTRAIL_CITATIONS__MAX_ITEMS", "0")
    monkeypatch.setenv("RAGTRAIL_CITATIONS__TARGET_MDE", "0.5")
    out = CliRunner().invoke(
        app, ["nightly", "--corpus", CORPUS, "--dry-run", "--no-generate", "--json"]
    )
    assert out.exit_code == 0, out.output
    (cited,) = [s for s in json.loads(out.stdout)["steps"] if s["step"] == "citations"]
    assert (cited["planned_items"], cited["n"]) == (10, 2) and cited["bounded_by_budget"]
