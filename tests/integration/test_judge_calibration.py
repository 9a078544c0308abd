"""Judges measured before they are trusted, end to end on the ingested sample corpus.

The hand-written sample set is registered as the corpus's golden set. Two scripted doubles play
the judges: the routed backend (a labeller that reads the statement kind back from the scripted
question form, critiques that rate everything 4) fails calibration and only advises; the
calibrated double (a labeller that knows the human labels, critiques that see the perturbations)
passes and gates. Both paths then run test-set generation.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ragtrail.config import ModelRole
from ragtrail.generate.critiques import CRITERIA
from ragtrail.generate.judges import LABELLER, critique_judge_name
from ragtrail.paths import sample_qa_set
from ragtrail.pipeline.generate import GenerationRequest, generate_testset
from ragtrail.pipeline.golden import register_golden_set
from ragtrail.pipeline.ingest import ingest
from ragtrail.pipeline.judges import (
    calibrate_missing,
    gate_decisions,
    generation_judges,
    ground_context,
)
from ragtrail.records import CandidateStatus, LabelSource
from ragtrail.report.judge_notes import judges_section
from ragtrail.storage.judge_store import JudgeStore
from ragtrail.testset.qaset import load_qa_set
from ragtrail.testset.store import TestSetStore
from tests import scripted_llm
from tests.scripted_llm import DISCERNING


@pytest.fixture
def rt(make_runtime, tmp_path, sample_corpus):
    corpus = tmp_path / "corpus"
    shutil.copytree(sample_corpus, corpus)
    runtime = make_runtime(
        generation={"per_label": 2, "contexts_per_round": 8},
        judges={"labeller_items_per_label": 4, "contrast_pairs_per_criterion": 3},
    )
    ingest(runtime, str(corpus), "hb")
    register_golden_set(runtime, sample_qa_set(), corpus="hb", name="handbook-sample")
    return runtime


def _use(rt, backend) -> None:
    rt.use_llm_backends({rt.settings.generation.llm: backend})


def test_ground_context_holds_the_answer(rt):
    items, _ = load_qa_set(sample_qa_set())
    leave = next(i for i in items if i.qid == "q001")  # "27 days", people/leave-policy.md
    assert "27 days" in ground_context(rt, "hb", leave)


def test_weak_judges_only_advise_and_labels_stay_requested(rt):
    _use(rt, scripted_llm.backend())
    report = calibrate_missing(rt, "hb")
    assert report[LABELLER]["status"] == "calibrated" and report[LABELLER]["n"] == 16
    decisions = gate_decisions(rt, generation_judges(rt))
    assert not decisions[LABELLER].gates
    assert "< 0.40" in decisions[LABELLER].reason
    assert not any(decisions[critique_judge_name(c)].gates for c in CRITERIA)  # constant 4s

    summary = generate_testset(rt, GenerationRequest(corpus="hb", run_id="weak", seed=7))
    items = TestSetStore(rt.engine).version_items(summary.version)
    assert items and all(c.label_source == LabelSource.REQUESTED for c in items)
    assert all(c.label_judge == decisions[LABELLER].judge_ref for c in items)
    assert all(c.effective_label == c.requested_label for c in items)
    all_cands = TestSetStore(rt.engine).get_candidates("hb")
    assert not any((c.reject_reason or "").startswith("label_mismatch") for c in all_cands)
    assert summary.judges[LABELLER].mode == "advise"
    html = judges_section(summary.judges).html
    assert "Labels are the requested ones" in html and "advised only" in html

    again = calibrate_missing(rt, "hb")  # a version already calibrated is not measured again
    assert {r["status"] for r in again.values()} == {"cached"}


def test_calibrated_judges_gate(rt):
    _use(rt, scripted_llm.calibrated_backend())
    report = calibrate_missing(rt, "hb")
    store = JudgeStore(rt.engine)
    labeller = rt.llm(ModelRole.LABELLER)
    assert labeller.backend.model_id == scripted_llm.CALIBRATED_MODEL_ID
    decisions = gate_decisions(rt, generation_judges(rt))
    assert decisions[LABELLER].gates and decisions[LABELLER].value == pytest.approx(1.0)
    gating = {c for c in CRITERIA if decisions[critique_judge_name(c)].gates}
    assert gating == set(DISCERNING)
    record = store.latest(LABELLER, decisions[LABELLER].judge_ref.split("@")[1])
    assert record is not None and record.n == report[LABELLER]["n"]
    details = json.loads(Path(record.details_uri).read_text())  # the local artifact store
    assert len(details["items"]) == record.n and details["items"][0]["judge"].startswith(
        "labeller@"
    )

    summary = generate_testset(rt, GenerationRequest(corpus="hb", run_id="strong", seed=7))
    items = TestSetStore(rt.engine).version_items(summary.version)
    assert items and all(c.label_source == LabelSource.JUDGE for c in items)
    assert all(c.observed_label == c.requested_label for c in items)
    assert summary.judges[LABELLER].mode == "gate"
    rejected = TestSetStore(rt.engine).get_candidates("hb", status=CandidateStatus.REJECTED)
    assert any((c.reject_reason or "").startswith("label_mismatch") for c in rejected)


def test_the_calibration_steps_measure_every_judge_of_the_night_and_fix_the_gates(rt):
    """The night's two calibration steps measure the generation judges (handing on their gate
    decisions, which a run's judging and finalize apply) and the evaluation's judges (the
    sufficiency raters and the correctness judge), so its branches find them calibrated."""
    from ragtrail.pipeline.correctness import correctness_judge
    from ragtrail.pipeline.night_judges import uncalibrated_night_judges
    from ragtrail.pipeline.sufficiency.raters import sufficiency_raters
    from ragtrail.pipeline.tasks import calibrate_evaluation_judges, calibrate_judges

    _use(rt, scripted_llm.calibrated_backend())
    evaluation = [r.spec.name for r in sufficiency_raters(rt)] + [correctness_judge(rt).spec.name]
    before = uncalibrated_night_judges(rt)
    assert set(evaluation) <= set(before) and LABELLER in before
    out = calibrate_judges(rt, corpus="hb")
    assert LABELLER in out["judges"] and not set(out["judges"]) & set(evaluation)
    assert set(uncalibrated_night_judges(rt)) >= set(evaluation)  # not measured by this step
    assert out["gates"] == {
        name: d.as_dict() for name, d in gate_decisions(rt, generation_judges(rt)).items()
    }
    assert out["gates"][LABELLER]["gates"]
    measured = calibrate_evaluation_judges(rt, corpus="hb")["judges"]
    assert set(measured) == set(evaluation)
    assert measured[evaluation[-1]]["status"] == "calibrated"  # the correctness judge
    assert {measured[name]["status"] for name in evaluation} <= {"calibrated", "not calibrated"}
    outcomes = out["judges"] | measured
    assert not set(uncalibrated_night_judges(rt)) & {
        n for n in before if outcomes[n].get("status") == "calibrated"
    }
    again = calibrate_evaluation_judges(rt, corpus="hb")  # calibrated judges are not measured again
    assert {again["judges"][name]["status"] for name in evaluation} <= {"cached", "not calibrated"}
