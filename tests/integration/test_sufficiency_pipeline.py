"""Sufficiency, C/A/H and selective generation as a pipeline step and as ``ragtrail eval
sufficiency|selective``, on the ingested sample corpus with its golden set registered, the scripted
doubles (``tests/unit/generate``; not models) and the real embedder, index and embedding judge.

What the doubles do, and so what the step must report: ``answer.short`` answers with the first
sentence of the first passage (abstains without passages); ``judge.correctness`` says correct when
every content word of a gold answer is in the candidate; ``confidence.p_true`` says true when the
answer shares a word with the first passage; ``confidence.p_correct`` gives 0.8 with passages.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragtrail.cli import app
from ragtrail.config import DEFAULT_SUFFICIENCY_RATERS, SUFFICIENCY_RATERS
from ragtrail.paths import sample_corpus_dir, sample_qa_set
from ragtrail.pipeline.golden import register_golden_set
from ragtrail.pipeline.night import INGEST, run_flow
from ragtrail.pipeline.sufficiency.step import evaluate_sufficiency
from ragtrail.pipeline.sufficiency.views import load_sufficiency, metrics_frame, queries_frame
from ragtrail.pipeline.tasks import announce_sufficiency, evaluate_set_sufficiency
from ragtrail.quality.runner import QualityRunner
from ragtrail.quality.suites import (
    prepare_citation_metrics,
    sufficiency_metrics_suite,
    sufficiency_queries_suite,
)
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.sufficiency_summary import QueryRow
from ragtrail.text import content_words
from tests.scripted_llm import SPEC as SCRIPTED_SPEC
from tests.scripted_llm import as_on_an_endpoint

CORPUS = "hb"
ENV_VARS = ("RAGTRAIL_CONFIG", "RAGTRAIL_DATABASE_URL", "RAGTRAIL_ARTIFACT_URI")


@pytest.fixture
def rt(make_runtime, tmp_path):
    rt = make_runtime(
        generation={"llm": SCRIPTED_SPEC},
        sufficiency={"max_items": 6, "calibration_per_kind": 2, "bootstrap_samples": 200},
        selective={"search_iterations": 10, "bootstrap_samples": 200},
    )
    # a copy: on the shipped folder itself the ingest would register the sample set as
    # handbook-sample, and this test registers it under its own name
    source = shutil.copytree(sample_corpus_dir(), tmp_path / "corpus")
    state = INGEST.resolve({"corpus": CORPUS, "source": str(source)}, [], "ingest-1")
    run_flow(rt, INGEST, state)
    register_golden_set(rt, sample_qa_set(), corpus=CORPUS, name="handbook")
    return rt


def _without_status(value: object) -> object:
    """``value`` without the calibration ``status`` keys (calibrated first, cached on a rerun)."""
    if isinstance(value, dict):
        return {k: _without_status(v) for k, v in value.items() if k != "status"}
    if isinstance(value, list):
        return [_without_status(v) for v in value]
    return value


def _expected_outcome(query: QueryRow) -> str:
    """The outcome the doubles imply, computed apart from the classifier."""
    if not query.passages:
        return "abstain"
    if query.label == "unanswerable":
        return "hallucinate"
    gold = content_words(query.gold)
    return "correct" if gold and gold <= content_words(query.answer) else "hallucinate"


def test_one_set_rated_answered_and_scored_then_a_rerun_makes_no_model_call(rt) -> None:
    result = evaluate_sufficiency(rt, CORPUS, run_id="n1.handbook", set_name="handbook")
    json.dumps(result.to_json(), allow_nan=False)
    assert set(result.hallucination) == {"retrieved", "gold", "none"}
    summary = load_sufficiency(rt, "n1.handbook")
    assert summary is not None
    assert summary.items == 6 and summary.settings == ["retrieved", "gold", "none"]
    assert result.sufficiency_uri.endswith("runs/n1.handbook/sufficiency.json")

    # every rater is named, calibrated on golden references, and rated every context
    assert [r.name for r in summary.raters] == list(DEFAULT_SUFFICIENCY_RATERS)
    for rater in summary.raters:
        assert rater.agreement.status == "calibrated", rater
        assert rater.agreement.mode in ("gate", "advise")
        assert {s: p.n for s, p in rater.per_setting.items()} == {"retrieved": 6, "gold": 6}
    entail = next(r for r in summary.raters if r.name == "sufficiency.entailment")
    assert entail.approximate  # the embedding fallback is no probability
    primary = summary.primary_rater
    assert primary.name in SUFFICIENCY_RATERS and primary.reason

    # one answer per question and setting; outcomes follow the doubles' rules
    queries = summary.queries
    assert len(queries) == 18
    for q in queries:
        if q.passages:
            first = re.split(r"(?<=[.!?])\s", q.passages[0].strip())[0][:150]
            assert q.answer == first.strip()
        assert q.outcome == _expected_outcome(q), q
        expected = "unrated" if q.setting == "none" else None
        if expected:
            assert q.sufficiency == expected
        else:
            assert q.ratings[primary.name] == q.sufficiency
    table = {(r.setting, r.sufficiency, r.label): r for r in summary.cah.table}
    none_all = table[("none", "all", "all")]
    assert none_all.abstain.value == 1.0 and none_all.n_scored == 6
    overall = table[("all", "all", "all")]
    for outcome in ("correct", "abstain", "hallucinate"):
        count = sum(q.outcome == outcome for q in queries)
        assert overall.counts[outcome] == count
    values = [r.value for r in (overall.correct, overall.abstain, overall.hallucinate)]
    assert None not in values and abs(sum(v for v in values if v is not None) - 1) < 1e-9

    # selective generation: confidence on every correct or hallucinated answer
    selective = summary.selective
    assert selective is not None
    scored = [q for q in queries if q.outcome in ("correct", "hallucinate")]
    assert selective.n_rows == len(scored)
    for q in scored:
        assert q.p_true == 1.0 and q.p_correct == 0.8
    assert selective.status in ("fitted", "undefined")
    if selective.status == "undefined":
        assert selective.reason
    assert rt.artifacts.exists("runs/n1.handbook/selective_policy.json")
    # the stored document reads back to the same record
    document = rt.artifacts.get_bytes("runs/n1.handbook/sufficiency.json")
    assert json.loads(document) == summary.to_json()

    stored = {v.evaluation for v in RunStore(rt.engine).query_results("n1.handbook")}
    assert stored == {"cah", "selective"}

    # the GX suites hold on the step's own outputs
    runner = QualityRunner(rt.settings.home / "gx")
    checked = [
        runner.validate("q", queries_frame(summary), sufficiency_queries_suite(summary.settings)),
        runner.validate(
            "m", prepare_citation_metrics(metrics_frame(summary)), sufficiency_metrics_suite()
        ),
    ]
    assert all(r.success for r in checked), [r.as_dict() for r in checked]

    calls = rt.llm_usage.totals().calls
    again = evaluate_sufficiency(rt, CORPUS, run_id="n1.handbook", set_name="handbook")
    assert rt.llm_usage.totals().calls == calls
    rerun = load_sufficiency(rt, "n1.handbook")
    assert rerun is not None
    assert again.hallucination == result.hallucination
    before, after = summary.to_json(), rerun.to_json()
    for key in ("raters", "cah", "selective", "queries", "primary_rater"):
        assert _without_status(after[key]) == _without_status(before[key]), key
    assert {r.agreement.status for r in rerun.raters} == {"cached"}

    announced = announce_sufficiency(
        rt,
        corpus=CORPUS,
        run_id="n1",
        sets=[
            {"name": "handbook", "kind": "golden", "qa_set": "golden:g", "run_id": "n1.handbook"},
            {"name": "x", "kind": "file", "qa_set": "qa.jsonl", "run_id": "none"},
        ],
        snapshot_id="s",
    )
    assert list(announced["event"]["sets"]) == ["handbook"]


def test_steps_run_side_by_side_on_an_endpoint_record_what_one_by_one_records(
    rt, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where every model is an endpoint, the raters and the answers run at once, then the
    correctness judge beside the confidence scores (of every answer a rule or the judge may
    score); the night records the same outcomes, ratings and policy as one step after another."""
    evaluate_sufficiency(rt, CORPUS, run_id="n1.handbook", set_name="handbook")
    one_by_one = load_sufficiency(rt, "n1.handbook")
    calls_since = as_on_an_endpoint(rt, monkeypatch)  # every call made again, on threads
    evaluate_sufficiency(rt, CORPUS, run_id="n2.handbook", set_name="handbook")
    assert calls_since() > 0
    side_by_side = load_sufficiency(rt, "n2.handbook")
    assert one_by_one is not None and side_by_side is not None
    before, after = one_by_one.to_json(), side_by_side.to_json()
    for doc in (before, after):
        doc["selective"].pop("policy_uri")  # under each run's own id
    for key in ("raters", "cah", "selective", "queries", "primary_rater"):
        assert _without_status(after[key]) == _without_status(before[key]), key
    assert set(side_by_side.seconds) == {
        "contexts",
        "calibration",
        "raters and answers",
        "correctness and confidence",
        "selective",
    }


def test_the_nightly_step_rates_golden_sets_only_by_default(rt) -> None:
    entry = {"name": "generated", "kind": "generated", "qa_set": "testset:x", "run_id": "n2.g"}
    skipped = evaluate_set_sufficiency(rt, corpus=CORPUS, qa_set_entry=entry)
    assert skipped == {"name": "generated", "skipped": "sufficiency.qa_sets is 'golden'"}


def test_eval_sufficiency_and_selective_cli(
    rt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "cli-home"
    shutil.copytree(rt.settings.home, home)
    monkeypatch.setenv("RAGTRAIL_HOME", str(home))
    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM", SCRIPTED_SPEC)
    monkeypatch.setenv("RAGTRAIL_SELECTIVE__SEARCH_ITERATIONS", "5")
    monkeypatch.setenv("COLUMNS", "250")
    cli = CliRunner()
    args = ["--corpus", CORPUS, "--items", "4", "--rater", "sufficiency.contains_answer"]
    out = cli.invoke(app, ["eval", "sufficiency", *args, "--run-id", "s1", "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert [r["name"] for r in summary["raters"]] == ["sufficiency.contains_answer"]
    assert summary["undefined"]["selective"] == "selective generation was not requested"
    table = cli.invoke(app, ["eval", "selective", *args, "--run-id", "s2"])
    assert table.exit_code == 0, table.output
    assert "Correct / Abstain / Hallucinate" in table.output
    assert "sufficiency.contains_answer *" in table.output
    assert re.search(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", table.output)  # value [CI]
    assert "selective generation: no policy" in table.output or "area under" in table.output
