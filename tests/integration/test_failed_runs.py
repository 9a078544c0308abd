"""A run whose model calls mostly failed is a failed run, and a killed run never poses as a real
one (issue 22, items 6 and 7), on the ingested sample corpus with scripted doubles
(``tests/scripted_llm.py``; not models): a dead endpoint (every call fails), a flaky one (a
quarter of the items fail, below the threshold) and one whose process exits mid-run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragtrail.artifact_keys import citations_key
from ragtrail.cli import app
from ragtrail.config import load_settings
from ragtrail.failures import EvaluationFailedError
from ragtrail.generate.judges import LABELLER
from ragtrail.paths import sample_corpus_dir, sample_qa_set
from ragtrail.pipeline.citations.step import evaluate_citations
from ragtrail.pipeline.citations.views import load_citations
from ragtrail.pipeline.generate import GenerationRequest, generate_testset
from ragtrail.pipeline.golden import register_golden_set
from ragtrail.pipeline.judges import calibrate_labeller, calibrate_missing, golden_items
from ragtrail.pipeline.night import INGEST, run_flow
from ragtrail.pipeline.run_io import complete_run
from ragtrail.pipeline.sufficiency.step import evaluate_sufficiency
from ragtrail.records import CandidateStatus
from ragtrail.runtime import Runtime
from ragtrail.storage.judge_store import JudgeStore
from ragtrail.storage.runs_store import RunStore
from ragtrail.testset.store import TestSetStore
from tests.scripted_llm import (
    DEAD_ERROR,
    DEAD_SPEC,
    EXIT_AFTER_ENV,
    EXITING_SPEC,
    FLAKY_SPEC,
    assume_calibrated,
    dead_backend,
    flaky_backend,
)
from tests.scripted_llm import SPEC as SCRIPTED_SPEC

CORPUS = "hb"
REPO = Path(__file__).resolve().parents[2]
ENV_VARS = ("RAGTRAIL_CONFIG", "RAGTRAIL_DATABASE_URL", "RAGTRAIL_ARTIFACT_URI")
SETTINGS = {
    "generation": {"llm": SCRIPTED_SPEC, "per_label": 1, "contexts_per_round": 4},
    "citations": {"max_items": 4, "scenario_items": 1, "bootstrap_samples": 100},
    "sufficiency": {"max_items": 4, "calibration_per_kind": 1, "bootstrap_samples": 100},
    "judges": {"labeller_items_per_label": 2, "bootstrap_samples": 100},
}


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:
    """A home with the sample corpus ingested and its QA set registered as a golden set, made
    once; each test works on a copy."""
    home = tmp_path_factory.mktemp("ingested") / "home"
    rt = Runtime(load_settings(home=home, **SETTINGS))
    rt.__dict__["embedder"] = embedder
    # a copy: on the shipped folder itself the ingest would register the sample set as
    # handbook-sample, and this test registers it under its own name
    source = shutil.copytree(sample_corpus_dir(), home.parent / "corpus")
    state = INGEST.resolve({"corpus": CORPUS, "source": str(source)}, [], "ingest-1")
    run_flow(rt, INGEST, state)
    register_golden_set(rt, sample_qa_set(), corpus=CORPUS, name="handbook")
    rt.close()
    return home


@pytest.fixture
def home(ingested: Path, tmp_path: Path) -> Path:
    target = tmp_path / "home"
    shutil.copytree(ingested, target)
    return target


@pytest.fixture
def rt(make_runtime, home: Path) -> Runtime:
    return make_runtime(home=home, **SETTINGS)


@pytest.fixture
def cli_env(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAGTRAIL_HOME", str(home))
    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM", SCRIPTED_SPEC)
    monkeypatch.setenv("RAGTRAIL_CITATIONS__SCENARIO_ITEMS", "1")
    monkeypatch.setenv("COLUMNS", "250")
    return home


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


# -- item 6: failed model calls -----------------------------------------------------------------


def test_citations_against_a_dead_endpoint_fail_the_run(rt: Runtime) -> None:
    rt.use_llm_backends({SCRIPTED_SPEC: dead_backend()})
    with pytest.raises(EvaluationFailedError) as failed:
        evaluate_citations(rt, CORPUS, run_id="dead.handbook", set_name="handbook")
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith("citation evaluation of run dead.handbook failed: 12 of 12 answers")
    assert f"(first error: {DEAD_ERROR})" in message
    assert message.endswith("(citations.max_failed_share=0.5)")
    run = RunStore(rt.engine).get_run("dead.handbook")
    assert run is not None and (run.status, run.status_detail) == ("failed", message)
    # nothing of the failed evaluation is stored as a measurement
    assert RunStore(rt.engine).query_results("dead.handbook") == []
    assert RunStore(rt.engine).metrics_history(evaluation="citations") == []
    assert not rt.artifacts.exists(citations_key("dead.handbook"))


def test_a_flaky_endpoint_below_the_threshold_is_a_real_run_with_its_failures(rt: Runtime) -> None:
    rt.use_llm_backends({SCRIPTED_SPEC: flaky_backend()})
    result = evaluate_citations(rt, CORPUS, run_id="flaky", scenarios=[])
    summary = load_citations(rt, "flaky")
    assert summary is not None and result.citations_uri
    counts = summary.mixture.counts
    assert (counts.answers_failed, counts.answers_ok) == (3, 9)  # one in four, counted
    assert summary.mixture.failed == 3
    complete_run(rt, "flaky")
    assert RunStore(rt.engine).get_run("flaky").status == "success"  # type: ignore[union-attr]
    # the same answers with a stricter threshold: now a failed run
    strict = Runtime(
        load_settings(home=rt.settings.home, **{**SETTINGS, "citations": {"max_failed_share": 0.2}})
    )
    strict.__dict__["embedder"] = rt.embedder
    # another model id: the answers cached by the first run are not reused
    strict.use_llm_backends({SCRIPTED_SPEC: flaky_backend("scripted-flaky-v2")})
    try:
        with pytest.raises(EvaluationFailedError, match=r"3 of 12 answers .*max_failed_share=0\.2"):
            evaluate_citations(strict, CORPUS, run_id="strict", scenarios=[])
    finally:
        strict.close()


def test_eval_citations_cli_exits_3_with_one_line(cli_env: Path, monkeypatch) -> None:
    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM", DEAD_SPEC)
    out = CliRunner().invoke(app, ["eval", "citations", "--corpus", CORPUS, "--run-id", "c1"])
    assert out.exit_code == 3, out.output
    (line,) = _errors(out.output)
    assert "12 of 12 answers of the relevance mixtures failed" in line
    assert "Traceback" not in out.output
    listed = CliRunner().invoke(app, ["runs", "list", "--corpus", CORPUS, "--json"])
    (run,) = json.loads(listed.stdout)
    assert (run["run_id"], run["status"]) == ("c1", "failed")
    assert run["status_detail"] == line.removeprefix("error: ")
    # below the threshold the command succeeds and its run is complete
    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM", FLAKY_SPEC)
    out = CliRunner().invoke(
        app, ["eval", "citations", "--corpus", CORPUS, "--run-id", "c2", "--scenario", "none"]
    )
    assert out.exit_code == 0, out.output
    assert "3 failed" in out.output
    assert RunStore(_engine(cli_env)).get_run("c2").status == "success"  # type: ignore[union-attr]


def _engine(home: Path):  # type: ignore[no-untyped-def]
    return Runtime(load_settings(home=home)).engine


def test_sufficiency_against_a_dead_endpoint_fails_the_run(rt: Runtime) -> None:
    rt.use_llm_backends({SCRIPTED_SPEC: dead_backend()})
    with pytest.raises(EvaluationFailedError) as failed:
        evaluate_sufficiency(
            rt, CORPUS, run_id="dead-1", raters=["sufficiency.llm"], selective=False
        )
    # its calibration failed as well (not stored: it stays uncalibrated), so it is primary
    assert "8 of 8 verdicts of sufficiency.llm failed" in str(failed.value)  # 4 x 2 contexts
    assert "sufficiency.max_failed_share=0.5" in str(failed.value)
    assert JudgeStore(rt.engine).history("sufficiency.llm") == []
    # a model-free rater stratifies: then the answers are what failed
    with pytest.raises(EvaluationFailedError, match="failed: 12 of 12 answers failed"):
        evaluate_sufficiency(
            rt, CORPUS, run_id="dead-2", raters=["sufficiency.contains_answer"], selective=False
        )
    for run_id in ("dead-1", "dead-2"):
        run = RunStore(rt.engine).get_run(run_id)
        assert run is not None and run.status == "failed"
        assert RunStore(rt.engine).query_results(run_id) == []


def test_generation_against_a_dead_endpoint_makes_no_version(rt: Runtime) -> None:
    rt.use_llm_backends({SCRIPTED_SPEC: dead_backend()})
    assume_calibrated(rt)
    request = GenerationRequest(corpus=CORPUS, run_id="gen-dead", seed=7)
    with pytest.raises(EvaluationFailedError) as failed:
        generate_testset(rt, request)
    assert "test-set generation of run gen-dead failed:" in str(failed.value)
    assert "(first error: facts_failed:backend_error)" in str(failed.value)
    store = TestSetStore(rt.engine)
    assert store.latest_version(CORPUS) is None
    kept = store.get_candidates(CORPUS, run_id="gen-dead")
    assert kept and {c.status for c in kept} == {CandidateStatus.FAILED}  # kept, with causes


def test_a_calibration_of_failed_verdicts_is_not_stored(rt: Runtime) -> None:
    rt.use_llm_backends({SCRIPTED_SPEC: dead_backend()})
    items, _ = golden_items(rt, CORPUS)
    with pytest.raises(EvaluationFailedError, match=r"calibration of labeller@\S+ failed: 8 of 8"):
        calibrate_labeller(rt, CORPUS, items)
    assert JudgeStore(rt.engine).history(LABELLER) == []
    report = calibrate_missing(rt, CORPUS)  # the nightly step: not calibrated, it advises
    assert report[LABELLER]["status"] == "not calibrated"
    assert "judges.max_failed_share" in str(report[LABELLER]["reason"])


# -- item 7: a killed run -----------------------------------------------------------------------


def _subprocess_env(home: Path) -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "include"), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    return {**env, "RAGTRAIL_HOME": str(home), "PYTHONPATH": path}


def test_a_killed_run_is_abandoned_and_never_compared_or_checked(cli_env: Path) -> None:
    cli = CliRunner()
    args = ["eval", "citations", "--corpus", CORPUS, "--items", "2"]
    done = cli.invoke(app, [*args, "--scenario", "none", "--run-id", "before"])
    assert done.exit_code == 0, done.output

    env = {
        **_subprocess_env(cli_env),
        "RAGTRAIL_GENERATION__LLM": EXITING_SPEC,
        EXIT_AFTER_ENV: "6",  # after the 6 mixture answers (recorded), in the scenario
    }
    killed = subprocess.run(
        [sys.executable, "-m", "ragtrail.cli", *args, "--scenario", "G", "--run-id", "killed"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == 9, killed.stderr[-3000:]

    listed = cli.invoke(app, ["runs", "list", "--corpus", CORPUS, "--json"])
    assert listed.exit_code == 0, listed.output
    runs = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert runs["before"]["status"] == "success"
    assert runs["killed"]["status"] == "abandoned"
    assert "is gone" in runs["killed"]["status_detail"]
    table = cli.invoke(app, ["runs", "list", "--corpus", CORPUS])
    assert "killed: abandoned: its process (pid" in table.output

    compared = cli.invoke(app, ["runs", "compare", "before", "killed"])
    assert compared.exit_code == 2
    (line,) = _errors(compared.output)
    assert "run 'killed' did not complete: abandoned (its process (pid" in line
    flagged = cli.invoke(app, ["runs", "compare", "before", "killed", "--allow-incomplete"])
    assert flagged.exit_code == 0, flagged.output
    assert "warning: run killed did not complete: abandoned" in flagged.output

    for drift_args in (["--run", "killed"], []):  # the newest run is the killed one
        checked = cli.invoke(app, ["drift", "check", "--corpus", CORPUS, *drift_args])
        assert checked.exit_code == 2, checked.output
        (line,) = _errors(checked.output)
        assert "run 'killed' abandoned (its process" in line
        assert "drift is checked on complete runs only" in line
    pinned = cli.invoke(app, ["runs", "pin", "killed"])
    assert pinned.exit_code == 2 and "did not complete: abandoned" in pinned.output

    # the run may be done again: its steps take it back, and it completes
    again = cli.invoke(app, [*args, "--scenario", "none", "--run-id", "killed"])
    assert again.exit_code == 0, again.output
    assert RunStore(_engine(cli_env)).get_run("killed").status == "success"  # type: ignore[union-attr]
