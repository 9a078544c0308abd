"""The correctness judge calibrated on the sample golden set, stored, cached and gated.

The JUDGE role is served by the routed scripted backend (a test double, not a model) whose
``judge.correctness`` handler calls a candidate correct when it holds every content word of a
gold answer: it agrees with every reference built from the golden items, so it gates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragtrail.config import ModelRole
from ragtrail.judges.correctness import CORRECT, INCORRECT
from ragtrail.paths import sample_qa_set
from ragtrail.pipeline.correctness import (
    calibrate_correctness,
    calibrate_correctness_if_missing,
    correctness_judge,
)
from ragtrail.pipeline.judges import CalibrationError
from ragtrail.records import QAItem
from ragtrail.storage.judge_store import JudgeStore
from ragtrail.testset.qaset import load_qa_set
from tests.unit.generate import calls_by_prompt, routed_backend


@pytest.fixture
def rt(make_runtime):
    runtime = make_runtime()
    backend = routed_backend()
    runtime.use_llm_backends({runtime.settings.model_for(ModelRole.JUDGE): backend})
    runtime.__dict__["test_backend"] = backend
    return runtime


def test_calibrated_once_then_cached_and_gating(rt):
    items, _ = load_qa_set(sample_qa_set())
    report = calibrate_correctness_if_missing(rt, "hb", items)
    per_kind = rt.settings.sufficiency.calibration_per_kind
    assert report["status"] == "calibrated" and report["metric"] == "kappa"
    assert report["n"] == 2 * per_kind and report["value"] == pytest.approx(1.0)
    assert report["gate"]["mode"] == "gate" and report["judge"] == correctness_judge(rt).spec.ref
    assert calls_by_prompt(rt.test_backend) == {"judge.correctness": 2 * per_kind}

    spec = correctness_judge(rt).spec
    record = JudgeStore(rt.engine).latest(spec.name, spec.version)
    assert record is not None and record.role == "correctness"
    assert record.reference.startswith("correctness:")
    details = json.loads(Path(record.details_uri).read_text())["items"]
    assert sorted(d["reference"] for d in details) == [CORRECT] * per_kind + [INCORRECT] * per_kind
    assert all(d["value"] == d["reference"] for d in details)
    assert record.metrics["precision"]["value"] == 1.0

    again = calibrate_correctness_if_missing(rt, "hb", items)
    assert again["status"] == "cached" and again["n"] == report["n"]
    assert again["gate"]["mode"] == "gate"
    assert len(rt.test_backend.calls) == 2 * per_kind  # nothing asked again


def test_one_answer_cannot_calibrate(rt):
    items = [QAItem("q1", "How much leave?", "fact_single", "27 days")]
    with pytest.raises(CalibrationError, match="at least two different gold answers"):
        calibrate_correctness(rt, items)
    report = calibrate_correctness_if_missing(rt, "hb", items)
    assert report["status"] == "not calibrated" and "two different" in report["reason"]
    assert "n" not in report and report["gate"]["mode"] == "advise"


def test_calibrated_by_name_like_every_registered_judge(rt):
    from ragtrail.judges.correctness import JUDGE_NAME
    from ragtrail.judges.registry import CalibrationRequest
    from ragtrail.pipeline.registered_judges import calibrate_judge

    (record,) = calibrate_judge(rt, JUDGE_NAME, CalibrationRequest(sample_qa_set(), "hb"))
    assert record.judge == JUDGE_NAME and record.judge_version == correctness_judge(rt).spec.version
    assert record.n == 2 * rt.settings.sufficiency.calibration_per_kind
