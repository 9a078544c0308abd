"""``ragtrail models train evidence`` in a subprocess: split, self-sampling from the extractor in
service (the seed-dependent scripted double ``weak_extractor_backend``, not a model), the three
experts, LPO on a tiny random Llama built from a config, registration, the gate; then the
registry lists the version and ``models show`` has its lineage and gate decision."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ragtrail.paths import sample_corpus_dir, sample_qa_set
from tests.scripted_llm import WEAK_EXTRACTOR_SPEC
from tests.tiny_models import build_tiny_llama

CLI = [sys.executable, "-m", "ragtrail.cli"]


def run(args: list[str], env: dict[str, str], expect: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True)
    assert done.returncode == expect, done.stderr[-3000:]
    return done


def test_train_register_and_gate_from_the_command_line(tmp_path: Path) -> None:
    texts = [p.read_text(encoding="utf-8") for p in sorted(sample_corpus_dir().rglob("*.md"))]
    tiny = build_tiny_llama(tmp_path / "tiny", texts, vocab_size=600, max_positions=8192)
    env = {
        **os.environ,
        "RAGTRAIL_HOME": str(tmp_path / "home"),
        "RAGTRAIL_GENERATION__LLM": WEAK_EXTRACTOR_SPEC,
        "RAGTRAIL_EVIDENCE__MAX_NEW_TOKENS": "16",
        "RAGTRAIL_EVIDENCE_TRAINING__MAX_TRAIN_PROMPTS": "3",
        "RAGTRAIL_EVIDENCE_TRAINING__MAX_EVAL_ITEMS": "5",
        "RAGTRAIL_EVIDENCE_TRAINING__PAIRS_PER_BATCH": "2",
        "RAGTRAIL_EVIDENCE_TRAINING__GRAD_ACCUM": "1",
        "RAGTRAIL_EVIDENCE_TRAINING__MAX_FAILED_SHARE": "1.0",  # the tiny model writes nothing
        "RAGTRAIL_PROMOTION__N_RESAMPLES": "200",
    }
    run(["ingest", str(sample_corpus_dir()), "--corpus", "hb", "--json"], env)
    run(["qaset", "add", str(sample_qa_set()), "--corpus", "hb", "--name", "handbook"], env)
    args = ["models", "train", "evidence", "--corpus", "hb", "--samples", "3", "--steps", "1"]
    out = json.loads(run([*args, "--base-model", f"hf:{tiny}", "--json"], env).stdout)
    assert out["split"]["train_prompts"] > 0 and out["split"]["eval_items"] > 0
    trained, gate = out["trained"], out["gate"]
    assert trained["version"] == 1 and trained["lpo_steps"] == 1 and not trained["reused"]
    assert abs(sum(trained["expert_weights"].values()) - 1.0) < 1e-9
    assert gate["version"] == 1 and gate["reason"]
    assert gate["current"]["n"] == gate["challenger"]["n"] == 5

    shown = json.loads(run(["models", "show", "ragtrail-extractor", "1", "--json"], env).stdout)
    text = json.dumps(shown)
    assert out["run_id"] in text and "preferences" in text  # lineage with the run and the data
    listed = json.loads(run(["models", "list", "--json"], env).stdout)
    (model,) = [m for m in listed if m["name"] == "ragtrail-extractor"]
    alias = "champion" if gate["promoted"] else "challenger"
    assert model["aliases"].get(alias) == 1

    # a bad option value is refused before anything runs (exit code 2)
    run([*args[:4], "--samples", "1"], env, expect=2)
