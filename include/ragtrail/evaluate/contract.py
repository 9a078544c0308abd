"""The contract every evaluation follows, so its numbers can be stored and compared run over run.

An evaluator (retrieval today; citations and sufficiency later) declares:

- ``name``: the evaluation kind stored with every metric point (``metrics_history.evaluation``);
- ``config``: a frozen dataclass of plain JSON values (:meth:`BaseEvaluator.config_dict`);
- ``primary_metric`` and ``greater_is_better``: what a promotion gate or a drift check looks at;
- ``evaluate(inputs) -> EvaluationResult``: per-query values and aggregates with confidence
  intervals, both keyed by *facets* (e.g. ``{"label": "summary", "text_weight": 0.5}``).

Facets are a flat mapping of scalars. :func:`facet_key` turns one into a canonical JSON string (keys
sorted, floats rounded to :data:`FACET_DECIMALS`), the column by which any facet set, present or
future (mixture, scenario, stratum), can be stored and queried without a schema change.

Undefined numbers are ``None`` plus a reason in ``undefined`` (see :mod:`ragtrail.jsonsafe`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from ragtrail.jsonsafe import UNDEFINED_KEY, check_finite, finite_or_undefined

FacetValue = str | int | float | bool | None
Facets = Mapping[str, FacetValue]
FACET_DECIMALS = 6
"""Float facets (text weights) are rounded so that 0.1 and 0.1000000001 are the same facet."""

ConfigT = TypeVar("ConfigT")
InputsT = TypeVar("InputsT")


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
    """A metric aggregated over the queries of one facet set, with its confidence interval."""

    metric: str
    facets: Mapping[str, FacetValue]
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    undefined: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("value", "ci_low", "ci_high"):
            number = getattr(self, name)
            if number is None and name not in self.undefined:
                raise ValueError(f"{self.metric} {dict(self.facets)}: {name} is None, no reason")
            if number is not None and not math.isfinite(number):
                raise ValueError(f"{self.metric} {dict(self.facets)}: {name} is not finite")

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
    ) -> Aggregate:
        """Build one, turning NaN/None numbers into None with ``reasons[field]``."""
        record: dict[str, Any] = {}
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


class BaseEvaluator(ABC, Generic[ConfigT, InputsT]):
    """Base of every evaluator: class-level identity, an instance-level typed config.

    Subclasses set ``name``, ``primary_metric`` and ``greater_is_better`` and implement
    :meth:`evaluate`. ``config`` must be a dataclass whose fields are JSON values.
    """

    name: ClassVar[str]
    primary_metric: ClassVar[str]
    greater_is_better: ClassVar[bool] = True

    def __init__(self, config: ConfigT) -> None:
        if not dataclasses.is_dataclass(config) or isinstance(config, type):
            raise TypeError(f"{type(self).__name__} needs a dataclass config instance")
        self.config = config

    def config_dict(self) -> dict[str, Any]:
        """The config as plain JSON (tuples become lists); refuses NaN and non-JSON values."""
        data = json.loads(json.dumps(dataclasses.asdict(self.config)))  # type: ignore[call-overload]
        return check_finite(data, f"{self.name} config")

    @abstractmethod
    def evaluate(self, inputs: InputsT) -> EvaluationResult:
        """Score ``inputs``; deterministic for a given config."""

    def result(
        self, queries: Iterable[QueryValue], aggregates: Iterable[Aggregate]
    ) -> EvaluationResult:
        """Wrap values in an :class:`EvaluationResult` carrying this evaluator's identity."""
        return EvaluationResult(
            evaluator=self.name,
            config=self.config_dict(),
            primary_metric=self.primary_metric,
            greater_is_better=self.greater_is_better,
            queries=tuple(queries),
            aggregates=tuple(aggregates),
        )


EvaluatorT = TypeVar("EvaluatorT", bound=type[BaseEvaluator[Any, Any]])


class EvaluatorRegistry:
    """Evaluator name -> class. Registering a taken name fails unless ``replace=True``."""

    def __init__(self) -> None:
        self._classes: dict[str, type[BaseEvaluator[Any, Any]]] = {}

    def register(self, cls: EvaluatorT, *, replace: bool = False) -> EvaluatorT:
        name = getattr(cls, "name", "")
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ValueError(f"{cls.__name__} needs a non-empty name without spaces")
        for attr in ("primary_metric", "greater_is_better"):
            if not hasattr(cls, attr):
                raise ValueError(f"{cls.__name__} does not declare {attr}")
        taken = self._classes.get(name)
        if taken is not None and taken is not cls and not replace:
            raise ValueError(
                f"evaluator {name!r} is already registered ({taken.__qualname__}); "
                "pass replace=True to overwrite it"
            )
        self._classes[name] = cls
        return cls

    def get(self, name: str) -> type[BaseEvaluator[Any, Any]]:
        try:
            return self._classes[name]
        except KeyError:
            raise KeyError(
                f"unknown evaluator {name!r}; known: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._classes)

    def __contains__(self, name: object) -> bool:
        return name in self._classes


EVALUATORS = EvaluatorRegistry()


def register_evaluator(cls: EvaluatorT) -> EvaluatorT:
    """Class decorator: add ``cls`` to :data:`EVALUATORS` (refusing a silent overwrite)."""
    return EVALUATORS.register(cls)
