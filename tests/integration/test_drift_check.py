"""`ragtrail drift check` on real retrieval runs: a degraded corpus fires, a restored one does not.

The sample corpus is ingested and evaluated (night 1, the first run: the baseline); then the
documents that the sample questions cite most are removed from the source and the corpus is
ingested and evaluated again (night 2): those questions can no longer be answered from the index,
Recall@5 falls, and the check fires with the removal recorded as corpus drift. Restoring the
documents (night 3) gives the baseline's numbers back: no drift.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragtrail.cli import app
from ragtrail.paths import sample_qa_set
from ragtrail.pipeline.ingest import ingest
from ragtrail.pipeline.retrieval import evaluate_retrieval
from ragtrail.storage.drift_store import DriftStore
from ragtrail.storage.runs_store import RunStore

CORPUS = "hb"


def _strict(raw: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-strict JSON constant {name}")

    return json.loads(raw, parse_constant=refuse)


def _cli(home: Path, *args: str):
    return CliRunner().invoke(app, list(args), env={"RAGTRAIL_HOME": str(home)})


def _most_cited_documents(n_questions: int = 3) -> list[str]:
    """Documents that at least ``n_questions`` sample questions need."""
    counts: Counter[str] = Counter()
    for line in sample_qa_set().read_text().splitlines():
        counts.update(json.loads(line).get("ground_doc_ids") or [])
    return [doc for doc, n in counts.items() if n >= n_questions]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def _night(rt, source: Path, run_id: str) -> None:
    ingest(rt, str(source), CORPUS)
    evaluate_retrieval(rt, CORPUS, run_id=run_id)
    RunStore(rt.engine).finish_run(run_id, "success")  # what publishing does when GX passes


def test_a_degraded_corpus_fires_and_a_restored_one_does_not(
    make_runtime, home, sample_corpus, tmp_path
):
    rt = make_runtime(home=home, retrieval={"bootstrap_samples": 200})
    source = tmp_path / "source"
    shutil.copytree(sample_corpus, source)
    _night(rt, source, "night-1")

    first = _cli(home, "drift", "check", "--corpus", CORPUS, "--json")
    assert first.exit_code == 0, first.output
    (decision,) = _strict(first.stdout)
    assert (decision["run_id"], decision["status"], decision["fired"]) == (
        "night-1",
        "no_baseline",
        False,
    )

    removed = _most_cited_documents()
    assert len(removed) >= 5
    for doc in removed:
        (source / doc).unlink()
    _night(rt, source, "night-2")
    result = _cli(home, "drift", "check", "--corpus", CORPUS, "--run", "night-2", "--json")
    assert result.exit_code == 0, result.output  # exit 0 whatever the decision
    (decision,) = _strict(result.stdout)
    assert decision["fired"] is True
    assert (decision["baseline_run_id"], decision["baseline_kind"]) == ("night-1", "first")
    evidence = decision["evidence"]
    drifted = [r for r in evidence["rows"] if r["drifted"]]
    assert drifted and {r["evaluation"] for r in drifted} == {"retrieval"}
    assert {r["metric"] for r in evidence["rows"]} == {"recall@5"}
    inclusive = [r for r in drifted if r["facets"]["label"] == "inclusive"]
    assert inclusive and all(r["diff"] < -0.05 and r["p_holm"] < 0.05 for r in inclusive)
    # every tested cell says what it could have detected, and the n a drop of 0.05 needs
    tested = [r for r in evidence["rows"] if r["tested"] and r.get("mde") is not None]
    assert tested and all(r["needed_n"] >= 2 and r["ci_method"] in {"t", "bca"} for r in tested)
    drift = evidence["corpus_drift"]
    assert drift["removed"] == len(removed) and drift["added"] == drift["updated"] == 0
    assert drift["removed_share"] == pytest.approx(len(removed) / drift["n_baseline"])
    assert evidence["qa_set"]["kind"] == "file" and evidence["qa_set"]["retired"] is None

    again = _cli(home, "drift", "check", "--corpus", CORPUS, "--run", "night-2", "--json")
    assert _strict(again.stdout)[0]["decision_id"] == decision["decision_id"]
    assert len(DriftStore(rt.engine).decisions(run_id="night-2")) == 1  # replaced, not added
    gate = _cli(home, "drift", "check", "--corpus", CORPUS, "--run", "night-2", "--fail-on-drift")
    assert gate.exit_code == 1
    assert "DRIFT" in gate.output and "removed" in gate.output
    assert "MDE" in gate.stdout

    shutil.copytree(sample_corpus, source, dirs_exist_ok=True)
    _night(rt, source, "night-3")
    restored = _cli(home, "drift", "check", "--corpus", CORPUS, "--run", "night-3", "--json")
    (decision,) = _strict(restored.stdout)
    assert decision["baseline_run_id"] == "night-1" and decision["fired"] is False
    assert all(r["diff"] == 0.0 for r in decision["evidence"]["rows"] if r["n"])
    # no drift, and the check says why that proves little here: nothing varied, MDE unknown
    human = _cli(home, "drift", "check", "--corpus", CORPUS, "--run", "night-3")
    assert "smallest detectable drop unknown" in human.stderr

    # Pinning night 2 makes it the baseline: night 3 is then an improvement, still no drift.
    pinned = _cli(home, "runs", "pin", "night-2", "--note", "degraded on purpose", "--json")
    assert pinned.exit_code == 0, pinned.output
    assert _strict(pinned.stdout)["kind"] == "pinned"
    listed = _strict(_cli(home, "runs", "baselines", "--corpus", CORPUS, "--json").stdout)
    assert [(b["run_id"], b["kind"]) for b in listed] == [("night-2", "pinned")]
    against_pin = _cli(home, "drift", "check", "--corpus", CORPUS, "--run", "night-3", "--json")
    (decision,) = _strict(against_pin.stdout)
    assert (decision["baseline_run_id"], decision["baseline_kind"]) == ("night-2", "pinned")
    assert not decision["fired"]
    assert any(r["direction"] == "better" for r in decision["evidence"]["rows"])
    history = _strict(_cli(home, "drift", "list", "--corpus", CORPUS, "--json").stdout)
    assert len(history) == 4  # night 1 alone, 2 vs 1, 3 vs 1, 3 vs 2
    unpinned = _cli(home, "runs", "unpin", "night-2")
    assert unpinned.exit_code == 0 and "unpinned night-2" in unpinned.output
    bad = _cli(home, "runs", "pin", "no-such-run")
    assert bad.exit_code == 2 and "no run 'no-such-run'" in bad.output
