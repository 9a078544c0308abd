"""Pair the per-query values of two runs and compare them per metric and facet set.

Input is long-format per-query values (evaluation, metric, facet key, qid, value) of run A and run B
on the same QA-set version. For every (evaluation, metric, facets) cell the questions that have a
defined value in both runs are paired and compared with :func:`ragtrail.evaluate.comparison.paired.compare_paired`;
Holm's correction then runs across the facet cells of each (evaluation, metric). Facet sets with a
``label`` also get a pooled ``inclusive`` cell over all labels, as the aggregates do.

Pure: no database, no I/O. The CLI (``ragtrail runs compare``) loads the values and prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ragtrail.evaluate.comparison.paired import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    PairedStats,
    compare_paired,
    holm,
)
from ragtrail.evaluate.contract import FacetValue, facet_key, parse_facet_key
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import INCLUSIVE

NO_P_VALUE = "no p-value in this cell to correct"


class PerQueryValue(Protocol):
    """What :func:`compare_runs` reads from a stored per-query value."""

    @property
    def evaluation(self) -> str: ...

    @property
    def metric(self) -> str: ...

    @property
    def facet_key(self) -> str: ...

    @property
    def qid(self) -> str: ...

    @property
    def value(self) -> float | None: ...


@dataclass(frozen=True)
class FacetComparison:
    """Run A vs run B for one evaluation, metric and facet set."""

    evaluation: str
    metric: str
    facets: Mapping[str, FacetValue]
    stats: PairedStats
    p_holm: float | None
    only_in_a: int  # questions with a defined value in A but not in B
    only_in_b: int
    undefined: Mapping[str, str] = field(default_factory=dict)

    def as_record(self) -> JsonObject:
        """Strict-JSON record: null plus reason for every undefined number."""
        s = self.stats
        return {
            "evaluation": self.evaluation,
            "metric": self.metric,
            "facets": dict(self.facets),
            "n": s.n,
            "mean_a": s.mean_a,
            "mean_b": s.mean_b,
            "diff": s.diff,
            "ci_low": s.ci_low,
            "ci_high": s.ci_high,
            **s.detect_fields(),
            "p_value": s.p_value,
            "p_exact": s.exact,
            "p_holm": self.p_holm,
            "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b,
            "undefined": dict(self.undefined),
        }


Cell = tuple[str, str, str]  # evaluation, metric, facet key


def query_cells(
    values: Iterable[PerQueryValue], pool_labels: bool = True
) -> dict[Cell, dict[str, float]]:
    """Per (evaluation, metric, facet key) cell, each question's defined value; with
    ``pool_labels`` a label's values also join the pooled ``label=inclusive`` cell. These are the
    cells :func:`compare_runs` pairs."""
    cells: dict[Cell, dict[str, float]] = {}
    for v in values:
        if v.value is None:
            continue
        keys = [v.facet_key]
        if pool_labels:
            facets = parse_facet_key(v.facet_key)
            if "label" in facets and facets["label"] != INCLUSIVE:
                keys.append(facet_key({**facets, "label": INCLUSIVE}))
        for key in keys:
            cell = cells.setdefault((v.evaluation, v.metric, key), {})
            if v.qid in cell:
                raise ValueError(f"question {v.qid!r} appears twice in {v.metric} {key}")
            cell[v.qid] = float(v.value)
    return cells


def compare_runs(
    values_a: Iterable[PerQueryValue],
    values_b: Iterable[PerQueryValue],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
    pool_labels: bool = True,
) -> list[FacetComparison]:
    """Paired comparisons for every cell of either run, sorted by evaluation, metric, facets."""
    a_cells = query_cells(values_a, pool_labels)
    b_cells = query_cells(values_b, pool_labels)
    results: list[FacetComparison] = []
    for cell in sorted(set(a_cells) | set(b_cells)):
        a, b = a_cells.get(cell, {}), b_cells.get(cell, {})
        common = sorted(set(a) & set(b))
        stats = compare_paired(
            [a[q] for q in common],
            [b[q] for q in common],
            n_resamples=n_resamples,
            confidence=confidence,
            seed=seed,
        )
        results.append(
            FacetComparison(
                evaluation=cell[0],
                metric=cell[1],
                facets=parse_facet_key(cell[2]),
                stats=stats,
                p_holm=None,
                only_in_a=len(set(a) - set(b)),
                only_in_b=len(set(b) - set(a)),
                undefined=dict(stats.undefined),
            )
        )
    return _with_holm(results)


def _with_holm(results: list[FacetComparison]) -> list[FacetComparison]:
    groups: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(results):
        groups.setdefault((r.evaluation, r.metric), []).append(i)
    out = list(results)
    for indices in groups.values():
        adjusted = holm([results[i].stats.p_value for i in indices])
        for i, p_holm in zip(indices, adjusted, strict=True):
            r = results[i]
            undefined = dict(r.undefined)
            if p_holm is None:
                undefined["p_holm"] = r.undefined.get("p_value", NO_P_VALUE)
            out[i] = FacetComparison(
                evaluation=r.evaluation,
                metric=r.metric,
                facets=r.facets,
                stats=r.stats,
                p_holm=p_holm,
                only_in_a=r.only_in_a,
                only_in_b=r.only_in_b,
                undefined=undefined,
            )
    return out
