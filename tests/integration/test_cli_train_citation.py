"""``ragtrail models train citation`` in a subprocess: the split of the corpus's golden set, SFT
targets from the scripted teacher (a test double, not a model), SFT and PPO on a tiny random
Llama built from a config, registration and the gate; the registry then shows the version with
its RL stage's algorithm and per-iteration history in the lineage. The same run again trains
nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ragtrail.paths import sample_corpus_dir, sample_qa_set
from tests.integration.test_cli_train_evidence import run
from tests.scripted_llm import SPEC as SCRIPTED_SPEC
from tests.tiny_models import build_tiny_llama


def test_train_citation_by_hand_registers_and_gates(tmp_path: Path) -> None:
    texts = [p.read_text(encoding="utf-8") for p in sorted(sample_corpus_dir().rglob("*.md"))]
    texts.append('{"sentences": [{"text": "A fact.", "citations": [1, 2]}]} [1] [2] [3]')
    tiny = build_tiny_llama(tmp_path / "tiny", texts, vocab_size=900, max_positions=16384)
    env = {
        **os.environ,
        "COLUMNS": "250",  # rich wraps at the terminal width
        "RAGTRAIL_HOME": str(tmp_path / "home"),
        "RAGTRAIL_GENERATION__LLM": SCRIPTED_SPEC,
        "RAGTRAIL_MODELS__ANSWERER": f"hf:{tiny}",
        "RAGTRAIL_CITATIONS__MIXTURE_TYPES": '["all"]',
        "RAGTRAIL_CITATIONS__MAX_NEW_TOKENS": "16",
        "RAGTRAIL_CITATIONS__BASELINE_REPEATS": "20",
        "RAGTRAIL_CITATIONS__BOOTSTRAP_SAMPLES": "100",
        "RAGTRAIL_PROMOTION__N_RESAMPLES": "200",
        "RAGTRAIL_CITATION_TRAINING__TEACHER": SCRIPTED_SPEC,
        "RAGTRAIL_CITATION_TRAINING__MAX_TRAIN_PROMPTS": "3",
        "RAGTRAIL_CITATION_TRAINING__LORA_R": "4",
        "RAGTRAIL_CITATION_TRAINING__LORA_ALPHA": "8",
        "RAGTRAIL_CITATION_TRAINING__NUM_GENERATIONS": "2",
        "RAGTRAIL_CITATION_TRAINING__PPO_EPOCHS": "1",
        "RAGTRAIL_CITATION_TRAINING__MAX_COMPLETION_LENGTH": "8",
        "RAGTRAIL_CITATION_TRAINING__TARGET_MAX_NEW_TOKENS": "24",
        "RAGTRAIL_CITATION_TRAINING__REWARD_THRESHOLD": "0.0",
        "RAGTRAIL_CITATION_TRAINING__RL_PATIENCE": "5",  # gibberish earns 0: keep the adapter
        "RAGTRAIL_CITATION_TRAINING__MAX_LENGTH": "16000",
        "RAGTRAIL_CITATION_TRAINING__MAX_FAILED_SHARE": "1.0",  # the tiny model writes nothing
    }
    run(["ingest", str(sample_corpus_dir()), "--corpus", "hb", "--json"], env)
    run(["qaset", "add", str(sample_qa_set()), "--corpus", "hb", "--name", "handbook"], env)
    args = ["models", "train", "citation", "--corpus", "hb", "--sft-steps", "1", "--rl-steps", "2"]
    out = json.loads(run([*args, "--run-id", "by-hand-1", "--json"], env).stdout)
    assert out["run_id"] == "by-hand-1"
    assert out["split"]["train_prompts"] > 0 and out["split"]["eval_mixtures"] > 0
    trained, gate = out["trained"], out["gate"]
    assert trained["version"] == 1 and not trained["reused"]
    assert trained["sft_steps"] == 1 and trained["rl_steps"] == 2
    assert trained["rl_algorithm"] == "ppo" and "rl_note" not in trained
    assert gate["version"] == 1 and gate["reason"]

    shown = json.loads(run(["models", "show", "ragtrail-citation", "1", "--json"], env).stdout)
    text = json.dumps(shown)
    assert "by-hand-1" in text and "ragtrail PPO loop" in text and "clip_fraction" in text
    listed = json.loads(run(["models", "list", "--json"], env).stdout)
    (model,) = [m for m in listed if m["name"] == "ragtrail-citation"]
    alias = "champion" if gate["promoted"] else "challenger"
    assert model["aliases"].get(alias) == 1

    # the same run again (a retried task, say) reuses its split and version: nothing is trained
    # again, and the gate decides once more; people's output goes to stderr
    again = run([*args, "--run-id", "by-hand-1"], env).stderr
    assert "ragtrail-citation v1 was already trained by run by-hand-1" in again
    assert "gate:" in again
    versions = json.loads(run(["models", "list", "ragtrail-citation", "--json"], env).stdout)
    assert [v["version"] for v in versions] == [1]

    # a bad option value is refused before anything runs (exit code 2)
    run([*args[:5], "--algorithm", "ppo2"], env, expect=2)
