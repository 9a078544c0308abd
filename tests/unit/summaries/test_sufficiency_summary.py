"""The sufficiency records read and write the stored documents unchanged and refuse a document
that does not have their shape."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ragtrail.summaries.base import Figure
from ragtrail.summaries.sufficiency_summary import (
    Agreement,
    Proportion,
    SelectiveView,
    SufficiencyHeadline,
    SufficiencyRun,
    SufficiencySummary,
)
from tests.unit._sufficiency_docs import (
    fitted_selective,
    rate,
    sufficiency_document,
    undefined_selective,
)


@pytest.mark.parametrize(
    "selective", [None, fitted_selective(), undefined_selective("one class")], ids=str
)
def test_a_stored_summary_round_trips(selective) -> None:
    document = sufficiency_document(selective)
    summary = SufficiencySummary.from_json(document)
    assert summary.to_json() == document
    assert SufficiencySummary.from_json(json.dumps(document)).to_json() == document
    assert json.loads(summary.dumps(indent=1)) == document


def test_the_summary_reads_as_typed_fields() -> None:
    summary = SufficiencySummary.from_json(sufficiency_document(fitted_selective()))
    assert summary.primary_rater.name == "sufficiency.contains_answer"
    assert summary.raters[0].per_setting["gold"].share.n == 3
    assert summary.cah.table[1].correct.value is None
    assert summary.cah.table[1].correct.reason("value") == "no scored answers"
    assert summary.selective is not None and summary.selective.auc.gain is not None
    assert summary.selective.auc.gain.figure == Figure(value=0.15, ci_low=-0.1, ci_high=0.3, n=3)
    assert summary.selective.policy == fitted_selective()["policy"]
    assert summary.queries[0].ratings["sufficiency.llm"] is None


def test_an_unrequested_policy_is_null_with_its_reason() -> None:
    summary = SufficiencySummary.from_json(sufficiency_document(None))
    assert summary.selective is None
    assert summary.reason("selective") == "selective generation was not requested"
    assert summary.to_json()["selective"] is None


def test_an_unfitted_policy_leaves_out_the_policy_and_the_missing_curves() -> None:
    view = SelectiveView.from_json(undefined_selective("one class"))
    assert view.policy is None and view.curves.empty
    data = view.to_json()
    assert "policy" not in data and data["curves"] == {}


def test_agreement_reads_a_calibration_and_one_that_is_missing() -> None:
    summary = SufficiencySummary.from_json(sufficiency_document(None))
    calibrated, missing = (r.agreement for r in summary.raters)
    assert calibrated == Agreement(
        value=0.5,
        ci_low=0.1,
        ci_high=0.9,
        n=6,
        judge="sufficiency.contains_answer@j-1",
        status="calibrated",
        reason=None,
        metric="kappa",
        mode="gate",
    )
    assert missing.value is None and missing.reason == "too few references"
    correctness = summary.cah.correctness_agreement
    assert correctness.judge == "correctness.llm@j-1" and correctness.mode == "advise"


def test_a_proportion_is_a_figure_with_reasons() -> None:
    share = Proportion.from_json(rate(None))
    assert isinstance(share, Figure) and share.reason("ci_low") == "no scored answers"
    assert Proportion.from_json(rate(0.5, 0.1, 0.9, 4)).to_json() == rate(0.5, 0.1, 0.9, 4)


def test_the_step_result_is_the_headline_plus_where_the_summary_is() -> None:
    headline = SufficiencyHeadline(
        run_id="r",
        answerer="a",
        primary_rater="p",
        hallucination={"gold": Figure(value=0.5, ci_low=0.1, ci_high=0.9, n=4)},
        auc_gain=None,
    )
    result = SufficiencyRun(**dict(headline), sufficiency_uri="runs/r/sufficiency.json")
    assert result.to_json() == {**headline.to_json(), "sufficiency_uri": "runs/r/sufficiency.json"}
    assert SufficiencyRun.from_json(result.to_json()) == result


@pytest.mark.parametrize(
    "path",
    [
        ("renamed",),
        ("cah", "renamed"),
        ("raters", 0, "renamed"),
        ("cah", "table", 0, "renamed"),
        ("queries", 0, "renamed"),
    ],
    ids=str,
)
def test_an_unknown_key_is_refused(path) -> None:
    document = sufficiency_document(fitted_selective())
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = 1
    with pytest.raises(ValidationError, match="renamed"):
        SufficiencySummary.from_json(document)


def test_a_missing_key_is_refused() -> None:
    document = sufficiency_document(fitted_selective())
    del document["selective"]["auc"]["gain"]
    with pytest.raises(ValidationError, match="gain"):
        SufficiencySummary.from_json(document)
