"""Citation evaluation as a pipeline step and as ``ragtrail eval citations``, on the ingested
sample corpus with the scripted answering double (``tests/scripted_llm.py``; not a model: it
answers with the first sentence of the passage shown last and cites that passage) and the real
embedder, index and embedding entailment judge."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragtrail.artifact_keys import citations_key
from ragtrail.cli import app
from ragtrail.evaluate.attribution.scenarios import CLOSED_BOOK_STAGE
from ragtrail.evaluate.attribution.subqueries import SUBQUERY_STAGE
from ragtrail.evaluate.citations.evaluator import ANSWERABLE
from ragtrail.paths import sample_corpus_dir
from ragtrail.pipeline.citations.ask_ahead import ask_citations_ahead, why_not_ask_ahead
from ragtrail.pipeline.citations.step import evaluate_citations
from ragtrail.pipeline.citations.views import load_citations
from ragtrail.pipeline.night import INGEST, run_flow
from ragtrail.pipeline.run_io import sample_items
from ragtrail.pipeline.tasks import announce_citations
from ragtrail.records import QAItem
from ragtrail.storage.runs_store import RunStore
from tests.scripted_llm import SPEC as SCRIPTED_SPEC

CORPUS = "hb"
ENV_VARS = ("RAGTRAIL_CONFIG", "RAGTRAIL_DATABASE_URL", "RAGTRAIL_ARTIFACT_URI")


@pytest.fixture
def rt(make_runtime):
    rt = make_runtime(
        generation={"llm": SCRIPTED_SPEC},
        citations={"max_items": 4, "scenario_items": 2, "bootstrap_samples": 200},
    )
    state = INGEST.resolve({"corpus": CORPUS, "source": str(sample_corpus_dir())}, [], "ingest-1")
    run_flow(rt, INGEST, state)
    return rt


def test_sample_items_spread_over_labels_and_are_seeded() -> None:
    items = [
        QAItem(f"{label}{i}", "q", label) for label in ("summary", "reasoning") for i in range(5)
    ]
    picked = sample_items(items, 4, seed=3)
    assert sorted(i.label for i in picked) == ["reasoning", "reasoning", "summary", "summary"]
    assert picked == sample_items(items, 4, seed=3)
    assert picked != sample_items(items, 4, seed=4)
    assert sample_items(items, 0, seed=3) == items


def test_citations_of_one_set_are_stored_and_a_rerun_makes_no_model_call(rt) -> None:
    result = evaluate_citations(rt, CORPUS, run_id="night-1.sample", set_name="sample")
    result.dumps()  # strict JSON
    assert result.citations_uri.endswith("night-1.sample/citations.json")
    assert set(result.f1) == {"relevant+irrelevant", "relevant+seemingly", "all"}
    for systems in result.f1.values():
        assert set(systems) == {"model", "random"}
        assert systems["random"].n == systems["model"].n > 0

    summary = load_citations(rt, "night-1.sample")
    assert summary is not None
    stored = json.loads(rt.artifacts.get_bytes(citations_key("night-1.sample")))
    assert summary.to_json() == stored
    mixture = summary.mixture
    assert mixture.spec == "1-3/3/3" and mixture.counts.mixtures == 4 * 3
    assert mixture.failed == 0
    for query in mixture.queries:
        kinds = [p.kind for p in query.passages]
        assert query.relevant == [n for n, k in enumerate(kinds, 1) if k == "relevant"]
        assert query.cited == [len(kinds)]  # the double cites the passage shown last
        if query.label != "unanswerable":
            expected = 1.0 if kinds[-1] == "relevant" else 0.0
            assert query.precision == expected
    scenarios = summary.scenarios
    assert scenarios is not None
    assert scenarios.names == ["G", "RTG-vanilla", "RTG-query-gen", "GTR", "RTG-gold"]
    assert scenarios.judge.judge.startswith("entailment.embedding@")
    assert scenarios.judge.mode == "advise"  # never calibrated here
    assert {a.metric for a in scenarios.aggregates} >= {"autoais_cit", "autoais_pssg"}
    assert "bleu" in scenarios.skipped  # the sample set has no gold answers with citations

    runs = RunStore(rt.engine)
    stored = {v.evaluation for v in runs.query_results("night-1.sample")}
    assert stored == {"citations", "attribution"}
    f1 = [
        p
        for p in runs.metrics_history("citation_f1", evaluation="citations")
        if p.run_id == "night-1.sample" and p.facets.get("label") == ANSWERABLE
    ]
    assert {p.facets["system"] for p in f1} == {"model", "random"}

    usage_before = rt.llm_usage.totals().calls
    again = evaluate_citations(rt, CORPUS, run_id="night-1.sample", set_name="sample")
    assert rt.llm_usage.totals().calls == usage_before
    assert again.f1 == result.f1
    rerun = load_citations(rt, "night-1.sample")
    assert rerun is not None and rerun.scenarios is not None
    assert rerun.mixture == mixture
    assert rerun.scenarios.aggregates == scenarios.aggregates

    announced = announce_citations(
        rt,
        corpus=CORPUS,
        run_id="night-1",
        sets=[_planned("sample", "night-1.sample"), _planned("x", "none")],
        snapshot_id="s",
    )
    assert list(announced["event"]["sets"]) == ["sample"]
    assert announced["event"]["sets"]["sample"]["f1"] == result.to_json()["f1"]


def test_the_first_round_asked_ahead_is_the_one_the_step_asks(rt, monkeypatch) -> None:
    """Asked ahead (an endpoint night), the scenarios' closed-book answers and sub-queries are
    those of the step's own sample, client and parameters: the step finds every one of them in
    the cache and sends none. A local model, a budget or citations turned off ask nothing."""
    local = why_not_ask_ahead(rt)
    assert local is not None and local.startswith("a local model serves the night")
    assert ask_citations_ahead(rt, [None]) == {"skipped": local}
    assert rt.llm_usage.totals(CLOSED_BOOK_STAGE).calls == 0

    monkeypatch.setattr(rt, "llm_calls_overlap", lambda: True)
    assert ask_citations_ahead(rt, [None]) == {"sets": 1, "questions": 2, "asked": 4}
    closed, written = rt.llm_usage.totals(CLOSED_BOOK_STAGE), rt.llm_usage.totals(SUBQUERY_STAGE)
    assert closed.calls == 2 and written.calls >= 2

    evaluate_citations(rt, CORPUS, run_id="night-1.sample", set_name="sample")
    after = rt.llm_usage.totals(CLOSED_BOOK_STAGE), rt.llm_usage.totals(SUBQUERY_STAGE)
    assert [c.calls for c in after] == [closed.calls, written.calls]  # nothing sent again
    assert [c.cache_hits for c in after] == [2, written.calls]

    rt.settings.budgets.steps.citations.max_calls = 100
    assert why_not_ask_ahead(rt) == (
        "a budget bounds the citations: the step asks its first round within it"
    )
    rt.settings.citations.enabled = False
    assert why_not_ask_ahead(rt) == "citations.enabled is false"


def _planned(name: str, run_id: str) -> dict[str, str]:
    return {"name": name, "kind": "file", "qa_set": "qa.jsonl", "run_id": run_id}


def test_eval_citations_cli(rt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "cli-home"
    shutil.copytree(rt.settings.home, home)
    monkeypatch.setenv("RAGTRAIL_HOME", str(home))
    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM", SCRIPTED_SPEC)
    monkeypatch.setenv("COLUMNS", "250")
    cli = CliRunner()
    args = ["eval", "citations", "--corpus", CORPUS, "--items", "2", "--scenario", "none"]
    out = cli.invoke(app, [*args, "--mixture", "1/2/2", "--run-id", "c1", "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert summary["mixture"]["spec"] == "1/2/2" and summary["mixture"]["counts"]["mixtures"] == 6
    assert summary["undefined"]["scenarios"] == "no scenario requested"
    table = cli.invoke(app, [*args, "--run-id", "c2"])
    assert table.exit_code == 0, table.output
    assert "model F1" in table.output and "random F1" in table.output
    assert re.search(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", table.output)  # value [CI]
    bad = cli.invoke(app, [*args, "--mixture", "3-1/x/2"])
    assert bad.exit_code == 2 and "error" in bad.output


def test_a_set_whose_ground_the_corpus_lacks_is_reported_not_failed(rt, tmp_path: Path) -> None:
    """A QA set older than the corpus: its items are skipped with their reason, the step ends."""
    stale = tmp_path / "stale.jsonl"
    rows = [
        {
            "qid": f"z{i}",
            "question": f"What does policy {i} say?",
            "label": "fact_single",
            "answer": "x",
            "ground_doc_ids": ["no-such-folder/no-such-document.md"],
        }
        for i in range(3)
    ]
    stale.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = evaluate_citations(rt, CORPUS, run_id="night-1.stale", qa_set=stale)
    assert result.f1 == {}
    summary = load_citations(rt, "night-1.stale")
    assert summary is not None
    assert summary.mixture.counts.mixtures == 0
    assert [s.qid for s in summary.mixture.skipped] == ["z0", "z1", "z2"]
    assert "not in the corpus" in summary.mixture.skipped[0].reason
