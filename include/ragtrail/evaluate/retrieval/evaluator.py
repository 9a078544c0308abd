"""Retrieval evaluation per question label and text weight (METHODS §5).

For each question the lexical and dense candidate lists are fetched once; every text weight of the
scan is then a re-fusion of the same candidates, which is why a six-weight scan costs barely more than
one weight. Relevance is judged per chunk when every question names ground chunks (generated test
sets) and per document otherwise (hand-written sets), where a document's rank is the rank of its best
chunk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from ragtrail.evaluate.contract import (
    Aggregate,
    BaseEvaluator,
    EvaluationResult,
    QueryValue,
    register_evaluator,
)
from ragtrail.evaluate.metrics import parse_metric, per_query_value
from ragtrail.index.base import HybridIndex, fetch_candidates
from ragtrail.index.fusion import FusionTable
from ragtrail.jsonsafe import JsonObject, mark_undefined
from ragtrail.progress import ProgressSink, ProgressUpdate, no_progress
from ragtrail.records import INCLUSIVE, LABELS, Candidates, QAItem
from ragtrail.stats.intervals import Interval, mean_interval, mean_intervals

DEFAULT_METRICS: tuple[str, ...] = ("recall@1", "recall@5", "recall@10", "mrr", "ndcg@10", "P@5")
PRIMARY_METRIC = "recall@5"
RANK_DEPTH = 10
QUERY_TASK = "retrieval queries"
Level = Literal["auto", "chunk", "document"]

UNDEFINED_REASONS: Mapping[str, str] = {
    "dense": "the scan has no text weight 0 (dense only)",
    "lexical": "the scan has no text weight 1 (lexical only)",
    "gap_to_best": "every label has a best value of 0, so a relative gap has no denominator",
}
"""Why a field of the scan's tables can be missing; each has one cause. A missing interval's
reason travels in the row's own ``ci_reason`` (it depends on the row's n and values)."""


@dataclass(frozen=True)
class ScanConfig:
    text_weights: tuple[float, ...]
    candidates_per_modality: int = 100
    metrics: tuple[str, ...] = DEFAULT_METRICS
    bootstrap_samples: int = 1000
    seed: int = 13
    level: Level = "auto"


@dataclass
class ScanResult:
    """Long-format metrics, the best-strategy table and per-question rankings."""

    metrics: pd.DataFrame  # label, text_weight, metric, value, ci_*, n_questions
    best: pd.DataFrame  # label, n_questions, dense, lexical, best_recall, best_weight, ci_*, gap
    per_query: pd.DataFrame  # qid, label, text_weight, first_relevant_rank, + metric columns
    level: str

    def best_records(self) -> list[JsonObject]:
        """The best-strategy table as strict-JSON records (undefined values: null + reason)."""
        return undefined_as_null(self.best)

    def metric_records(self) -> list[JsonObject]:
        """The long metrics table as strict-JSON records (undefined values: null + reason)."""
        return undefined_as_null(self.metrics)

    def metric_ids(self) -> list[str]:
        return list(dict.fromkeys(self.metrics["metric"])) if len(self.metrics) else []


def resolve_level(items: Sequence[QAItem], level: Level) -> Literal["chunk", "document"]:
    if level != "auto":
        return level
    return "chunk" if all(item.ground_chunk_ids for item in items) else "document"


def ranking_for(candidates: Candidates, weight: float, level: str, depth: int) -> list[str]:
    """Top ids after fusion: chunk ids, or document ids ranked by their best chunk."""
    return FusionTable(candidates).ranking(weight, level, depth)


def _first_relevant_rank(ranking: Sequence[str], relevant: set[str]) -> int | None:
    return next((i + 1 for i, rid in enumerate(ranking) if rid in relevant), None)


def collect_candidates(
    index: HybridIndex,
    encode: Callable[[Sequence[str]], np.ndarray],
    items: Sequence[QAItem],
    k: int,
    progress: ProgressSink = no_progress,
) -> list[Candidates]:
    """One lexical and one dense query per question; questions are embedded in one batch.

    ``progress`` hears ``retrieval queries`` done/total after each question's queries.
    """
    vectors = encode([item.question for item in items])
    out: list[Candidates] = []
    for i, item in enumerate(items):
        out.append(fetch_candidates(index, item.question, vectors[i], k))
        progress(ProgressUpdate(QUERY_TASK, i + 1, len(items)))
    return out


def scan(
    items: Sequence[QAItem], candidates: Sequence[Candidates], config: ScanConfig
) -> ScanResult:
    """Score every question at every weight, then aggregate per label with bootstrap CIs."""
    level = resolve_level(items, config.level)
    # The best-strategy table needs the primary metric whatever else was asked for.
    metric_ids = tuple(dict.fromkeys((*config.metrics, PRIMARY_METRIC)))
    specs = [(metric, parse_metric(metric)) for metric in metric_ids]  # parsed once, not per row
    rows = []
    for item, cands in zip(items, candidates, strict=True):
        relevant = set(item.ground_chunk_ids if level == "chunk" else item.ground_doc_ids)
        grades = dict.fromkeys(relevant, 1)
        table = FusionTable(cands)  # laid out once; each weight is then one sort
        for weight in config.text_weights:
            ranking = table.ranking(weight, level, RANK_DEPTH)
            row = {
                "qid": item.qid,
                "label": item.label,
                "text_weight": weight,
                "first_relevant_rank": _first_relevant_rank(ranking, relevant),
                "ranking": ranking,
            }
            for metric, spec in specs:
                row[metric] = per_query_value(spec, grades, ranking)
            rows.append(row)
    per_query = pd.DataFrame(rows)
    metrics = _aggregate(per_query, metric_ids, config)
    return ScanResult(
        metrics=metrics, best=best_strategy(metrics), per_query=per_query, level=level
    )


def _groups(per_query: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    present = [label for label in LABELS if (per_query["label"] == label).any()]
    return [(label, per_query[per_query["label"] == label]) for label in present] + [
        (INCLUSIVE, per_query)
    ]


def _aggregate(
    per_query: pd.DataFrame, metric_ids: Sequence[str], config: ScanConfig
) -> pd.DataFrame:
    """Mean and interval of every (label, weight, metric) cell.

    A label's cells share one bootstrap draw (seeded per label): every weight's interval comes
    from the same resampled question sets, so the scan's intervals are comparable across weights,
    and the bootstrap costs about the same for six weights as for one.
    """
    out = []
    for g, (label, frame) in enumerate(_groups(per_query)):
        by_weight = list(frame.groupby("text_weight", sort=True))
        cells = [(float(w), metric) for w, _ in by_weight for metric in metric_ids]
        columns = np.column_stack(
            [at[metric].to_numpy(dtype=float) for _, at in by_weight for metric in metric_ids]
        )
        intervals = mean_intervals(
            columns, n_resamples=config.bootstrap_samples, seed=config.seed + 1000 * g
        )
        for (weight, metric), values, interval in zip(cells, columns.T, intervals, strict=True):
            out.append(
                {
                    "label": label,
                    "text_weight": weight,
                    "metric": metric,
                    "value": float(values.mean()),
                    **interval_columns(interval),
                    "n_questions": len(values),
                }
            )
    return pd.DataFrame(out)


def best_strategy(metrics: pd.DataFrame, metric: str = PRIMARY_METRIC) -> pd.DataFrame:
    """label | dense | lexical | best recall | best weight | gap to the best label.

    The best weight is the one with the highest value; ties go to the smaller weight (denser
    retrieval), so the choice is deterministic. The gap is relative: (top - this) / top, where top
    is the best label's best value (NaN when every label scores 0).
    """
    primary = metrics[metrics["metric"] == metric]
    rows = []
    for label, frame in primary.groupby("label", sort=False):
        frame = frame.sort_values("text_weight")
        best = frame.loc[frame["value"].idxmax()]
        rows.append(
            {
                "label": label,
                "n_questions": int(frame["n_questions"].max()),
                "dense": _value_at(frame, 0.0),
                "lexical": _value_at(frame, 1.0),
                "best_recall": float(best["value"]),
                "best_weight": float(best["text_weight"]),
                "ci_low": _float_or_nan(best["ci_low"]),
                "ci_high": _float_or_nan(best["ci_high"]),
                # absent from frames of runs stored before intervals named their method
                "ci_method": best.get("ci_method"),
                "ci_reason": best.get("ci_reason") or "",
            }
        )
    best = pd.DataFrame(rows)
    if best.empty:
        return best
    top = float(best["best_recall"].max())
    best["gap_to_best"] = (top - best["best_recall"]) / top if top > 0 else float("nan")
    return best


def facet_table(
    per_query: pd.DataFrame,
    facet_of: Mapping[str, str],
    *,
    weight: float,
    config: ScanConfig,
    metric: str = PRIMARY_METRIC,
) -> pd.DataFrame:
    """``metric`` at ``weight`` per facet value (e.g. the questions' language): facet, n, value
    and its bootstrap interval, largest group first. ``facet_of`` maps every qid to its value."""
    at = per_query[(per_query["text_weight"] - weight).abs() < 1e-9]
    facets = at["qid"].map(lambda qid: facet_of[str(qid)])
    out = []
    for i, (value, frame) in enumerate(at.groupby(facets, sort=True)):
        values = frame[metric].to_numpy(dtype=float)
        interval = mean_interval(
            values, n_resamples=config.bootstrap_samples, seed=config.seed + 7919 + i
        )
        out.append(
            {
                "facet": str(value),
                "text_weight": float(weight),
                "metric": metric,
                "value": float(values.mean()),
                **interval_columns(interval),
                "n_questions": len(values),
            }
        )
    table = pd.DataFrame(out)
    return table.sort_values(["n_questions", "facet"], ascending=[False, True]) if out else table


def interval_columns(interval: Interval) -> dict[str, float | str]:
    """An interval as table columns: bounds (NaN when null), method and the null's reason."""
    return {
        "ci_low": math.nan if interval.low is None else interval.low,
        "ci_high": math.nan if interval.high is None else interval.high,
        "ci_method": interval.method.value,
        "ci_reason": interval.reason,
    }


def _float_or_nan(value: Any) -> float:
    """Metrics read back from strict JSON carry None where an in-memory frame has NaN."""
    return math.nan if value is None else float(value)


def _value_at(frame: pd.DataFrame, weight: float) -> float:
    hit = frame[(frame["text_weight"] - weight).abs() < 1e-9]
    return float(hit["value"].iloc[0]) if len(hit) else float("nan")


def undefined_as_null(
    frame: pd.DataFrame, reasons: Mapping[str, str] = UNDEFINED_REASONS
) -> list[JsonObject]:
    """Records of ``frame`` with every NaN replaced by None and its reason (jsonsafe convention);
    a null interval's reason comes from the row's ``ci_reason`` (a column the record drops).

    A NaN in a field without a known cause is a bug upstream, so it raises instead of being
    papered over.
    """
    records = []
    for row in frame.to_dict("records"):
        causes = {**reasons}
        if row.get("ci_reason"):
            causes |= dict.fromkeys(("ci_low", "ci_high"), row["ci_reason"])
        record: JsonObject = {}
        for key, value in row.items():
            if key == "ci_reason":
                continue
            if isinstance(value, float) and math.isnan(value):
                if key not in causes:
                    raise ValueError(f"unexpected undefined {key!r} in {row}")
                mark_undefined(record, key, causes[key])
            else:
                record[key] = value.item() if isinstance(value, np.generic) else value
        records.append(record)
    return records


# --------------------------------------------------------------------------------------------------
# The retrieval scan as an evaluator (ragtrail.evaluate.contract)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetrievalInputs:
    """Questions and their candidate lists (one :class:`Candidates` per question, same order)."""

    items: Sequence[QAItem]
    candidates: Sequence[Candidates]


@register_evaluator
class RetrievalEvaluator(BaseEvaluator[ScanConfig, RetrievalInputs]):
    """Recall@k, MRR, nDCG and P@k per label and text weight; facets ``label``, ``text_weight``."""

    name = "retrieval"
    primary_metric = PRIMARY_METRIC
    greater_is_better = True

    def scan(self, inputs: RetrievalInputs) -> ScanResult:
        """The full scan with its tables (best strategy, rankings) for reports."""
        return scan(inputs.items, inputs.candidates, self.config)

    def evaluate(self, inputs: RetrievalInputs) -> EvaluationResult:
        return self.result_of(self.scan(inputs))

    def result_of(self, scanned: ScanResult) -> EvaluationResult:
        """The contract's view of a scan: per (qid, label, text_weight, metric) and aggregates."""
        metric_ids = scanned.metric_ids()
        queries = [
            QueryValue(
                qid=str(row["qid"]),
                facets={"label": row["label"], "text_weight": float(row["text_weight"])},
                metric=metric,
                value=float(row[metric]),
            )
            for row in scanned.per_query.to_dict("records")
            for metric in metric_ids
        ]
        aggregates = [
            Aggregate.of(
                row["metric"],
                {"label": row["label"], "text_weight": float(row["text_weight"])},
                value=row["value"],
                ci_low=row["ci_low"],
                ci_high=row["ci_high"],
                n=int(row["n_questions"]),
                reasons=dict.fromkeys(("ci_low", "ci_high"), row["ci_reason"]),
                ci_method=row["ci_method"],
            )
            for row in scanned.metrics.to_dict("records")
        ]
        return self.result(queries, aggregates)
