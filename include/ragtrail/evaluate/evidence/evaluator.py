"""The ``evidence`` evaluator: QA accuracy and evidence quality per method and noise level.

Each :class:`EvidenceRow` is one question answered by the generator from one kind of context
(``method``): the trained extractor's evidence, the untrained base extractor's, the extractive
baseline's, the full passages, or nothing at all; at one noise-to-signal ratio (irrelevant
passages added, METHODS §10). Per facet ``{"method", "noise"}`` it stores:

- ``correct``: the share of scored answers that are right, with a Wilson interval;
- ``faithfulness``, ``silver_faithfulness`` (against the relevant passages only),
  ``helpfulness``, ``conciseness``, ``compression`` and ``evidence_tokens``: means over the rows
  where the value is defined, with the interval :func:`ragtrail.stats.intervals.mean_interval`
  chooses for their range and n;
- ``correct_diff_vs_full`` / ``correct_diff_vs_none``: the paired difference in correctness with
  the full passages at the same noise level / with no context (noise does not reach a
  closed-book answer, so it is stored at noise 0 only), over the questions scored in both,
  with a paired interval (questions are the unit, not answers).

A cell with nothing to average is stored undefined with the reason, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragtrail.evaluate.comparison.paired import NO_PAIRS, paired_interval
from ragtrail.evaluate.contract import (
    FACET_DECIMALS,
    Aggregate,
    BaseEvaluator,
    EvaluationResult,
    QueryValue,
    register_evaluator,
)
from ragtrail.records import LABELS
from ragtrail.stats.intervals import mean_interval, proportion_interval

METHODS: tuple[str, ...] = ("extractor", "base", "extractive", "full", "none")
"""What the generator read: trained extractor's evidence, base extractor's evidence, the
extractive baseline's sentences, the full passages, nothing (closed book)."""
FULL, NONE = "full", "none"
CORRECT = "correct"
CONTINUOUS_METRICS: tuple[str, ...] = (
    "faithfulness",
    "silver_faithfulness",
    "helpfulness",
    "conciseness",
    "compression",
    "evidence_tokens",
)
DIFF_METRICS: dict[str, str] = {"correct_diff_vs_full": FULL, "correct_diff_vs_none": NONE}
"""Paired metric -> the reference method it is measured against."""
NO_SCORED = "no scored answer in this cell"
_FIELDS = ("value", "ci_low", "ci_high")
_UNIT_SCORES = ("faithfulness", "silver_faithfulness", "helpfulness")
_BOUNDS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(_UNIT_SCORES, (0.0, 1.0)),
    "conciseness": (-1.0, 1.0),  # a cosine
}
"""The range of each bounded metric (compression and token counts are unbounded)."""

__all__ = [
    "CONTINUOUS_METRICS",
    "CORRECT",
    "DIFF_METRICS",
    "METHODS",
    "EvidenceEvalConfig",
    "EvidenceEvaluator",
    "EvidenceInputs",
    "EvidenceRow",
    "check_rows",
]


@dataclass(frozen=True)
class EvidenceRow:
    """One question answered from one method's context at one noise ratio, with its measures.

    ``correct`` is None when the answer was not scored, and ``unscored_reason`` says why (one or
    the other, never both). Any measure may be None when it does not apply (e.g. helpfulness of
    the full passages) or could not be computed.
    """

    qid: str
    label: str
    method: str
    noise: float
    correct: bool | None
    unscored_reason: str | None = None
    faithfulness: float | None = None
    silver_faithfulness: float | None = None
    helpfulness: float | None = None
    conciseness: float | None = None
    compression: float | None = None
    evidence_tokens: int | None = None
    passage_tokens: int | None = None

    def __post_init__(self) -> None:
        where = f"evidence row {self.qid!r} ({self.method}, noise {self.noise})"
        if not self.qid.strip():
            raise ValueError(f"{where}: empty qid")
        if self.label not in LABELS:
            raise ValueError(f"{where}: label {self.label!r} is not one of {list(LABELS)}")
        if self.method not in METHODS:
            raise ValueError(f"{where}: method {self.method!r} is not one of {list(METHODS)}")
        if isinstance(self.noise, bool) or not (math.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"{where}: noise must be a finite ratio >= 0")
        if (self.correct is None) == (self.unscored_reason is None):
            raise ValueError(f"{where}: give correct or an unscored_reason, not both or neither")
        for name in (*CONTINUOUS_METRICS, "passage_tokens"):
            value = getattr(self, name)
            if value is None:
                continue
            if not math.isfinite(value):
                raise ValueError(f"{where}: {name} is not finite")
            low, high = self._bounds(name)
            if not low <= value <= high:
                raise ValueError(f"{where}: {name}={value} is outside [{low}, {high}]")

    @staticmethod
    def _bounds(name: str) -> tuple[float, float]:
        if name in _UNIT_SCORES:
            return 0.0, 1.0
        if name == "conciseness":
            return -1.0, 1.0  # a cosine
        return 0.0, math.inf

    @property
    def cell(self) -> tuple[str, float]:
        """The (method, noise) facet cell, noise rounded as facets are."""
        return self.method, round(float(self.noise), FACET_DECIMALS) + 0.0

    @property
    def facets(self) -> dict[str, str | float]:
        method, noise = self.cell
        return {"method": method, "noise": noise}


@dataclass(frozen=True)
class EvidenceEvalConfig:
    """Bootstrap settings of the continuous and paired intervals (``confidence`` also sets the
    Wilson interval's level)."""

    bootstrap_samples: int = 1000
    confidence: float = 0.95
    seed: int = 13

    def __post_init__(self) -> None:
        if self.bootstrap_samples < 1:
            raise ValueError(f"bootstrap_samples must be >= 1, got {self.bootstrap_samples}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")


@dataclass(frozen=True)
class EvidenceInputs:
    """The rows of one night's evidence evaluation."""

    rows: tuple[EvidenceRow, ...]


def check_rows(rows: Sequence[EvidenceRow]) -> None:
    """Refuse a (qid, method, noise) given twice, listing every repeat by row."""
    seen: dict[tuple[str, str, float], int] = {}
    problems = []
    for i, row in enumerate(rows):
        key = (row.qid, *row.cell)
        if key in seen:
            problems.append(f"row {i} repeats row {seen[key]} ({key})")
        seen.setdefault(key, i)
    if problems:
        raise ValueError(f"{len(problems)} repeated evidence row(s): " + "; ".join(problems))


def _cells(rows: Sequence[EvidenceRow]) -> dict[tuple[str, float], list[EvidenceRow]]:
    """Rows by (method, noise), methods in :data:`METHODS` order, noise ascending."""
    cells: dict[tuple[str, float], list[EvidenceRow]] = {}
    for row in rows:
        cells.setdefault(row.cell, []).append(row)
    return dict(sorted(cells.items(), key=lambda kv: (METHODS.index(kv[0][0]), kv[0][1])))


@register_evaluator
class EvidenceEvaluator(BaseEvaluator[EvidenceEvalConfig, EvidenceInputs]):
    """Correctness and evidence measures per method and noise, and paired gains over the full
    passages and over no context (see the module docstring)."""

    name = "evidence"
    primary_metric = CORRECT
    greater_is_better = True

    def evaluate(self, inputs: EvidenceInputs) -> EvaluationResult:
        check_rows(inputs.rows)
        cells = _cells(inputs.rows)
        queries = [qv for row in inputs.rows for qv in _query_values(row)]
        aggregates = [agg for cell in cells.values() for agg in self._cell_aggregates(cell)]
        for metric, reference in DIFF_METRICS.items():
            for (method, noise), cell in cells.items():
                # a closed-book answer sees no passages, so every noise level pairs with it
                base = cells.get((reference, noise)) or (
                    cells.get((NONE, 0.0)) if reference == NONE else None
                )
                if method != reference and base is not None:
                    aggregates.append(self._paired(metric, cell, base))
        return self.result(queries, aggregates)

    def _cell_aggregates(self, cell: Sequence[EvidenceRow]) -> list[Aggregate]:
        facets = cell[0].facets
        scored = [row.correct for row in cell if row.correct is not None]
        out = [self._proportion(facets, sum(scored), len(scored))]
        for metric in CONTINUOUS_METRICS:
            values = [float(v) for row in cell if (v := getattr(row, metric)) is not None]
            out.append(self._mean(metric, facets, values))
        return out

    def _proportion(self, facets: Mapping[str, str | float], hits: int, n: int) -> Aggregate:
        if n == 0:
            return _undefined(CORRECT, facets, NO_SCORED)
        interval = proportion_interval(hits, n, self.config.confidence)
        return Aggregate.estimated(CORRECT, facets, value=hits / n, interval=interval)

    def _mean(
        self, metric: str, facets: Mapping[str, str | float], values: list[float]
    ) -> Aggregate:
        if not values:
            return _undefined(metric, facets, f"no {metric} value in this cell")
        interval = mean_interval(
            values,
            bounds=_BOUNDS.get(metric),
            confidence=self.config.confidence,
            n_resamples=self.config.bootstrap_samples,
            seed=self.config.seed,
        )
        value = math.fsum(values) / len(values)
        return Aggregate.estimated(metric, facets, value=value, interval=interval)

    def _paired(
        self, metric: str, cell: Sequence[EvidenceRow], base: Sequence[EvidenceRow]
    ) -> Aggregate:
        """``mean(correct_cell - correct_base)`` over the qids scored in both (sorted by qid, so
        the bootstrap does not depend on row order)."""
        facets = cell[0].facets
        ours = {row.qid: float(row.correct) for row in cell if row.correct is not None}
        theirs = {row.qid: float(row.correct) for row in base if row.correct is not None}
        qids = sorted(ours.keys() & theirs.keys())
        if not qids:
            return _undefined(metric, facets, NO_PAIRS)
        a = [theirs[q] for q in qids]
        b = [ours[q] for q in qids]
        interval = paired_interval(
            a,
            b,
            bounds=(-1.0, 1.0),
            n_resamples=self.config.bootstrap_samples,
            confidence=self.config.confidence,
            seed=self.config.seed,
        )
        diff = math.fsum(y - x for x, y in zip(a, b, strict=True)) / len(qids)
        return Aggregate.estimated(metric, facets, value=diff, interval=interval)


def _query_values(row: EvidenceRow) -> list[QueryValue]:
    """The row's defined values (``correct`` as 1.0/0.0); undefined ones are left out."""
    facets = row.facets
    out = []
    if row.correct is not None:
        out.append(QueryValue(row.qid, facets, CORRECT, float(row.correct)))
    for metric in CONTINUOUS_METRICS:
        value = getattr(row, metric)
        if value is not None:
            out.append(QueryValue(row.qid, facets, metric, float(value)))
    return out


def _undefined(metric: str, facets: Mapping[str, str | float], reason: str) -> Aggregate:
    return Aggregate.of(
        metric,
        facets,
        value=None,
        ci_low=None,
        ci_high=None,
        n=0,
        reasons=dict.fromkeys(_FIELDS, reason),
    )
