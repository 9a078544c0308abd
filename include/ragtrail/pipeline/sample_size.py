"""How many questions an LLM step evaluates: enough to detect ``target_mde``, within the caps.

A step with ``target_mde`` set (``citations``, ``sufficiency``, ``evidence``) sizes its sample so
that a paired comparison with the next night would detect a change of ``target_mde`` in its primary
metric with 80% power (:mod:`ragtrail.stats.power`). The spread of the per-question differences
comes from the run history of the corpus:

1. the two newest runs with values of the metric that share at least :data:`MIN_PAIRS` questions:
   the standard deviation of their paired differences (per question, the mean over its facet
   cells);
2. else the newest run with at least :data:`MIN_PAIRS` questions: the standard deviation of its
   per-question values times sqrt(2) (the difference of two independent draws; a paired design
   usually does better, so this errs on the side of more questions);
3. else :data:`DEFAULT_SD` (0.5, the largest spread a difference of two [0, 1] means per question
   can have without being all -1/+1; documented as the default).

The n that detects ``target_mde`` is then capped by ``max_items`` (when not 0), by what the budgets
can afford, and by the questions the set has; the result says which bound won and the MDE the
chosen n leaves, so the report can say "a budget bounded n at 12: MDE 0.34".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ragtrail.runtime import Runtime
from ragtrail.stats.power import needed_n, standardised_mde
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.qa_sets import SampleSizing

log = logging.getLogger(__name__)

MIN_PAIRS = 5
"""Fewer shared (or stored) questions than this say too little about the spread to size from."""
DEFAULT_SD = 0.5
"""The spread of the per-question differences assumed when the history has none."""
HISTORY_RUNS = 20
"""How many of the corpus's newest runs are searched for the metric's values."""

Bound = Literal["target", "max_items", "budget", "available"]


@dataclass(frozen=True)
class WatchedMetric:
    """The per-question values a step's sample is sized by: an evaluation's primary metric in
    the facet cells ``where`` selects."""

    evaluation: str
    metric: str
    where: Mapping[str, object]


STEP_METRICS: Mapping[str, WatchedMetric] = {
    "citations": WatchedMetric("citations", "citation_f1", {"system": "model"}),
    "sufficiency": WatchedMetric("cah", "hallucination_rate", {}),
    "evidence": WatchedMetric("evidence", "correct", {"method": "extractor"}),
}
"""Per LLM step, the metric its ``target_mde`` refers to."""


def mde_at(sd: float, n: int, alpha: float = 0.05) -> float | None:
    """The MDE of a paired comparison on ``n`` questions with spread ``sd`` (None below 2)."""
    return sd * standardised_mde(n, alpha=alpha) if n >= 2 else None


def history_spread(
    store: RunStore,
    corpus: str,
    evaluation: str,
    metric: str,
    where: Mapping[str, object] | None = None,
) -> tuple[float, str]:
    """The spread of per-question differences for ``metric`` of ``evaluation`` on ``corpus`` (only
    the facet cells matching ``where``, e.g. ``{"system": "model"}``), and where it came from (see
    the module docstring)."""
    runs: list[tuple[str, dict[str, float]]] = []
    for listing in store.list_runs(corpus, limit=HISTORY_RUNS):
        if not listing.run.complete:
            continue
        per_question = _per_question(store, listing.run.run_id, evaluation, metric, where or {})
        if len(per_question) >= MIN_PAIRS:
            runs.append((listing.run.run_id, per_question))
        if len(runs) == 2:
            break
    if len(runs) == 2:
        (new_id, new), (old_id, old) = runs
        shared = sorted(new.keys() & old.keys())
        if len(shared) >= MIN_PAIRS:
            d = np.array([new[q] - old[q] for q in shared])
            if np.ptp(d) > 0.0:
                return float(d.std(ddof=1)), f"{len(shared)} paired questions of {old_id}, {new_id}"
    if runs:
        run_id, values = runs[0]
        x = np.array(list(values.values()))
        if np.ptp(x) > 0.0:
            return float(x.std(ddof=1)) * math.sqrt(
                2.0
            ), f"{len(x)} questions of {run_id} x sqrt(2)"
    return DEFAULT_SD, "the default (no usable history)"


def size_sample(
    target_mde: float,
    sd: float,
    sd_source: str,
    *,
    available: int,
    max_items: int = 0,
    budget_cap: int | None = None,
    alpha: float = 0.05,
) -> SampleSizing:
    """The n that detects ``target_mde`` at spread ``sd``, capped by ``max_items`` (0: no cap),
    ``budget_cap`` (None: no budget) and ``available`` questions."""
    if target_mde <= 0.0:
        raise ValueError(f"target_mde must be > 0, got {target_mde}")
    needed = needed_n(target_mde / sd, alpha=alpha)
    caps: list[tuple[int, Bound]] = [(needed, "target"), (available, "available")]
    if max_items > 0:
        caps.append((max_items, "max_items"))
    if budget_cap is not None:
        caps.append((budget_cap, "budget"))
    n, bound = min(caps, key=lambda cap: cap[0])
    mde = mde_at(sd, n, alpha)
    return SampleSizing(
        n=n,
        target_mde=target_mde,
        needed_n=needed,
        sd=sd,
        sd_source=sd_source,
        bound_by=bound,
        mde=mde,
    )


def bounded_by_budget(
    sizing: SampleSizing | None, n: int, alpha: float = 0.05
) -> SampleSizing | None:
    """``sizing`` after a budget cut its n to ``n`` (unchanged when it did not)."""
    if sizing is None or n >= sizing.n:
        return sizing
    mde = mde_at(sizing.sd, n, alpha)
    return sizing.model_copy(update={"n": n, "bound_by": "budget", "mde": mde})


def step_spread(rt: Runtime, corpus: str, step: str) -> tuple[float, str]:
    """:func:`history_spread` of the metric ``step`` is sized by (:data:`STEP_METRICS`)."""
    watched = STEP_METRICS[step]
    return history_spread(
        RunStore(rt.engine), corpus, watched.evaluation, watched.metric, watched.where
    )


def sized_items(
    rt: Runtime,
    corpus: str,
    step: str,
    *,
    target_mde: float | None,
    max_items: int,
    available: int,
    budget_cap: int | None = None,
) -> tuple[int, SampleSizing | None]:
    """The ``max_items`` a step samples: as configured without ``target_mde``; else sized from
    the corpus's history (see the module docstring), with the sizing to record."""
    if target_mde is None:
        return max_items, None
    sd, source = step_spread(rt, corpus, step)
    sizing = size_sample(
        target_mde, sd, source, available=available, max_items=max_items, budget_cap=budget_cap
    )
    log.info("%s sample: %s", step, sizing.text)
    return sizing.n, sizing


def _per_question(
    store: RunStore, run_id: str, evaluation: str, metric: str, where: Mapping[str, object]
) -> dict[str, float]:
    cells: dict[str, list[float]] = {}
    for value in store.query_results(run_id, evaluation):
        if value.metric != metric or value.value is None:
            continue
        facets = value.facets
        if all(facets.get(k) == v for k, v in where.items()):
            cells.setdefault(value.qid, []).append(value.value)
    return {qid: sum(vs) / len(vs) for qid, vs in cells.items()}


__all__: Sequence[str] = [
    "DEFAULT_SD",
    "STEP_METRICS",
    "bounded_by_budget",
    "history_spread",
    "mde_at",
    "size_sample",
    "sized_items",
    "step_spread",
]
