"""The gate policy: which judges may reject items, and which may only advise.

A judge gates (its verdicts may reject a candidate) only when the latest calibration of its exact
version meets the bar of its role (or a bar set for it by name). Otherwise it advises: its
verdicts are still stored and shown, but nothing is rejected on them. No calibration, a
calibration of another version, an undefined figure or a figure below the bar all mean "advise",
each with a reason a human reads in the report.

The decision compares the point estimate with the bar. The confidence interval is shown beside it
(with small calibration samples it is wide) but does not decide: requiring the lower bound to clear
the bar would keep every judge advising until samples are large, which the nightly budget does not
allow; the interval tells the reader how much to trust a narrow pass or fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragtrail.config import JudgeSettings
from ragtrail.jsonsafe import JsonObject, check_finite, finite_or_undefined, mark_undefined
from ragtrail.judges.calibration import CONTRAST_ACCURACY, KAPPA
from ragtrail.judges.contract import JudgeRole, JudgeSpec
from ragtrail.records import GateMode
from ragtrail.stats.intervals import method_label
from ragtrail.storage.judge_store import CalibrationRecord

Mode = GateMode
GATE = GateMode.GATE
ADVISE = GateMode.ADVISE


@dataclass(frozen=True)
class GateBar:
    """``metric >= minimum`` for the judges of a role (``"labeller"``) or one judge by name."""

    role_or_judge: str
    metric: str
    minimum: float

    def as_dict(self) -> JsonObject:
        return {"role_or_judge": self.role_or_judge, "metric": self.metric, "minimum": self.minimum}


def default_bars(settings: JudgeSettings | None = None) -> tuple[GateBar, ...]:
    """The bars of the roles calibrated today, from ``settings`` (defaults when None)."""
    s = settings or JudgeSettings()
    return (
        GateBar(JudgeRole.LABELLER.value, KAPPA, s.labeller_min_kappa),
        GateBar(JudgeRole.CRITIQUE.value, CONTRAST_ACCURACY, s.critique_min_contrast),
        GateBar(JudgeRole.ENTAILMENT.value, KAPPA, s.entailment_min_kappa),
        GateBar(JudgeRole.SUFFICIENCY.value, KAPPA, s.sufficiency_min_kappa),
        GateBar(JudgeRole.CORRECTNESS.value, KAPPA, s.correctness_min_kappa),
    )


def bar_for(spec: JudgeSpec, bars: Sequence[GateBar]) -> GateBar | None:
    """The bar set for this judge by name, else the one for its role, else None."""
    by_key = {bar.role_or_judge: bar for bar in bars}
    return by_key.get(spec.name) or by_key.get(spec.role.value)


@dataclass(frozen=True)
class GateDecision:
    """Whether a judge gates or advises, why, and the calibration figure behind it."""

    judge_ref: str
    mode: Mode
    reason: str
    metric: str | None = None
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None
    bar: GateBar | None = None
    ci_method: str | None = None

    @property
    def gates(self) -> bool:
        """True when the judge's verdicts may reject items."""
        return self.mode == GATE

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            "judge": self.judge_ref,
            "mode": self.mode,
            "gates": self.gates,
            "reason": self.reason,
            "metric": self.metric,
            "n": self.n,
            "bar": self.bar.as_dict() if self.bar else None,
        }
        for name in ("value", "ci_low", "ci_high"):
            finite_or_undefined(out, name, getattr(self, name), self.reason)
        if self.ci_method is not None:
            out["ci_method"] = self.ci_method
        if self.n is None:
            mark_undefined(out, "n", "no calibration")
        return check_finite(out, f"gate decision of {self.judge_ref}")


def _number(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.2f}"


def _figure(spec: JudgeSpec, calibration: CalibrationRecord) -> str:
    """``"labeller kappa 0.05 [-0.12, 0.22] BCa on n=24"``, naming undefined parts."""
    if calibration.ci_low is None or calibration.ci_high is None:
        why = calibration.undefined.get("ci_low") or calibration.undefined.get("ci_high") or "?"
        interval = f"(no interval: {why})"
    else:
        label = method_label(calibration.ci_method)
        interval = f"[{calibration.ci_low:.2f}, {calibration.ci_high:.2f}]" + (
            f" {label}" if label else ""
        )
    value = _number(calibration.value)
    return f"{spec.name} {calibration.metric} {value} {interval} on n={calibration.n}"


def decide(
    spec: JudgeSpec, calibration: CalibrationRecord | None, bar: GateBar | None
) -> GateDecision:
    """Gate or advise for ``spec``, from its latest calibration (pass ``JudgeStore.latest(spec.name,
    spec.version)``) and its bar (see :func:`bar_for`). Only the point estimate is compared."""
    if bar is not None and bar.role_or_judge not in (spec.name, spec.role.value):
        raise ValueError(f"bar for {bar.role_or_judge!r} given for {spec.ref} ({spec.role})")
    if calibration is not None and calibration.judge != spec.name:
        raise ValueError(f"calibration of {calibration.judge_ref} given for {spec.ref}")

    def advise(reason: str, **figures: Any) -> GateDecision:
        return GateDecision(spec.ref, ADVISE, reason, bar=bar, **figures)

    if bar is None:
        return advise(f"{spec.name}: no gate bar for role {spec.role.value}, so it only advises")
    if calibration is None:
        return advise(f"{spec.name} {spec.version} has no calibration yet, so it only advises")
    if calibration.judge_version != spec.version:
        return advise(
            f"{spec.name}: the calibration found measured version {calibration.judge_version}, "
            f"not {spec.version}, so it only advises"
        )
    figures = {
        "metric": calibration.metric,
        "value": calibration.value,
        "ci_low": calibration.ci_low,
        "ci_high": calibration.ci_high,
        "n": calibration.n,
        "ci_method": calibration.ci_method,
    }
    figure = _figure(spec, calibration)
    if calibration.metric != bar.metric:
        return advise(f"{figure}, but the bar reads {bar.metric}", **figures)
    if calibration.value is None:
        why = calibration.undefined.get("value", "no reason recorded")
        return advise(f"{figure}: undefined ({why}), so it only advises", **figures)
    if calibration.value < bar.minimum:
        return advise(f"{figure} < {bar.minimum:.2f}", **figures)
    return GateDecision(spec.ref, GATE, f"{figure} >= {bar.minimum:.2f}", bar=bar, **figures)


__all__ = [
    "ADVISE",
    "GATE",
    "GateBar",
    "GateDecision",
    "Mode",
    "bar_for",
    "decide",
    "default_bars",
]
