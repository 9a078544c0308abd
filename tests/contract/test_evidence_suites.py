"""Contract: the evidence suites pass the frames a stored summary gives and name the broken
invariant on each bad frame (one mutation per frame, so each fails exactly what it breaks)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from ragtrail.pipeline.evidence.views import HEADLINE_METHODS, metrics_frame, queries_frame
from ragtrail.quality.runner import QualityResult, QualityRunner
from ragtrail.quality.suites import (
    EVIDENCE_METRICS_SUITE,
    EVIDENCE_QUERIES_SUITE,
    FAIL,
    WARN,
    evidence_metrics_suite,
    evidence_queries_suite,
    prepare_evidence_metrics,
)
from tests.unit._evidence_docs import NOISE, evidence_summary


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> QualityRunner:
    return QualityRunner(tmp_path_factory.mktemp("report"))


def good_queries() -> pd.DataFrame:
    return queries_frame(evidence_summary())


def good_metrics() -> pd.DataFrame:
    return metrics_frame(evidence_summary())


def validate_queries(runner: QualityRunner, frame: pd.DataFrame) -> QualityResult:
    return runner.validate("eq", frame, evidence_queries_suite(HEADLINE_METHODS, NOISE))


def validate_metrics(runner: QualityRunner, frame: pd.DataFrame) -> QualityResult:
    return runner.validate("em", prepare_evidence_metrics(frame), evidence_metrics_suite())


@pytest.mark.parametrize(
    "suite",
    [evidence_queries_suite(HEADLINE_METHODS, NOISE), evidence_metrics_suite()],
    ids=lambda s: s.name,
)
def test_every_expectation_declares_a_policy(suite) -> None:
    assert suite.name in (EVIDENCE_QUERIES_SUITE, EVIDENCE_METRICS_SUITE)
    for expectation in suite.expectations:
        assert expectation.meta["severity"] in (FAIL, WARN)
        assert expectation.meta["rationale"]


def test_good_frames_pass_without_warnings(runner: QualityRunner) -> None:
    for result in (
        validate_queries(runner, good_queries()),
        validate_metrics(runner, good_metrics()),
    ):
        assert result.success and result.failures == [] and result.warnings == [], result


def _set(column: str, row: int, value: object) -> Callable[[pd.DataFrame], None]:
    def change(frame: pd.DataFrame) -> None:
        frame.loc[row, column] = value

    return change


def _duplicate(frame: pd.DataFrame) -> None:
    frame.loc[1, "noise"] = 0.0  # q1/extractor at noise 0 twice


def _unscored_without_reason(frame: pd.DataFrame) -> None:
    unscored = frame.index[frame["outcome"] == "unscored"]
    frame.loc[unscored, "unscored_reason"] = None


def _drop_column(frame: pd.DataFrame) -> None:
    frame.drop(columns=["passages"], inplace=True)  # checked by no other expectation


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_drop_column, "expect_table_columns_to_match_set"),
        (_duplicate, "expect_compound_columns_to_be_unique"),
        (_set("method", 0, "oracle"), "be_in_set(method)"),
        (_set("noise", 0, 3.0), "be_in_set(noise)"),
        (_set("outcome", 0, "maybe"), "be_in_set(outcome)"),
        (_unscored_without_reason, "be_null(unscored_reason)"),
        (_set("faithfulness", 2, 1.5), "be_between(faithfulness)"),
        (_set("silver_faithfulness", 0, -0.1), "be_between(silver_faithfulness)"),
        (_set("helpfulness", 0, 1.2), "be_between(helpfulness)"),
        (_set("conciseness", 0, -1.5), "be_between(conciseness)"),
        (_set("compression", 0, 0.0), "be_between(compression)"),
        (_set("evidence_tokens", 0, -1.0), "be_between(evidence_tokens)"),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else v,
)
def test_each_broken_query_invariant_fails(
    runner: QualityRunner, mutate: Callable[[pd.DataFrame], None], expected: str
) -> None:
    frame = good_queries()
    mutate(frame)
    result = validate_queries(runner, frame)
    assert not result.success
    assert len(result.failures) == 1 and expected in result.failures[0], result.failures


def test_a_negative_conciseness_is_a_valid_cosine(runner: QualityRunner) -> None:
    """Conciseness is a cosine: evidence pointing away from the full answer scores below 0 (the
    bundled SmolLM2 nightly wrote one at -0.054); only values outside [-1, 1] are broken."""
    frame = good_queries()
    frame.loc[0, "conciseness"] = -0.054
    assert validate_queries(runner, frame).success


def test_unfaithful_extractor_evidence_only_warns(runner: QualityRunner) -> None:
    frame = good_queries()
    frame.loc[frame["method"] == "extractor", "faithfulness"] = 0.2
    frame.loc[frame["method"] == "base", "faithfulness"] = 0.1  # the base model: no warning
    result = validate_queries(runner, frame)
    assert result.success and result.failures == []
    assert len(result.warnings) == 1 and "be_between(faithfulness)" in result.warnings[0]


def _metric_rows(frame: pd.DataFrame, metric: str) -> pd.Index:
    return frame.index[(frame["metric"] == metric) & (frame["evaluation"] == "evidence")]


def _metric(metric: str, value: float, low: float, high: float) -> Callable[[pd.DataFrame], None]:
    def change(frame: pd.DataFrame) -> None:
        frame.loc[_metric_rows(frame, metric)[0], ["value", "ci_low", "ci_high"]] = [
            value,
            low,
            high,
        ]

    return change


def _negative_n(frame: pd.DataFrame) -> None:
    frame.loc[0, "n"] = -1


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_metric("correct", 1.2, 1.0, 1.4), "value_in_range"),
        (_metric("faithfulness", -0.2, -0.3, 0.0), "value_in_range"),
        (_metric("correct_diff_vs_full", -1.5, -1.6, -1.2), "value_in_range"),
        (_metric("evidence_tokens", -3.0, -4.0, 0.0), "value_in_range"),
        (_metric("compression", 0.0, 0.0, 0.0), "be_between(value)"),
        (_metric("correct", 0.9, 0.2, 0.5), "ci_contains_value"),
        (_negative_n, "be_between(n)"),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else v,
)
def test_each_broken_metric_invariant_fails(
    runner: QualityRunner, mutate: Callable[[pd.DataFrame], None], expected: str
) -> None:
    frame = good_metrics()
    mutate(frame)
    result = validate_metrics(runner, frame)
    assert not result.success
    assert len(result.failures) == 1 and expected in result.failures[0], result.failures


def test_metric_families_have_their_own_ranges(runner: QualityRunner) -> None:
    """Compression far above 1, a negative paired difference and a judge's negative kappa are
    in range; undefined figures (null with their reason) pass."""
    frame = good_metrics()
    _metric("compression", 42.0, 30.0, 60.0)(frame)
    _metric("correct_diff_vs_none", -0.75, -1.0, -0.5)(frame)
    kappa = frame.index[frame["evaluation"] == "calibration.faithfulness"]
    frame.loc[kappa, ["value", "ci_low", "ci_high"]] = [-0.2, -0.4, 0.1]
    assert frame["value"].isna().any()
    result = validate_metrics(runner, frame)
    assert result.success and result.failures == [] and result.warnings == []


def test_an_empty_metrics_frame_has_every_column() -> None:
    summary = evidence_summary().model_copy(update={"aggregates": [], "judges": []})
    frame = prepare_evidence_metrics(metrics_frame(summary))
    assert frame.empty and {"value_in_range", "ci_contains_value", "method"} <= set(frame.columns)


def test_queries_frame_is_parquet_safe(tmp_path: Path) -> None:
    frame = good_queries()
    frame.to_parquet(tmp_path / "q.parquet")
    back = pd.read_parquet(tmp_path / "q.parquet")
    assert list(back.columns) == list(frame.columns) and len(back) == len(frame)
