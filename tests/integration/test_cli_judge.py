"""``ragtrail judge calibrate`` and ``ragtrail judge list`` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ragtrail.paths import sample_corpus_dir, sample_qa_set
from tests.scripted_llm import SPEC

CLI = [sys.executable, "-m", "ragtrail.cli"]


def run(args: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=env, check=check, capture_output=True, text=True)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    env = {
        **os.environ,
        "RAGTRAIL_HOME": str(tmp_path / "home"),
        "RAGTRAIL_GENERATION__LLM": SPEC,
        "RAGTRAIL_JUDGES__BOOTSTRAP_SAMPLES": "200",
    }
    run(["ingest", str(sample_corpus_dir()), "--corpus", "handbook", "--json"], env)
    return env


def test_calibrate_store_and_list(env, tmp_path):
    reference = str(sample_qa_set())
    args = ["judge", "calibrate", "labeller", "--reference", reference, "--per-label", "2"]
    out = run([*args, "--json"], env)
    view = json.loads(out.stdout)
    assert view["judge"] == "labeller" and view["version"].startswith("j-")
    metrics = view["metrics"]
    assert metrics["n"] == 8 and sum(sum(r.values()) for r in metrics["confusion"].values()) == 8
    decision = view["decision"]
    assert decision["mode"] == "advise" and decision["n"] == 8  # the scripted kind-reader is weak

    pairs = tmp_path / "pairs.jsonl"
    rows = [
        ("Staff get 27 days of annual leave.", "Staff get 27 days of leave.", "supported"),
        ("Staff get 27 days of annual leave.", "The office closes at noon.", "not_supported"),
        ("Passwords need 20 characters.", "Passwords need twenty characters.", "supported"),
        ("Passwords need 20 characters.", "Laptops are replaced yearly.", "not_supported"),
    ]
    pairs.write_text(
        "".join(
            json.dumps({"premise": p, "hypothesis": h, "label": lb}) + "\n" for p, h, lb in rows
        )
    )
    view = json.loads(
        run(["judge", "calibrate", "entailment", "--reference", str(pairs), "--json"], env).stdout
    )
    assert view["judge"] == "entailment.embedding" and view["metrics"]["n"] == 4
    assert view["metrics"]["accuracy"]["value"] == pytest.approx(1.0)

    listed = json.loads(run(["judge", "list", "--json"], env).stdout)
    names = [row["spec"]["name"] for row in listed]
    assert names[0] == "labeller" and len(names) == 10 and names[-1] == "entailment.embedding"
    assert listed[-1]["spec"]["approximate"] is True
    labeller = listed[0]["decision"]
    assert labeller["n"] == 8 and labeller["mode"] == "advise"


def test_nli_judge_without_a_model_is_a_clear_error(env):
    result = run(
        ["judge", "calibrate", "entailment.nli", "--reference", str(sample_qa_set())],
        env,
        check=False,
    )
    assert result.returncode == 2 and "no NLI model is configured" in result.stderr


def test_train_a_judge_from_a_filled_queue_and_ask_for_a_queue(tmp_path):
    from tests.integration.test_judge_training_pipeline import filled_queue
    from tests.tiny_models import build_tiny_bert_encoder
    from tests.unit.train.test_judge_training import toy_pairs

    env = {**os.environ, "RAGTRAIL_HOME": str(tmp_path / "home")}
    base = build_tiny_bert_encoder(tmp_path / "tiny-bert")
    labels = filled_queue(tmp_path / "labels.csv", toy_pairs(60))
    args = ["judge", "train", "entailment", "--reference", str(labels), "--base", str(base)]
    args += ["--epochs", "6", "--learning-rate", "0.005", "--max-length", "32", "--batch-size", "8"]
    report = json.loads(run([*args, "--json"], env).stdout)
    assert report["registered"]["model"] == "ragtrail-judge-entailment"
    assert report["registered"]["alias"] == "champion"
    assert report["gate"]["mode"] == "gate", report["gate"]["reason"]
    human = run(args, env)  # the same labels again: a second version, told apart from the first
    assert "ragtrail-judge-entailment v2 is now challenger" in human.stderr
    assert "kappa:" in human.stderr and "balanced_accuracy:" in human.stderr

    refused = run(["judge", "label-queue", "entailment", "--corpus", "empty"], env, check=False)
    assert refused.returncode == 2
    assert "has no generated test set yet" in refused.stderr
