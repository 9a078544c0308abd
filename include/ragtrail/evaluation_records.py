"""Evaluation results as data: facets, per-query values, aggregates (the bottom layer).

Kept apart from the evaluator contract (:mod:`ragtrail.evaluate.contract`) so that the metrics
store (:mod:`ragtrail.storage.runs_store`) can persist results without importing evaluation code.

Facets are a flat mapping of scalars. :func:`facet_key` turns one into a canonical JSON string
(keys sorted, floats rounded to :data:`FACET_DECIMALS`), the column by which any facet set, present
or future (mixture, scenario, stratum), can be stored and queried without a schema change.
Undefined numbers are ``None`` plus a reason in ``undefined`` (see :mod:`ragtrail.jsonsafe`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragtrail.jsonsafe import UNDEFINED_KEY, JsonObject, finite_or_undefined
from ragtrail.stats.intervals import Interval

FacetValue = str | int | float | bool | None
Facets = Mapping[str, FacetValue]
FACET_DECIMALS = 6
"""Float facets (text weights) are rounded so that 0.1 and 0.1000000001 are the same facet."""


def canonical_facets(facets: Facets) -> dict[str, FacetValue]:
    """Facets with sorted keys and rounded floats; refuses nested values and non-finite floats."""
    out: dict[str, FacetValue] = {}
    for key in sorted(facets):
        value = facets[key]
        if not isinstance(key, str) or not key:
            raise ValueError(f"facet names must be non-empty strings, got {key!r}")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError(f"facet {key!r} is not finite: {value!r}")
            value = round(value, FACET_DECIMALS) + 0.0  # + 0.0 turns -0.0 into 0.0
        elif value is not None and not isinstance(value, str | int | bool):
            raise ValueError(f"facet {key!r} must be a scalar, got {type(value).__name__}")
        out[key] = value
    return out


def facet_key(facets: Facets) -> str:
    """Canonical JSON of ``facets``: the same facets always give the same string."""
    return json.dumps(canonical_facets(facets), sort_keys=True, separators=(",", ":"))


def parse_facet_key(key: str) -> dict[str, FacetValue]:
    """Inverse of :func:`facet_key`."""
    value = json.loads(key)
    if not isinstance(value, dict):
        raise ValueError(f"not a facet key: {key!r}")
    return value


@dataclass(frozen=True)
class QueryValue:
    """One metric value of one query under one facet set (long format)."""

    qid: str
    facets: Mapping[str, FacetValue]
    metric: str
    value: float | None
    undefined_reason: str | None = None

    def __post_init__(self) -> None:
        if self.value is None and not self.undefined_reason:
            raise ValueError(f"query {self.qid!r} {self.metric}: a missing value needs a reason")
        if self.value is not None and not math.isfinite(self.value):
            raise ValueError(f"query {self.qid!r} {self.metric}: non-finite value {self.value!r}")


@dataclass(frozen=True)
class Aggregate:
    """A metric aggregated over the queries of one facet set, with its confidence interval and
    the interval's method (:class:`ragtrail.stats.intervals.IntervalMethod`)."""

    metric: str
    facets: Mapping[str, FacetValue]
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    undefined: Mapping[str, str] = field(default_factory=dict)
    ci_method: str | None = None

    def __post_init__(self) -> None:
        for name in ("value", "ci_low", "ci_high"):
            number = getattr(self, name)
            if number is None and name not in self.undefined:
                raise ValueError(f"{self.metric} {dict(self.facets)}: {name} is None, no reason")
            if number is not None and not math.isfinite(number):
                raise ValueError(f"{self.metric} {dict(self.facets)}: {name} is not finite")

    def as_dict(self) -> JsonObject:
        """Strict JSON: metric, facets, value, CI, n, and ``undefined`` reasons when any."""
        out: JsonObject = {
            "metric": self.metric,
            "facets": dict(self.facets),
            "value": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n": self.n,
        }
        if self.ci_method is not None:
            out["ci_method"] = self.ci_method
        if self.undefined:
            out["undefined"] = dict(self.undefined)
        return out

    @classmethod
    def of(
        cls,
        metric: str,
        facets: Facets,
        *,
        value: float | None,
        ci_low: float | None,
        ci_high: float | None,
        n: int,
        reasons: Mapping[str, str],
        ci_method: str | None = None,
    ) -> Aggregate:
        """Build one, turning NaN/None numbers into None with ``reasons[field]``."""
        record: JsonObject = {}
        for name, number in (("value", value), ("ci_low", ci_low), ("ci_high", ci_high)):
            finite_or_undefined(record, name, number, reasons.get(name, "not computed"))
        return cls(
            metric=metric,
            facets=canonical_facets(facets),
            value=record["value"],
            ci_low=record["ci_low"],
            ci_high=record["ci_high"],
            n=n,
            undefined=dict(record.get(UNDEFINED_KEY, {})),
            ci_method=ci_method,
        )

    @classmethod
    def estimated(
        cls,
        metric: str,
        facets: Facets,
        *,
        value: float | None,
        interval: Interval,
        reason: str = "",
    ) -> Aggregate:
        """Build one from a value and its :class:`~ragtrail.stats.intervals.Interval` (a null
        interval carries its reason; ``reason`` explains a null value)."""
        return cls.of(
            metric,
            facets,
            value=value,
            ci_low=interval.low,
            ci_high=interval.high,
            n=interval.n,
            reasons={"value": reason or interval.reason}
            | dict.fromkeys(("ci_low", "ci_high"), interval.reason),
            ci_method=interval.method.value,
        )

    @property
    def facet_key(self) -> str:
        return facet_key(self.facets)


@dataclass(frozen=True)
class EvaluationResult:
    """What an evaluator hands back: per-query values and aggregates, both faceted."""

    evaluator: str
    config: Mapping[str, Any]
    primary_metric: str
    greater_is_better: bool
    queries: tuple[QueryValue, ...]
    aggregates: tuple[Aggregate, ...]

    def metrics(self) -> list[str]:
        """Metric ids in first-seen order."""
        return list(dict.fromkeys(a.metric for a in self.aggregates))
