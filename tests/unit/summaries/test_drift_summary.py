"""The drift records read and write the documents the drift step has always stored and handed on:
a round trip gives the same JSON, a renamed key is refused."""

from __future__ import annotations

import copy
from datetime import datetime

import pytest
from pydantic import ValidationError

from ragtrail.summaries.drift_summary import (
    DriftCheck,
    DriftDecision,
    DriftEvidence,
    DriftHeadline,
    DriftView,
    QASetRetirement,
)

POLICY = {
    "enabled": True,
    "alpha": 0.05,
    "threshold": 0.05,
    "thresholds": {"retrieval:recall@5": 0.1},
    "min_n": 5,
    "exclude_facets": {"system": ["random"]},
    "n_resamples": 9999,
    "seed": 13,
    "primary_metrics": {"retrieval": {"metric": "recall@5", "greater_is_better": True}},
}
ROW = {
    "evaluation": "retrieval",
    "metric": "recall@5",
    "facets": {"label": "inclusive", "text_weight": 0.5},
    "greater_is_better": True,
    "n": 12,
    "baseline": 0.8,
    "current": 0.5,
    "diff": -0.3,
    "ci_low": -0.4,
    "ci_high": -0.2,
    "p_value": 0.001,
    "p_holm": 0.002,
    "threshold": 0.1,
    "direction": "worse",
    "tested": True,
    "drifted": True,
    "undefined": {},
}
CHECKED = {
    "fires_on": "a primary metric worse by more than its threshold",
    "policy": POLICY,
    "qa_set": {
        "version": "gs-1",
        "undefined": {},
        "kind": "golden",
        "n_items": 2,
        "retired": True,
        "n_retired": 1,
        "reasons": {"ground_document_removed": 1},
    },
    "baseline": {
        "run_id": "n1",
        "kind": "first",
        "snapshot_id": "s1",
        "started_at": "2026-11-25T13:27:42+00:00",
    },
    "corpus_drift": {
        "baseline_snapshot": "s1",
        "current_snapshot": "s2",
        "n_baseline": 4,
        "n_current": 4,
        "added": 1,
        "updated": 1,
        "removed": 1,
        "unchanged": 2,
        "added_share": 0.25,
        "updated_share": 0.25,
        "removed_share": 0.25,
        "changed_share": 0.75,
        "undefined": {},
    },
    "rows": [ROW],
    "drifted": ["retrieval:recall@5 [label=inclusive, text_weight=0.5]"],
    "n_tested": 1,
}
NO_BASELINE = {
    "fires_on": "a primary metric worse by more than its threshold",
    "policy": {**POLICY, "primary_metrics": None},
    "qa_set": {
        "version": "file-v",
        "undefined": {"retired": "not a stored test-set or golden version (a QA set file)"},
        "kind": "file",
        "n_items": None,
        "retired": None,
        "n_retired": None,
    },
    "undefined": {"baseline": "no baseline", "corpus_drift": "no baseline"},
    "rows": [],
    "drifted": [],
    "n_tested": 0,
    "corpus_drift": None,
}
DECISION = {
    "decision_id": "drift-abc",
    "run_id": "n2",
    "corpus": "hb",
    "snapshot_id": "s2",
    "qa_set_version": "gs-1",
    "baseline_run_id": "n1",
    "baseline_kind": "first",
    "status": "checked",
    "fired": True,
    "evidence": CHECKED,
    "created_at": "2026-11-25T13:30:00.123456+00:00",
}


@pytest.mark.parametrize("document", [CHECKED, NO_BASELINE], ids=["checked", "no baseline"])
def test_evidence_round_trips(document: dict) -> None:
    evidence = DriftEvidence.from_json(document)
    assert evidence.to_json() == document
    assert DriftEvidence.from_json(evidence.dumps()) == evidence


def test_empty_undefined_is_written_inside_the_evidence_and_left_out_at_its_top() -> None:
    evidence = DriftEvidence.from_json(CHECKED).to_json()
    assert "undefined" not in evidence and "baseline" in evidence
    assert evidence["rows"][0]["undefined"] == {} and evidence["qa_set"]["undefined"] == {}
    assert evidence["corpus_drift"]["undefined"] == {}
    assert "baseline" not in DriftEvidence.from_json(NO_BASELINE).to_json()


def test_n_retired_is_written_exactly_when_it_was_given() -> None:
    unknown = {
        "version": "gs-1",
        "undefined": {"retired": "the run records no corpus snapshot"},
        "kind": "golden",
        "n_items": 2,
        "retired": None,
    }
    assert QASetRetirement.from_json(unknown).to_json() == unknown
    file = NO_BASELINE["qa_set"]
    assert QASetRetirement.from_json(file).to_json() == file  # null, but present


def test_a_decision_round_trips_with_its_timestamp_as_written() -> None:
    decision = DriftDecision.from_json(DECISION)
    assert decision.created_at == datetime.fromisoformat(DECISION["created_at"])
    assert decision.to_json() == DECISION
    assert decision.evidence.rows[0].facets_text == "label=inclusive, text_weight=0.5"


def test_the_headline_carries_the_drifted_cells() -> None:
    headline = DriftHeadline.of(DriftDecision.from_json(DECISION))
    cell = {k: ROW[k] for k in ("evaluation", "metric", "facets", "baseline", "current", "diff")}
    cell |= {k: ROW[k] for k in ("ci_low", "ci_high", "p_holm", "threshold")}
    assert headline.to_json() == {
        "decision_id": "drift-abc",
        "run_id": "n2",
        "qa_set_version": "gs-1",
        "baseline_run": "n1",
        "baseline_kind": "first",
        "status": "checked",
        "fired": True,
        "n_tested": 1,
        "drifted": [cell],
    }
    assert DriftHeadline.from_json(headline.to_json()) == headline


def test_the_night_check_keeps_both_shapes() -> None:
    headline = DriftHeadline.of(DriftDecision.from_json(DECISION)).to_json()
    checked = {"run_id": "night", "snapshot_id": "s2", "fired": True, "sets": {"gold": headline}}
    skipped = {"run_id": "night", "fired": False, "sets": {}, "skipped": "drift.enabled is false"}
    for document in (checked, skipped):
        assert DriftCheck.from_json(document).to_json() == document
    assert list(DriftCheck.from_json(checked).fired_sets) == ["gold"]


def test_the_view_round_trips() -> None:
    point = {"run_id": "n1", "value": 0.8, "ci_low": 0.7, "ci_high": 0.9}
    view = {"decision": DECISION, "history": {"retrieval:recall@5 [label=inclusive]": [point]}}
    assert DriftView.from_json(view).to_json() == view


@pytest.mark.parametrize(
    ("path", "key"),
    [((), "n_testd"), (("rows", 0), "p_holms"), (("qa_set",), "kinds"), (("policy",), "beta")],
)
def test_a_wrong_key_is_refused(path: tuple, key: str) -> None:
    document = copy.deepcopy(CHECKED)
    target = document
    for step in path:
        target = target[step]
    target[key] = 1
    with pytest.raises(ValidationError, match=key):
        DriftEvidence.from_json(document)


def test_a_missing_key_is_refused() -> None:
    document = {k: v for k, v in CHECKED.items() if k != "n_tested"}
    with pytest.raises(ValidationError, match="n_tested"):
        DriftEvidence.from_json(document)
