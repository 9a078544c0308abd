"""Judge calibrations (table ``judge_calibrations``): what each judge version measured, on what.

The gate policy reads the latest calibration of a judge's exact version: a calibration of another
version says nothing about this one. Rows are appended, never replaced, so the history of a
judge's agreement with its references stays visible. This layer sits below ``ragtrail.judges``,
so a judge arrives here as its spec dict (``JudgeSpec.as_dict()``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import RowMapping

from ragtrail.jsonsafe import JsonObject, check_finite
from ragtrail.redact import redact_json
from ragtrail.storage import tables as t
from ragtrail.storage.db import utcnow, write_transaction
from ragtrail.storage.sql import SqlStore, utc

CALIBRATION_KINDS = ("categorical", "contrast")
_NUMBERS = ("value", "ci_low", "ci_high")


@dataclass(frozen=True)
class CalibrationRecord:
    """One row of ``judge_calibrations``.

    ``value``/``ci_low``/``ci_high`` are the headline ``metric`` (None when undefined, with the
    reason in ``undefined``); ``metrics`` the full calibration; ``reference`` what it was
    measured on (``golden:<set version>``, ``file:<sha256 prefix>``).
    """

    id: int
    judge: str
    judge_version: str
    role: str
    kind: str
    spec: JsonObject
    reference: str
    n: int
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    undefined: dict[str, str]
    metrics: JsonObject
    details_uri: str | None
    created_at: datetime

    @property
    def judge_ref(self) -> str:
        """``name@version`` of the judge measured."""
        return f"{self.judge}@{self.judge_version}"

    @property
    def ci_method(self) -> str | None:
        """The headline interval's method, as the calibration recorded it (None before methods
        were recorded)."""
        figure = self.metrics.get(self.metric)
        return figure.get("ci_method") if isinstance(figure, dict) else None


def _identity(spec: Mapping[str, Any]) -> tuple[str, str, str]:
    missing = [k for k in ("name", "version", "role") if not str(spec.get(k) or "").strip()]
    if missing:
        raise ValueError(f"judge spec lacks {missing}: {dict(spec)}")
    return str(spec["name"]), str(spec["version"]), str(spec["role"])


def _check_numbers(numbers: Mapping[str, float | None], undefined: Mapping[str, str]) -> list[str]:
    problems = []
    for name, number in numbers.items():
        if number is None:
            if not undefined.get(name):
                problems.append(f"{name} is None without a reason in undefined")
        elif not math.isfinite(number):
            problems.append(f"{name} is {number}: undefined values are None with a reason")
    return problems


class JudgeStore(SqlStore):
    """Append and read judge calibrations on SQLite or PostgreSQL."""

    def record(
        self,
        *,
        spec: Mapping[str, Any],
        kind: str,
        reference: str,
        n: int,
        metric: str,
        value: float | None,
        ci_low: float | None,
        ci_high: float | None,
        metrics: Mapping[str, Any],
        undefined: Mapping[str, str] | None = None,
        details_uri: str | None = None,
    ) -> CalibrationRecord:
        """Append one calibration of the judge ``spec`` names (its ``name``, ``version``, ``role``).

        Every problem (unknown kind, empty reference, negative n, a None number without a reason,
        a non-finite number anywhere) is reported in one ValueError and nothing is written.
        """
        judge, version, role = _identity(spec)
        undefined = dict(undefined or {})
        numbers = {"value": value, "ci_low": ci_low, "ci_high": ci_high}
        problems = _check_numbers(numbers, undefined)
        if kind not in CALIBRATION_KINDS:
            problems.append(f"kind {kind!r} is not one of {CALIBRATION_KINDS}")
        if not reference.strip():
            problems.append("reference is empty")
        if not metric.strip():
            problems.append("metric is empty")
        if n < 0:
            problems.append(f"n is {n}")
        if problems:
            raise ValueError(f"calibration of {judge}@{version}: " + "; ".join(problems))
        row: dict[str, Any] = {
            "judge": judge,
            "judge_version": version,
            "role": role,
            "kind": kind,
            "spec": redact_json(dict(spec)),  # a judge's model spec: no credentials stored
            "reference": reference,
            "n": n,
            "metric": metric,
            **numbers,
            "undefined": undefined,
            "metrics": dict(metrics),
            "details_uri": details_uri,
            "created_at": utcnow(),
        }
        check_finite(row, f"calibration of {judge}@{version}")
        with write_transaction(self.engine) as conn:
            result = conn.execute(t.judge_calibrations.insert().values(**row))
            (row["id"],) = result.inserted_primary_key
        return _record(row)

    def latest(self, judge: str, judge_version: str) -> CalibrationRecord | None:
        """The most recent calibration of exactly this judge version, or None."""
        c = t.judge_calibrations.c
        query = (
            select(t.judge_calibrations)
            .where(c.judge == judge, c.judge_version == judge_version)
            .order_by(c.created_at.desc(), c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _record(row)

    def history(self, judge: str | None = None, limit: int = 50) -> list[CalibrationRecord]:
        """The ``limit`` most recent calibrations (of one judge, any version), newest first."""
        c = t.judge_calibrations.c
        query = select(t.judge_calibrations)
        if judge is not None:
            query = query.where(c.judge == judge)
        query = query.order_by(c.created_at.desc(), c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query).mappings()]


def _record(row: RowMapping | Mapping[str, Any]) -> CalibrationRecord:
    return CalibrationRecord(
        id=int(row["id"]),
        judge=row["judge"],
        judge_version=row["judge_version"],
        role=row["role"],
        kind=row["kind"],
        spec=dict(row["spec"]),
        reference=row["reference"],
        n=int(row["n"]),
        metric=row["metric"],
        value=row["value"],
        ci_low=row["ci_low"],
        ci_high=row["ci_high"],
        undefined=dict(row["undefined"]),
        metrics=dict(row["metrics"]),
        details_uri=row["details_uri"],
        created_at=utc(row["created_at"]),
    )


__all__ = ["CALIBRATION_KINDS", "CalibrationRecord", "JudgeStore"]
