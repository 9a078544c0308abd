"""The contract every evaluation follows, so its numbers can be stored and compared run over run.

Every evaluator (retrieval, citations, attribution, C/A/H, selective generation, evidence; the
list is :func:`ragtrail.evaluate.registered.registered_evaluators`) declares:

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
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar, Generic, TypeVar

from ragtrail.evaluation_records import (
    FACET_DECIMALS,
    Aggregate,
    EvaluationResult,
    Facets,
    FacetValue,
    QueryValue,
    canonical_facets,
    facet_key,
    parse_facet_key,
)
from ragtrail.jsonsafe import JsonObject, check_finite

__all__ = [
    "EVALUATORS",
    "FACET_DECIMALS",
    "Aggregate",
    "BaseEvaluator",
    "EvaluationResult",
    "EvaluatorRegistry",
    "FacetValue",
    "Facets",
    "QueryValue",
    "canonical_facets",
    "facet_key",
    "parse_facet_key",
    "register_evaluator",
]

ConfigT = TypeVar("ConfigT")
InputsT = TypeVar("InputsT")


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

    def config_dict(self) -> JsonObject:
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
