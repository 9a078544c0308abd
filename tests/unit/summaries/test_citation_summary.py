"""The citation summary records read and write the stored ``citations.json`` shape exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from ragtrail.pipeline.citations.views import compact
from ragtrail.summaries.base import Figure
from ragtrail.summaries.citation_summary import (
    CitationRun,
    CitationSummary,
    MixtureView,
    ScenarioSummary,
)
from ragtrail.summaries.judge_summary import JudgeGate


def _agg(system: str, label: str, metric: str, value: float | None, n: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "metric": metric,
        "label": label,
        "mixture": "all",
        "system": system,
        "value": value,
        "ci_low": value,
        "ci_high": value,
        "n": n,
    }
    if value is None:
        row["undefined"] = dict.fromkeys(("value", "ci_low", "ci_high"), "no defined value")
    return row


def _mixture() -> dict[str, Any]:
    return {
        "spec": "1/2/2",
        "types": ["all"],
        "seed": 13,
        "baseline_repeats": 200,
        "counts": {
            "mixtures": 2,
            "skipped_items": 1,
            "answers_ok": 2,
            "answers_failed": 0,
            "abstained": 1,
        },
        "failed": 0,
        "skipped": [{"qid": "q9", "reason": "ground document not in the corpus"}],
        "random_expected": {
            "all": {"citation_precision": 0.2, "citation_recall": 0.4, "citation_f1": 0.25, "n": 1}
        },
        "aggregates": [
            _agg("model", "answerable", "citation_f1", 1.0, 1),
            _agg("random", "answerable", "citation_f1", 0.25, 1),
            _agg("model", "answerable", "citation_precision", None, 0),
            _agg("model", "unanswerable", "cited_any", 0.0, 1),
        ],
        "unanswerable": [
            {
                "mixture": "all",
                "system": "model",
                "cited_any": _agg("model", "unanswerable", "cited_any", 0.0, 1),
                "abstained": None,
            }
        ],
        "queries": [
            {
                "qid": "q1",
                "label": "fact_single",
                "mixture": "all",
                "question": "Who signs?",
                "relevant_source": "ground_chunks",
                "passages": [
                    {"kind": "relevant", "doc_id": "d1", "chunk_id": "d1#0", "text": "Alice."}
                ],
                "answer": "Alice signs [1].",
                "cited": [1],
                "invalid": [4],
                "relevant": [1],
                "precision": 1.0,
                "recall": 1.0,
                "f1": 1.0,
                "error": None,
                "raw": "",
            }
        ],
    }


def _scenarios() -> dict[str, Any]:
    return {
        "names": ["G"],
        "items": 1,
        "judge": {
            "judge": "entailment.embedding@j-1",
            "mode": "gate",
            "gates": True,
            "reason": "kappa 0.60 >= 0.40",
            "metric": "kappa",
            "n": 24,
            "bar": {"role_or_judge": "entailment", "metric": "kappa", "minimum": 0.4},
            "value": 0.6,
            "ci_low": 0.4,
            "ci_high": 0.8,
        },
        "aggregates": [
            {
                "scenario": "G",
                "metric": "autoais_cit",
                "value": 0.5,
                "ci_low": 0.0,
                "ci_high": 1.0,
                "n": 2,
            }
        ],
        "retrieval": [
            {
                "scenario": "G",
                "metric": "P@1",
                "value": 0.0,
                "n": 1,
                "ci_low": None,
                "ci_high": None,
                "undefined": {"ci_low": "no bootstrap", "ci_high": "no bootstrap"},
            }
        ],
        "counts": {"G": {"n": 1, "n_ok": 1, "n_failed": 0, "n_skipped": 0}},
        "seconds_per_question": {"G": 0.75},
        "skipped": {"bleu": "correctness: no record has gold_answers"},
        "failed_verdicts": 0,
        "details": {"level": "chunk", "anything": [1, {"nested": None}]},
    }


def _summary(scenarios: dict[str, Any] | None) -> dict[str, Any]:
    doc = {
        "run_id": "night-1.sample",
        "set_name": None,
        "corpus": "hb",
        "snapshot_id": "s1",
        "qa_set": "qa.jsonl",
        "qa_set_version": "file-1",
        "qa_set_name": None,
        "answerer": "scripted",
        "text_weight": 0.5,
        "text_weight_source": "default 0.5 (no retrieval run night-1.sample)",
        "mixture": _mixture(),
        "scenarios": scenarios,
    }
    if scenarios is None:
        doc["undefined"] = {"scenarios": "no scenario requested"}
    return doc


@pytest.mark.parametrize("scenarios", [_scenarios(), None], ids=["scenarios", "no-scenario"])
def test_round_trip_keeps_keys_values_and_number_types(scenarios: dict[str, Any] | None) -> None:
    doc = _summary(scenarios)
    summary = CitationSummary.from_json(json.dumps(doc))
    # sorted JSON text tells 1 from 1.0, which dict equality does not
    assert json.dumps(summary.to_json(), sort_keys=True) == json.dumps(doc, sort_keys=True)
    assert CitationSummary.from_json(summary.dumps(indent=1)) == summary


def test_a_summary_without_scenarios_says_why() -> None:
    summary = CitationSummary.from_json(_summary(None))
    assert summary.scenarios is None
    assert summary.reason("scenarios") == "no scenario requested"
    assert "undefined" not in CitationSummary.from_json(_summary(_scenarios())).to_json()


def test_typed_reads() -> None:
    summary = CitationSummary.from_json(_summary(_scenarios()))
    mixture = summary.mixture
    assert mixture.counts.skipped_items == 1 and mixture.skipped[0].qid == "q9"
    assert mixture.random_expected["all"].n == 1
    assert mixture.aggregates[0].figure == Figure(value=1.0, ci_low=1.0, ci_high=1.0, n=1)
    assert mixture.aggregates[2].reason("value") == "no defined value"
    assert mixture.unanswerable[0].abstained is None
    assert mixture.queries[0].passages[0].chunk_id == "d1#0"
    assert summary.scenarios is not None
    judge = summary.scenarios.judge
    assert judge.gates and judge.bar is not None and judge.bar.minimum == 0.4
    assert "undefined" not in judge.to_json()
    assert summary.scenarios.retrieval[0].figure.ci_low is None


@pytest.mark.parametrize(
    ("record", "doc"),
    [
        (CitationSummary, {**_summary(None), "extra": 1}),
        (MixtureView, {**_mixture(), "aggregate": []}),
        (
            MixtureView,
            {**_mixture(), "aggregates": [{**_agg("model", "x", "m", 0.5, 1), "facets": {}}]},
        ),
        (ScenarioSummary, {**_scenarios(), "judge_ref": "x"}),
        (JudgeGate, {**_scenarios()["judge"], "judge_ref": "x"}),
    ],
    ids=["summary", "mixture", "aggregate", "scenarios", "judge"],
)
def test_an_unknown_key_is_refused(record: type, doc: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        record.from_json(doc)


def test_a_missing_key_is_refused() -> None:
    doc = _summary(None)
    del doc["mixture"]["failed"]
    with pytest.raises(ValidationError, match="failed"):
        CitationSummary.from_json(doc)


def test_headline_and_step_result() -> None:
    headline = compact(CitationSummary.from_json(_summary(None)))
    assert headline.f1 == {
        "all": {
            "model": Figure(value=1.0, ci_low=1.0, ci_high=1.0, n=1),
            "random": Figure(value=0.25, ci_low=0.25, ci_high=0.25, n=1),
        }
    }
    run = CitationRun(**dict(headline), citations_uri="file:///runs/night-1.sample/citations.json")
    assert list(run.to_json()) == ["run_id", "answerer", "f1", "citations_uri"]
    assert run.to_json()["f1"]["all"]["random"]["value"] == 0.25
