"""A judge's gate decision as every summary stores it, and a stored calibration as the CLI shows
it. The gate decision: whether the judge's verdicts could decide
anything in a run (gate) or only advised, why, and the calibration figure behind it (the JSON of
:class:`ragtrail.judges.gate.GateDecision`)."""

from __future__ import annotations

from pydantic import Field

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import GateMode
from ragtrail.summaries.base import Figure, Record, _empty, is_none


class JudgeGateBar(Record):
    """``metric >= minimum`` for the judges of a role or one judge by name."""

    role_or_judge: str
    metric: str
    minimum: float


class JudgeGate(Record):
    """Whether a judge gated or only advised, why, and the calibration figure behind it (a null
    figure says why under ``undefined``, left out when every figure is defined). Not a
    :class:`~ragtrail.summaries.base.WithUndefined`: its ``reason`` field would hide that class's
    ``reason()``."""

    judge: str
    mode: GateMode
    gates: bool
    reason: str
    metric: str | None
    n: int | None
    bar: JudgeGateBar | None
    value: float | None
    undefined: dict[str, str] = Field(default_factory=dict, exclude_if=_empty)
    ci_low: float | None
    ci_high: float | None
    ci_method: str | None = Field(None, exclude_if=is_none)


class CalibrationView(Record):
    """A stored calibration as ``ragtrail judge calibrate`` shows it: the judge and version, the
    reference it was measured on, its figures as the calibration wrote them (``metrics``: a
    categorical calibration's accuracy, kappa, confusion matrix and per-class precision/recall,
    or a contrast calibration's win rate), and the gate decision they lead to."""

    judge: str
    version: str
    reference: str
    created_at: str
    metrics: JsonObject
    details_uri: str | None
    decision: JudgeGate

    def confusion(self) -> dict[str, dict[str, int]]:
        """Reference category -> judged category -> count (empty for a contrast calibration)."""
        table = self.metrics.get("confusion") or {}
        return {str(ref): {str(k): int(v) for k, v in row.items()} for ref, row in table.items()}

    def figure(self, name: str) -> Figure | None:
        """One of the calibration's figures (``accuracy``, ``kappa``, ``precision``, ...)."""
        value = self.metrics.get(name)
        if not isinstance(value, dict):
            return None
        return Figure(**{k: value.get(k) for k in ("value", "ci_low", "ci_high", "n", "ci_method")})
