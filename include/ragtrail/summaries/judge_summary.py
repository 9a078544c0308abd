"""A judge's gate decision as every summary stores it: whether the judge's verdicts could decide
anything in a run (gate) or only advised, why, and the calibration figure behind it (the JSON of
:class:`ragtrail.judges.gate.GateDecision`)."""

from __future__ import annotations

from pydantic import Field

from ragtrail.records import GateMode
from ragtrail.summaries.base import Record, _empty


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
