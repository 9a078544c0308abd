"""The generation records read and write ``generation.json`` and the generation step's result as
the pipeline has always written them: a round trip gives the same JSON, a renamed key is refused."""

from __future__ import annotations

import copy
import json

import pytest
from pydantic import ValidationError

from ragtrail.summaries.generation_summary import GenerationOutcome, GenerationSummary
from ragtrail.summaries.judge_summary import JudgeGate

COUNTS = {"fact_single": 2, "summary": 1, "reasoning": 2, "unanswerable": 0}
GATED = {
    "judge": "labeller@j-1",
    "mode": "gate",
    "gates": True,
    "reason": "labeller kappa 0.80 [0.60, 0.95] on n=24 >= 0.40",
    "metric": "kappa",
    "n": 24,
    "bar": {"role_or_judge": "labeller", "metric": "kappa", "minimum": 0.4},
    "value": 0.8,
    "ci_low": 0.6,
    "ci_high": 0.95,
}
UNCALIBRATED = {
    "judge": "critique.stand_alone@j-2",
    "mode": "advise",
    "gates": False,
    "reason": "critique.stand_alone j-2 has no calibration yet, so it only advises",
    "metric": None,
    "n": None,
    "bar": None,
    "value": None,
    "undefined": {
        "value": "no calibration yet",
        "ci_low": "no calibration yet",
        "ci_high": "no calibration yet",
        "n": "no calibration",
    },
    "ci_low": None,
    "ci_high": None,
}
SUMMARY = {
    "version": "ts-1",
    "corpus": "hb",
    "snapshot_id": "s1",
    "run_id": "gen-1",
    "seed": 7,
    "targets": dict.fromkeys(COUNTS, 2),
    "achieved": COUNTS,
    "accepted": COUNTS,
    "kept_from_previous": 0,
    "retired": 1,
    "funnel": [{"stage": "candidates", "count": 9}, {"stage": "selected (quotas)", "count": 5}],
    "label_matrix": {"fact_single": {"fact_single": 2, "failed": 1}},
    "distribution": {"ours": COUNTS, "baseline": {"fact_single": 3}},
    "critiques": {
        "fact_single": {
            "stand_alone": {"n": 2, "mean": 4.5, "hist": [0, 0, 0, 1, 1]},
            "qa_tautology": {"n": 0, "mean": None, "hist": [0, 0, 0, 0, 0]},
        }
    },
    "usage": [
        {
            "stage": "label",
            "calls": 9,
            "cache_hits": 1,
            "failures": 0,
            "prompt_tokens": 900,
            "completion_tokens": 90,
            "cost_usd": None,
        }
    ],
    "model_calls": 9,
    "cache_hits": 1,
    "failures": [{"cause": "rejected:duplicate_of", "count": 1, "examples": ["dup"]}],
    "backends": {"index backend": "embedded", "llm": "builtin:tiny"},
    "judges": {"labeller": GATED, "critique.stand_alone": UNCALIBRATED},
}


def test_the_summary_round_trips_byte_for_byte() -> None:
    text = json.dumps(SUMMARY, indent=1)
    summary = GenerationSummary.from_json(text)
    assert summary.to_json() == SUMMARY
    assert summary.dumps(indent=1) == text
    assert summary.artifact_uri is None and "artifact_uri" not in summary.to_json()


def test_the_returned_summary_carries_the_artifact_uri() -> None:
    summary = GenerationSummary.from_json({**SUMMARY, "artifact_uri": "file:///x.parquet"})
    assert summary.to_json()["artifact_uri"] == "file:///x.parquet"


def test_a_judge_gate_writes_undefined_only_when_a_figure_is_missing() -> None:
    assert JudgeGate.from_json(GATED).to_json() == GATED
    assert list(JudgeGate.from_json(UNCALIBRATED).to_json()) == list(UNCALIBRATED)


def test_the_step_result_is_the_summary_headline() -> None:
    outcome = GenerationOutcome.of(GenerationSummary.from_json(SUMMARY), regenerated=False)
    keys = ("version", "corpus", "snapshot_id", "accepted", "targets", "model_calls")
    expected = {k: SUMMARY[k] for k in (*keys, "cache_hits", "judges")} | {"regenerated": False}
    assert outcome.to_json() == expected
    assert GenerationOutcome.from_json(expected) == outcome
    assert outcome.gating_judges == ["labeller"]


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ((), "acepted"),
        (("funnel", 0), "counts"),
        (("critiques", "fact_single", "stand_alone"), "median"),
        (("judges", "labeller"), "gated"),
    ],
)
def test_a_wrong_key_is_refused(path: tuple, key: str) -> None:
    document = copy.deepcopy(SUMMARY)
    target = document
    for step in path:
        target = target[step]
    target[key] = 1
    with pytest.raises(ValidationError, match=key):
        GenerationSummary.from_json(document)


def test_an_unknown_judge_mode_is_refused() -> None:
    with pytest.raises(ValidationError, match="mode"):
        JudgeGate.from_json({**GATED, "mode": "veto"})
