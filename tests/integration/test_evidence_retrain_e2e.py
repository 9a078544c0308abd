"""The extractor's retraining loop end to end: degraded evidence metrics fire drift, the drift
event names the extractor, ``retrain_models`` trains it under ``dag.test()`` with the real task
code, the gate decides, the registry shows it.

Night 1 evaluates the sample corpus's evidence with the scripted extractor that copies the
sentence sharing most words with the question; night 2 with one that copies the wrong sentence
(``tests.scripted_llm.weak_extractor_backend``; test doubles, not models). The answerer's
correctness from the evidence falls, the drift check fires on the ``evidence`` evaluation and
``announce_drift`` names the extractor. ``retrain_models`` then runs with the event's state: the
split by question and document, self-sampling from the extractor in service (the weak double,
one sentence per seed), the three experts (the embedding entailment judge, the session's tiny
scorer LM, the real embedder), CoV weights, LPO on a tiny random Llama built from a config
(the base model), registration in MLflow and the gate on the held-out questions. A random
2-layer model writes no usable evidence, so whichever way the gate decides, the registry must
show that decision, its reason and the matching alias.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dags import _airflow_env as ENV
from tests.scripted_llm import SPEC as SCRIPTED_SPEC
from tests.scripted_llm import WEAK_EXTRACTOR_SPEC
from tests.tiny_models import build_tiny_llama

ENV.ensure_airflow_env()

pytestmark = pytest.mark.airflow

CORPUS = "hb"
MODEL = "ragtrail-extractor"


@pytest.fixture(scope="module")
def retrain_dag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    ENV.migrate_db()
    ENV.create_pools()
    bag = DagBag(dag_folder=str(ENV.DAGS_DIR))
    assert bag.import_errors == {}
    dag = bag.dags["retrain_models"]
    for task in dag.tasks:
        task.retries = 0
    return dag


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample_corpus: Path) -> tuple[Path, Path]:
    texts = [p.read_text(encoding="utf-8") for p in sorted(sample_corpus.rglob("*.md"))]
    texts.append('{"evidence": "A fact."} 0123456789')
    tiny = build_tiny_llama(tmp_path / "tiny", texts, vocab_size=900, max_positions=16384)
    for var in ("RAGTRAIL_CONFIG", "RAGTRAIL_DATABASE_URL", "RAGTRAIL_ARTIFACT_URI"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "ragtrail"
    settings = {
        "HOME": str(home),
        "INDEX_BACKEND": "embedded",
        "GENERATION__LLM": SCRIPTED_SPEC,
        "EVIDENCE__MAX_ITEMS": "0",
        "EVIDENCE__NOISE_RATIOS": "[0]",
        "EVIDENCE__MAX_NEW_TOKENS": "16",
        "EVIDENCE__BOOTSTRAP_SAMPLES": "100",
        "DRIFT__N_RESAMPLES": "2000",
        "PROMOTION__N_RESAMPLES": "200",
        "EVIDENCE_TRAINING__MAX_TRAIN_PROMPTS": "4",
        "EVIDENCE_TRAINING__SAMPLES": "4",
        "EVIDENCE_TRAINING__MAX_STEPS": "2",
        "EVIDENCE_TRAINING__PAIRS_PER_BATCH": "4",
        "EVIDENCE_TRAINING__GRAD_ACCUM": "1",
        "EVIDENCE_TRAINING__LORA_R": "4",
        "EVIDENCE_TRAINING__LORA_ALPHA": "8",
        "EVIDENCE_TRAINING__MAX_EVAL_ITEMS": "6",
        # The tiny model writes nothing usable in 16 tokens (every gate extraction is cut off):
        # this test is about the plumbing, so failed extractions may not fail the gate here.
        "EVIDENCE_TRAINING__MAX_FAILED_SHARE": "1.0",
    }
    for key, value in settings.items():
        monkeypatch.setenv(f"RAGTRAIL_{key}", value)
    monkeypatch.chdir(tmp_path)
    return home, tiny


def _night(embedder: Any, source: Path, run_id: str, llm: str, monkeypatch: Any) -> Any:
    from ragtrail.config import load_settings
    from ragtrail.pipeline.evidence.step import evaluate_evidence
    from ragtrail.pipeline.ingest import ingest
    from ragtrail.runtime import Runtime
    from ragtrail.storage.runs_store import RunStore

    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM", llm)  # every role; only evidence differs
    rt = Runtime(load_settings())
    rt.__dict__["embedder"] = embedder
    ingest(rt, str(source), CORPUS)
    evaluate_evidence(rt, CORPUS, run_id=run_id)
    RunStore(rt.engine).finish_run(run_id, "success")
    return rt


def test_degraded_evidence_retrains_the_extractor_gates_and_registers(
    home: tuple[Path, Path],
    retrain_dag: Any,
    embedder: Any,
    sample_corpus: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ragtrail.models.registry import CHALLENGER, CHAMPION
    from ragtrail.pipeline import tasks
    from ragtrail.pipeline.drift.step import check_runs
    from ragtrail.pipeline.drift.views import compact
    from ragtrail.pipeline.night import RETRAIN
    from ragtrail.summaries.drift_summary import DriftCheck

    _, tiny = home
    _night(embedder, sample_corpus, "night-1", SCRIPTED_SPEC, monkeypatch).close()
    rt = _night(embedder, sample_corpus, "night-2", WEAK_EXTRACTOR_SPEC, monkeypatch)

    (decision,) = check_runs(rt.engine, ["night-2"], rt.settings.drift, corpus=CORPUS)
    assert decision.fired, (decision.status, decision.evidence)
    drifted = [r for r in decision.evidence.rows if r.drifted]
    assert {(r.evaluation, r.facets.get("method")) for r in drifted} == {("evidence", "extractor")}
    snapshot = rt.store.latest_snapshot(CORPUS).snapshot_id
    announced = tasks.announce_drift(
        rt,
        corpus=CORPUS,
        run_id="night-2",
        snapshot_id=snapshot,
        drift=DriftCheck(
            run_id="night-2", snapshot_id=snapshot, fired=True, sets={"sample": compact(decision)}
        ).to_json(),
    )
    event = announced["event"]
    assert event["models"] == ["extractor"]

    # The event resolves to what the Params below give; dag.test() does not consume events.
    params = {
        "corpus": CORPUS,
        "snapshot_id": snapshot,
        "drift_run": "night-2",
        "models": ["extractor"],
    }
    from_event = RETRAIN.resolve({}, [{"timestamp": "t", "extra": event}], "retrain-x")
    from_params = RETRAIN.resolve(params, [], "retrain-x")
    assert from_event | {"origin": "", "drift_decision_id": None} == from_params | {"origin": ""}

    dag_run = retrain_dag.test(run_conf={**params, "base_model": f"hf:{tiny}"})
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    assert dag_run.state == "success", states
    for task in ("train_evidence", "gate_evidence"):
        assert retrain_dag.get_task(task).pool == "gpu"
        assert retrain_dag.get_task(task).queue == "gpu"

    registry = rt.registry
    (listed,) = registry.list_versions(MODEL)
    assert listed.version == 1 and listed.tags["lineage.retrain_run"].startswith("retrain-")
    lineage = registry.get_version(MODEL, 1).lineage
    assert lineage is not None and lineage["base_model"].endswith("tiny")
    assert lineage["split"]["split_version"] and lineage["split"]["held_out_questions"]
    assert set(lineage["split"]["held_out_questions"]).isdisjoint(
        lineage["split"]["train_questions"]
    )
    prefs = lineage["preferences"]
    assert prefs["lists"] >= 1 and abs(sum(prefs["weights"].values()) - 1.0) < 1e-9
    assert lineage["stages"]["lpo"]["steps"] == 2
    (gate,) = registry.gate_decisions(MODEL, 1)
    (model,) = [m for m in registry.list_models() if m.name == MODEL]
    if gate["promote"]:
        assert model.aliases.get(CHAMPION) == 1
    else:
        assert model.aliases.get(CHALLENGER) == 1 and CHAMPION not in model.aliases
    recorded = gate["decision"]
    assert gate["reason"] and recorded["current"]["n"] == recorded["challenger"]["n"] > 0
    assert [c["metric"] for c in recorded["checks"]] == ["correct", "faithfulness", "compression"]
    # the citation model was not asked for: nothing of it was trained
    assert not [m for m in registry.list_models() if m.name == "ragtrail-citation"]
    rt.close()

    # The trained version as the extractor: the night compares it with its base model zero-shot.
    monkeypatch.setenv("RAGTRAIL_MODELS__EXTRACTOR", f"registry:{MODEL}@1")
    monkeypatch.setenv("RAGTRAIL_EVIDENCE__MAX_ITEMS", "4")
    monkeypatch.setenv("RAGTRAIL_EVIDENCE__MAX_FAILED_SHARE", "1.0")  # the tiny model, again
    from ragtrail.pipeline.evidence.views import load_evidence

    rt = _night(embedder, sample_corpus, "night-3", WEAK_EXTRACTOR_SPEC, monkeypatch)
    summary = load_evidence(rt, "night-3")
    assert summary is not None and summary.extractor == f"registry:{MODEL}@1"
    assert summary.base == f"hf:{tiny}" and "base" not in summary.undefined
    assert {q.method for q in summary.queries} == {
        "extractor",
        "base",
        "extractive",
        "full",
        "none",
    }
    rt.close()
