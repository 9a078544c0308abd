"""Citation evaluation with relevance mixtures (METHODS §6): the ``citations`` evaluator and the
one entry point the pipeline calls, :func:`evaluate_mixtures`.

Two systems are scored on the same mixtures in the same run: ``model`` (the answering model's
citations) and ``random`` (the seeded random baseline of :mod:`ragtrail.evaluate.citations.random_baseline`,
``baseline_repeats`` draws per mixture, the query value being their mean).

Aggregates are means over queries with a seeded 95% bootstrap CI and n, for every
``(system, mixture, label)`` and, with ``label = "answerable"``, over the queries of every
answerable label together. Precision, recall and F1 are averaged only over answerable mixtures;
unanswerable ones are summarised by ``cited_any`` and ``abstained``. A failed model answer is
left out of every metric average and counted by ``failure_rate``; the baseline scores every
mixture. Undefined values follow :mod:`ragtrail.evaluate.citations.rage_metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ragtrail.evaluate.citations.mixture_answers import (
    DEFAULT_ANSWER_PARAMS,
    MixtureAnswer,
    answer_mixtures,
)
from ragtrail.evaluate.citations.mixtures import (
    DEFAULT_SPEC,
    MIXTURE_TYPES,
    Mixture,
    MixtureCorpus,
    MixtureSet,
    MixtureSpec,
    MixtureType,
    build_mixtures,
    stable_seed,
)
from ragtrail.evaluate.citations.rage_metrics import score_citations
from ragtrail.evaluate.citations.random_baseline import (
    expected_random_scores,
    simulate_random_citations,
)
from ragtrail.evaluate.contract import (
    Aggregate,
    BaseEvaluator,
    EvaluationResult,
    QueryValue,
    register_evaluator,
)
from ragtrail.jsonsafe import JsonObject, check_finite
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.records import LABELS, QAItem, QuestionLabel
from ragtrail.stats.intervals import mean_interval

MODEL = "model"
RANDOM = "random"
ANSWERABLE = "answerable"
"""Pseudo-label of the aggregates over all answerable labels together."""

SCORE_METRICS = ("citation_precision", "citation_recall", "citation_f1", "distinct_citations")
ANSWER_METRICS = ("invalid_citation_rate", "answer_words", "cited_any", "abstained")
UNANSWERABLE_METRICS = ("cited_any", "abstained", "distinct_citations", "answer_words")
FAILURE_METRIC = "failure_rate"
COUNT_METRICS = frozenset({"distinct_citations", "answer_words"})
"""Metrics that count (unbounded): their intervals are not clipped to [0, 1]."""
NO_VALUE = "no query of this group has a defined value"


@dataclass(frozen=True)
class CitationEvalConfig:
    """Settings of a citation evaluation (all plain JSON, stored with every result)."""

    mixture_spec: str = DEFAULT_SPEC
    mixture_types: tuple[str, ...] = MIXTURE_TYPES
    seed: int = 13
    baseline_repeats: int = 200
    bootstrap_samples: int = 1000
    seemingly_pool: int = 10
    exclude_ground_documents: bool = True

    def __post_init__(self) -> None:
        MixtureSpec.parse(self.mixture_spec)
        unknown = [t for t in self.mixture_types if t not in MIXTURE_TYPES]
        if unknown or not self.mixture_types:
            raise ValueError(f"mixture_types must be some of {MIXTURE_TYPES}, got {unknown}")
        if self.baseline_repeats < 1:
            raise ValueError("baseline_repeats must be >= 1")
        if self.bootstrap_samples < 0:
            raise ValueError("bootstrap_samples must be >= 0")

    @property
    def spec(self) -> MixtureSpec:
        return MixtureSpec.parse(self.mixture_spec)


@dataclass(frozen=True)
class CitationInputs:
    """Mixtures and the model's answers to them, index for index."""

    mixtures: Sequence[Mixture]
    answers: Sequence[MixtureAnswer]

    def __post_init__(self) -> None:
        if len(self.mixtures) != len(self.answers):
            raise ValueError(f"{len(self.mixtures)} mixtures but {len(self.answers)} answers")
        for m, a in zip(self.mixtures, self.answers, strict=True):
            if (m.qid, m.mixture_type) != (a.qid, a.mixture_type):
                raise ValueError(
                    f"answer {a.qid}/{a.mixture_type} is not for {m.qid}/{m.mixture_type}"
                )


@register_evaluator
class CitationEvaluator(BaseEvaluator[CitationEvalConfig, CitationInputs]):
    name = "citations"
    primary_metric = "citation_f1"
    greater_is_better = True

    def evaluate(self, inputs: CitationInputs) -> EvaluationResult:
        return self.result_of(self.rows(inputs))

    def rows(self, inputs: CitationInputs) -> list[JsonObject]:
        """Per-query rows: one ``model`` and one ``random`` row per mixture."""
        out = []
        for mixture, answer in zip(inputs.mixtures, inputs.answers, strict=True):
            out.append(_model_row(mixture, answer))
            out.append(self._random_row(mixture))
        return out

    def result_of(self, rows: Sequence[Mapping[str, Any]]) -> EvaluationResult:
        queries = [qv for row in rows for qv in _query_values(row)]
        return self.result(queries, self._aggregates(rows))

    def _random_row(self, mixture: Mixture) -> JsonObject:
        rng = np.random.default_rng(
            stable_seed(self.config.seed, mixture.qid, mixture.mixture_type, RANDOM)
        )
        sim = simulate_random_citations(
            len(mixture.passages), mixture.relevant_numbers, rng, self.config.baseline_repeats
        )
        values: dict[str, float | None] = {
            "citation_precision": sim.precision,
            "citation_recall": sim.recall,
            "citation_f1": sim.f1,
            "distinct_citations": sim.distinct_citations,
        }
        undefined = {
            k: "no relevant passage in the mixture" for k, v in values.items() if v is None
        }
        return _row(mixture, RANDOM, "ok", values, undefined)

    def _aggregates(self, rows: Sequence[Mapping[str, Any]]) -> list[Aggregate]:
        frame = pd.DataFrame(rows)
        out: list[Aggregate] = []
        if frame.empty:
            return out
        for system in (MODEL, RANDOM):
            for mixture_type in self.config.mixture_types:
                cell = frame[(frame["system"] == system) & (frame["mixture"] == mixture_type)]
                labels = [lb for lb in LABELS if (cell["label"] == lb).any()]
                groups = [(lb, cell[cell["label"] == lb]) for lb in labels]
                answerable = cell[cell["label"] != QuestionLabel.UNANSWERABLE]
                if len(answerable):
                    groups.append((ANSWERABLE, answerable))
                for label, group in groups:
                    facets = {"system": system, "mixture": mixture_type, "label": label}
                    out.extend(self._group_aggregates(group, facets, system, label))
        return out

    def _group_aggregates(
        self, group: pd.DataFrame, facets: dict[str, str], system: str, label: str
    ) -> list[Aggregate]:
        if label == QuestionLabel.UNANSWERABLE:
            metrics: tuple[str, ...] = UNANSWERABLE_METRICS
        else:
            metrics = SCORE_METRICS + (ANSWER_METRICS if system == MODEL else ())
        if system == RANDOM:
            metrics = tuple(m for m in metrics if m in SCORE_METRICS)
        out = []
        ok = group[group["status"] == "ok"]
        for metric in metrics:
            values = [float(v) for v in ok[metric] if v is not None and not pd.isna(v)]
            out.append(self._aggregate(metric, facets, values))
        if system == MODEL:
            failed = (group["status"] == "failed").astype(float).tolist()
            out.append(self._aggregate(FAILURE_METRIC, facets, failed))
        return out

    def _aggregate(self, metric: str, facets: dict[str, str], values: list[float]) -> Aggregate:
        if not values:
            return Aggregate.of(
                metric, facets, value=None, ci_low=None, ci_high=None, n=0,
                reasons={"value": NO_VALUE, "ci_low": NO_VALUE, "ci_high": NO_VALUE},
            )  # fmt: skip
        seed = stable_seed(self.config.seed, metric, sorted(facets.items())) % 2**32
        interval = mean_interval(
            values,
            bounds=None if metric in COUNT_METRICS else (0.0, 1.0),
            n_resamples=self.config.bootstrap_samples,
            seed=seed,
        )
        return Aggregate.estimated(metric, facets, value=float(np.mean(values)), interval=interval)


def _row(
    mixture: Mixture,
    system: str,
    status: str,
    values: Mapping[str, float | None],
    undefined: Mapping[str, str],
) -> JsonObject:
    return {
        "qid": mixture.qid,
        "label": mixture.label,
        "mixture": mixture.mixture_type,
        "system": system,
        "status": status,
        "n_passages": len(mixture.passages),
        "kinds": list(mixture.kinds),
        "relevant": sorted(mixture.relevant_numbers),
        **values,
        "undefined": dict(undefined),
    }


def _model_row(mixture: Mixture, answer: MixtureAnswer) -> JsonObject:
    metrics = SCORE_METRICS + ANSWER_METRICS
    if not answer.ok:
        reason = f"answer failed ({answer.cause or 'error'}): {answer.error}"
        row = _row(mixture, MODEL, "failed", dict.fromkeys(metrics), dict.fromkeys(metrics, reason))
        return {**row, "cited": [], "answer": "", "error": answer.error}
    scores = score_citations(answer.cited, mixture.relevant_numbers, len(mixture.passages))
    values: dict[str, float | None] = {
        "citation_precision": scores.precision,
        "citation_recall": scores.recall,
        "citation_f1": scores.f1,
        "distinct_citations": float(scores.distinct_citations),
        "invalid_citation_rate": scores.invalid_citation_rate,
        "answer_words": float(answer.words),
        "cited_any": float(scores.cited_any),
        "abstained": float(answer.abstained),
    }
    row = _row(mixture, MODEL, "ok", values, scores.undefined)
    return {**row, "cited": list(answer.cited), "answer": answer.text, "error": None}


def _query_values(row: Mapping[str, Any]) -> list[QueryValue]:
    facets = {"system": row["system"], "mixture": row["mixture"], "label": row["label"]}
    metrics = SCORE_METRICS + (ANSWER_METRICS if row["system"] == MODEL else ())
    return [
        QueryValue(
            row["qid"],
            facets,
            metric,
            None if row[metric] is None else float(row[metric]),
            row["undefined"].get(metric),
        )
        for metric in metrics
    ]


@dataclass
class MixtureEvaluation:
    """Everything one citation evaluation produced, for storage, gates and the report."""

    config: CitationEvalConfig
    mixtures: MixtureSet
    answers: list[MixtureAnswer]
    rows: list[JsonObject]
    result: EvaluationResult

    @property
    def per_query(self) -> pd.DataFrame:
        """One row per (mixture, system): qid, label, mixture, system, status, passage kinds in
        order, relevant and cited numbers, the answer and every metric (NaN where undefined; the
        reasons are in the ``undefined`` column)."""
        return pd.DataFrame(self.rows)

    def as_json(self) -> JsonObject:
        """Strict-JSON summary: counts, aggregates, the closed-form random expectation per
        mixture type, and a drill-down per mixture (question, numbered passages with kind and doc
        id, the answer, cited vs relevant numbers, both systems' scores)."""
        rows = {(r["qid"], r["mixture"], r["system"]): r for r in self.rows}
        drill = []
        for mixture, answer in zip(self.mixtures.mixtures, self.answers, strict=True):
            key = (mixture.qid, mixture.mixture_type)
            drill.append(
                {
                    **mixture.as_dict(),
                    "relevant": sorted(mixture.relevant_numbers),
                    "answer": answer.as_dict(),
                    "scores": {
                        system: _scores_of(rows[(*key, system)]) for system in (MODEL, RANDOM)
                    },
                }
            )
        summary = {
            "evaluator": self.result.evaluator,
            "config": dict(self.result.config),
            "counts": {
                "mixtures": len(self.mixtures.mixtures),
                "skipped_items": len(self.mixtures.skipped),
                "answers_ok": sum(a.ok for a in self.answers),
                "answers_failed": sum(not a.ok for a in self.answers),
                "abstained": sum(a.abstained for a in self.answers),
            },
            "skipped": [s.as_dict() for s in self.mixtures.skipped],
            "aggregates": [_aggregate_dict(a) for a in self.result.aggregates],
            "random_expected": _expected_by_type(self.mixtures.mixtures),
            "queries": drill,
        }
        return check_finite(summary, "citation evaluation summary")


def _scores_of(row: Mapping[str, Any]) -> JsonObject:
    metrics = SCORE_METRICS + (ANSWER_METRICS if row["system"] == MODEL else ())
    out: JsonObject = {m: row[m] for m in metrics}
    if row["undefined"]:
        out["undefined"] = dict(row["undefined"])
    return out


def _aggregate_dict(agg: Aggregate) -> JsonObject:
    """The aggregate's JSON with its facets flattened beside the metric (the report's form)."""
    out = agg.as_dict()
    return {"metric": out.pop("metric"), **out.pop("facets"), **out}


def _expected_by_type(mixtures: Sequence[Mixture]) -> dict[str, dict[str, float]]:
    """Mean closed-form random scores over the answerable mixtures of each type."""
    out: dict[str, dict[str, float]] = {}
    for mixture_type in MIXTURE_TYPES:
        expected = [
            expected_random_scores(len(m.passages), len(m.relevant_numbers))
            for m in mixtures
            if m.mixture_type == mixture_type and m.answerable
        ]
        if expected:
            out[mixture_type] = {
                "citation_precision": float(np.mean([e.precision for e in expected])),
                "citation_recall": float(np.mean([e.recall or 0.0 for e in expected])),
                "citation_f1": float(np.mean([e.f1 or 0.0 for e in expected])),
                "n": len(expected),
            }
    return out


def evaluate_mixtures(
    items: Sequence[QAItem],
    corpus: MixtureCorpus,
    client: LLMClient,
    *,
    config: CitationEvalConfig | None = None,
    params: GenerationParams = DEFAULT_ANSWER_PARAMS,
) -> MixtureEvaluation:
    """Build the mixtures of ``items``, answer them with ``client``, score model and baseline."""
    config = config or CitationEvalConfig()
    types: tuple[MixtureType, ...] = tuple(t for t in MIXTURE_TYPES if t in config.mixture_types)
    mixtures = build_mixtures(
        items,
        corpus,
        spec=config.spec,
        seed=config.seed,
        types=types,
        seemingly_pool=config.seemingly_pool,
        exclude_ground_documents=config.exclude_ground_documents,
    )
    answers = answer_mixtures(client, mixtures.mixtures, params=params)
    evaluator = CitationEvaluator(config)
    rows = evaluator.rows(CitationInputs(mixtures.mixtures, answers))
    return MixtureEvaluation(
        config=config,
        mixtures=mixtures,
        answers=answers,
        rows=rows,
        result=evaluator.result_of(rows),
    )
