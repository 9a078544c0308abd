"""Two evaluations of the sample corpus, stored run over run and compared with `ragtrail runs`.

Also the undefined values of an evaluation end to end: a scan without weights 0 and 1 and without
bootstrap gives null plus a reason in the return value, metrics.json, the database and the report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from ragtrail.cli import app
from ragtrail.evaluate.retrieval.evaluator import UNDEFINED_REASONS
from ragtrail.paths import sample_qa_set
from ragtrail.pipeline.ingest import ingest
from ragtrail.pipeline.publish import publish_retrieval_report
from ragtrail.pipeline.retrieval import evaluate_retrieval
from ragtrail.pipeline.run_io import complete_run, load_run_summary
from ragtrail.stats.intervals import NO_BOOTSTRAP
from ragtrail.storage.runs_store import RunStore

CORPUS = "hb"


def _strict(raw: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-strict JSON constant {name}")

    return json.loads(raw, parse_constant=refuse)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def rt(make_runtime, home, sample_corpus):
    runtime = make_runtime(home=home, retrieval={"bootstrap_samples": 200})
    ingest(runtime, str(sample_corpus), CORPUS)
    return runtime


def _cli(home: Path, *args: str):
    return CliRunner().invoke(app, list(args), env={"RAGTRAIL_HOME": str(home)})


def test_two_runs_on_the_same_qa_set_compare_as_identical(rt, home, tmp_path):
    first = evaluate_retrieval(rt, CORPUS, run_id="night-1")
    second = evaluate_retrieval(rt, CORPUS, run_id="night-2")
    assert first.qa_set_version == second.qa_set_version

    store = RunStore(rt.engine)
    values = store.query_results("night-1")
    n_questions = first.n_questions
    n_weights = len(rt.settings.retrieval.text_weights)
    assert len(values) == n_questions * n_weights * 6  # qid x text_weight x metric
    assert {v.facets["text_weight"] for v in values} == set(rt.settings.retrieval.text_weights)
    run = store.get_run("night-1")
    assert (run.corpus, run.qa_set_version) == (CORPUS, first.qa_set_version)

    listed = _cli(home, "runs", "list", "--corpus", CORPUS, "--json")
    assert listed.exit_code == 0, listed.output
    runs = _strict(listed.stdout)
    assert [r["run_id"] for r in runs] == ["night-2", "night-1"]
    assert all(r["n_metrics"] > 0 and r["qa_set_version"] == first.qa_set_version for r in runs)

    # Evaluated but not finished (nothing published them): not compared without a flag.
    result = _cli(home, "runs", "compare", "night-1", "night-2", "--resamples", "200")
    assert result.exit_code == 2
    assert "run 'night-1' did not complete: still running (pid" in result.output
    flagged = _cli(
        home, "runs", "compare", "night-1", "night-2", "--json", "--allow-incomplete",
        "--resamples", "200",
    )  # fmt: skip
    assert flagged.exit_code == 0, flagged.output
    assert set(_strict(flagged.stdout)["incomplete"]) == {"night-1", "night-2"}
    assert "warning: run night-1 did not complete" in flagged.stderr
    for run_id in ("night-1", "night-2"):
        complete_run(rt, run_id)  # what publishing (or `eval retrieval --no-report`) does

    result = _cli(home, "runs", "compare", "night-1", "night-2", "--json", "--resamples", "500")
    assert result.exit_code == 0, result.output
    comparison = _strict(result.stdout)
    assert "incomplete" not in comparison
    rows = comparison["comparisons"]
    labels = {r["facets"]["label"] for r in rows}
    assert {"fact_single", "summary", "reasoning", "inclusive"} <= labels
    # every metric x facet cell of the scan is compared: 6 metrics x weights x (labels + inclusive)
    assert len(rows) == 6 * n_weights * len(labels)
    for row in rows:
        # identical runs: every difference is 0, so no interval and no MDE (never [0, 0])
        assert row["diff"] == 0.0 and row["ci_low"] is None and row["ci_high"] is None
        assert row["ci_method"] == "none" and row["mde"] is None and row["mde_power"] == 0.8
        assert "no spread" in row["undefined"]["ci_low"] and "spread" in row["undefined"]["mde"]
        assert row["p_value"] == 1.0 and row["p_holm"] == 1.0
        assert row["mean_a"] == row["mean_b"] and row["n"] > 0
    inclusive = [r for r in rows if r["facets"]["label"] == "inclusive"]
    assert all(r["n"] == n_questions for r in inclusive)

    human = _cli(home, "runs", "compare", "night-1", "night-2", "--resamples", "200")
    assert human.exit_code == 0, human.output
    assert "retrieval: recall@5" in human.stdout and "p_holm" in human.stdout
    assert "MDE" in human.stdout and "80% power" in human.stderr


def test_compare_refuses_different_qa_sets_and_missing_per_query_results(rt, home, tmp_path):
    evaluate_retrieval(rt, CORPUS, run_id="full")
    subset = tmp_path / "subset.jsonl"
    subset.write_text("\n".join(sample_qa_set().read_text().splitlines()[:20]) + "\n")
    evaluate_retrieval(rt, CORPUS, run_id="subset", qa_set=subset)
    complete_run(rt, "full")
    complete_run(rt, "subset")
    result = _cli(home, "runs", "compare", "full", "subset")
    assert result.exit_code == 2
    assert "different QA-set versions" in result.output

    full = RunStore(rt.engine).get_run("full")
    RunStore(rt.engine).start_run("bare", "evaluate_retrieval", full.params)
    complete_run(rt, "bare")
    result = _cli(home, "runs", "compare", "full", "bare")
    assert result.exit_code == 2 and "no per-query results" in result.output
    result = _cli(home, "runs", "compare", "full", "nope")
    assert result.exit_code == 2 and "no run 'nope'" in result.output


def test_undefined_values_leave_as_null_with_reasons(make_runtime, tmp_path, sample_corpus):
    rt = make_runtime(home=tmp_path / "undef", retrieval={"bootstrap_samples": 0})
    ingest(rt, str(sample_corpus), CORPUS)
    out = evaluate_retrieval(rt, CORPUS, run_id="no-ends", text_weights=[0.2, 0.5])
    for row in out.best:
        assert row.dense is None and row.lexical is None
        assert row.undefined["dense"] == UNDEFINED_REASONS["dense"]
        assert row.undefined["lexical"] == UNDEFINED_REASONS["lexical"]
        # without resampling, intervals that need none (Wilson, t) stay; the rest say why
        assert row.ci_method in {"wilson", "t", "none"}
        assert (row.ci_low is None) == (row.ci_method == "none")

    raw = rt.artifacts.get_bytes("runs/no-ends/metrics.json").decode()
    summary = _strict(raw)
    assert all(m["ci_method"] != "bca" for m in summary["metrics"])
    nulls = [m for m in summary["metrics"] if m["ci_low"] is None]
    assert nulls and all(m["undefined"]["ci_high"] for m in nulls)
    assert any(m["undefined"]["ci_high"] == NO_BOOTSTRAP for m in nulls)  # n >= 20, not 0/1
    assert summary == load_run_summary(rt, "no-ends").to_json()

    with rt.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT ci_low, ci_method, undefined FROM metrics_history WHERE run_id = 'no-ends'"
            )
        ).all()
    assert rows and all(method in {"wilson", "t", "none"} for _, method, _ in rows)
    assert any(
        low is None and (json.loads(u) if isinstance(u, str) else u)["ci_low"] == NO_BOOTSTRAP
        for low, _, u in rows
    )

    report = publish_retrieval_report(rt, "no-ends")
    html = Path(report.report_path).read_text()
    assert "nan%" not in html and ">nan<" not in html
    assert f"undefined ({UNDEFINED_REASONS['dense']})" in html
    assert "undefined (no bootstrap interval: bootstrap_samples is 0)" in html
    local = _strict((Path(report.report_path).parent / "metrics.json").read_text())
    assert local["best"][0]["undefined"]["lexical"] == UNDEFINED_REASONS["lexical"]
