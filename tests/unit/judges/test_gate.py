"""The gate policy on each branch, its bars from settings, and strict JSON decisions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ragtrail.config import JudgeSettings, Settings
from ragtrail.jsonsafe import dumps
from ragtrail.judges.contract import JudgeRole, JudgeSpec, VerdictType
from ragtrail.judges.gate import ADVISE, GATE, GateBar, bar_for, decide, default_bars
from ragtrail.storage.judge_store import CalibrationRecord

LABELLER = JudgeSpec(
    name="labeller",
    version="j-aaaaaaaaaaaa",
    role=JudgeRole.LABELLER,
    backend="llm",
    model="builtin:smollm2-135m-instruct",
    verdict_type=VerdictType.CATEGORY,
    categories=("fact_single", "summary", "reasoning", "unanswerable"),
)
CRITIQUE = JudgeSpec(
    name="critique.stand_alone",
    version="j-bbbbbbbbbbbb",
    role=JudgeRole.CRITIQUE,
    backend="llm",
    model="builtin:smollm2-135m-instruct",
    verdict_type=VerdictType.RATING,
)
KAPPA_BAR = GateBar("labeller", "kappa", 0.4)


def _calibration(spec: JudgeSpec = LABELLER, **fields: Any) -> CalibrationRecord:
    row: dict[str, Any] = {
        "id": 1,
        "judge": spec.name,
        "judge_version": spec.version,
        "role": spec.role.value,
        "kind": "categorical",
        "spec": spec.as_dict(),
        "reference": "golden:gs-1",
        "n": 24,
        "metric": "kappa",
        "value": 0.62,
        "ci_low": 0.41,
        "ci_high": 0.8,
        "undefined": {},
        "metrics": {},
        "details_uri": None,
        "created_at": datetime(2026, 5, 14, tzinfo=UTC),
    }
    row.update(fields)
    return CalibrationRecord(**row)


def test_meets_the_bar_gates() -> None:
    decision = decide(LABELLER, _calibration(), KAPPA_BAR)
    assert decision.mode == GATE and decision.gates
    assert decision.reason == "labeller kappa 0.62 [0.41, 0.80] on n=24 >= 0.40"
    assert (decision.value, decision.ci_low, decision.ci_high, decision.n) == (0.62, 0.41, 0.8, 24)


def test_exactly_the_bar_gates() -> None:
    assert decide(LABELLER, _calibration(value=0.4), KAPPA_BAR).gates


def test_below_the_bar_advises_even_with_the_interval_above() -> None:
    # the point estimate decides; the interval is shown only
    decision = decide(LABELLER, _calibration(value=0.05, ci_low=-0.12, ci_high=0.22), KAPPA_BAR)
    assert decision.mode == ADVISE and not decision.gates
    assert decision.reason == "labeller kappa 0.05 [-0.12, 0.22] on n=24 < 0.40"
    wide = decide(LABELLER, _calibration(value=0.39, ci_low=0.1, ci_high=0.9), KAPPA_BAR)
    assert not wide.gates


def test_no_calibration_advises() -> None:
    decision = decide(LABELLER, None, KAPPA_BAR)
    assert decision.mode == ADVISE
    assert decision.reason == "labeller j-aaaaaaaaaaaa has no calibration yet, so it only advises"
    out = json.loads(dumps(decision.as_dict()))
    assert out["value"] is None and out["n"] is None
    assert out["undefined"]["n"] == "no calibration"


def test_calibration_of_another_version_advises() -> None:
    old = _calibration(judge_version="j-000000000000")
    decision = decide(LABELLER, old, KAPPA_BAR)
    assert not decision.gates and "measured version j-000000000000" in decision.reason


def test_undefined_figure_advises_with_its_reason() -> None:
    undefined = {
        "value": "chance agreement is 1",
        "ci_low": "no items to resample",
        "ci_high": "no items to resample",
    }
    cal = _calibration(value=None, ci_low=None, ci_high=None, undefined=undefined)
    decision = decide(LABELLER, cal, KAPPA_BAR)
    assert not decision.gates
    assert decision.reason == (
        "labeller kappa undefined (no interval: no items to resample) on n=24: undefined "
        "(chance agreement is 1), so it only advises"
    )
    out = json.loads(dumps(decision.as_dict()))
    assert out["value"] is None and out["undefined"]["value"] == decision.reason


def test_no_bar_or_a_bar_on_another_metric_advises() -> None:
    assert "no gate bar for role labeller" in decide(LABELLER, _calibration(), None).reason
    other = decide(LABELLER, _calibration(), GateBar("labeller", "accuracy", 0.5))
    assert not other.gates and other.reason.endswith("but the bar reads accuracy")


def test_contrast_bar_for_a_critique() -> None:
    cal = _calibration(CRITIQUE, kind="contrast", metric="contrast_accuracy", n=4, value=0.75)
    bar = bar_for(CRITIQUE, default_bars())
    assert bar == GateBar("critique", "contrast_accuracy", 0.75)
    decision = decide(CRITIQUE, cal, bar)
    assert decision.gates
    assert decision.reason.startswith("critique.stand_alone contrast_accuracy 0.75 [")


def test_mismatched_arguments_are_errors() -> None:
    with pytest.raises(ValueError, match="bar for 'critique'"):
        decide(LABELLER, _calibration(), GateBar("critique", "contrast_accuracy", 0.75))
    with pytest.raises(ValueError, match=r"calibration of critique\.stand_alone"):
        decide(LABELLER, _calibration(CRITIQUE), KAPPA_BAR)


def test_bar_by_judge_name_wins_over_role() -> None:
    named = GateBar("critique.stand_alone", "contrast_accuracy", 0.9)
    assert bar_for(CRITIQUE, [*default_bars(), named]) == named
    assert bar_for(LABELLER, [named]) is None


def test_default_bars_follow_settings() -> None:
    assert default_bars() == (
        GateBar("labeller", "kappa", 0.4),
        GateBar("critique", "contrast_accuracy", 0.75),
        GateBar("entailment", "kappa", 0.4),
        GateBar("sufficiency", "kappa", 0.4),
        GateBar("correctness", "kappa", 0.4),
    )
    custom = JudgeSettings(
        labeller_min_kappa=0.6, critique_min_contrast=0.5, sufficiency_min_kappa=0.3
    )
    assert [b.minimum for b in default_bars(custom)] == [0.6, 0.5, 0.4, 0.3, 0.4]


def test_settings_defaults_env_and_ranges(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no project YAML file in sight
    for name in ("RAGTRAIL_CONFIG", "RAGTRAIL_HOME"):
        monkeypatch.delenv(name, raising=False)
    defaults = Settings().judges
    assert (
        defaults.labeller_min_kappa,
        defaults.critique_min_contrast,
        defaults.entailment_min_kappa,
        defaults.labeller_items_per_label,
        defaults.contrast_pairs_per_criterion,
        defaults.bootstrap_samples,
    ) == (0.4, 0.75, 0.4, 6, 4, 1000)
    monkeypatch.setenv("RAGTRAIL_JUDGES__LABELLER_MIN_KAPPA", "0.55")
    monkeypatch.setenv("RAGTRAIL_JUDGES__CONTRAST_PAIRS_PER_CRITERION", "12")
    settings = Settings()
    assert settings.judges.labeller_min_kappa == 0.55
    assert settings.judges.contrast_pairs_per_criterion == 12
    monkeypatch.setenv("RAGTRAIL_JUDGES__LABELLER_MIN_KAPPA", "1.5")
    with pytest.raises(ValidationError, match="labeller_min_kappa"):
        Settings()
    for bad in ({"critique_min_contrast": -0.1}, {"labeller_items_per_label": 0}):
        with pytest.raises(ValidationError):
            JudgeSettings(**bad)
