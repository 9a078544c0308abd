"""What the report, the CLI and the drift event read of a drift decision: its compact headline and
the history of the watched cells across the corpus's runs."""

from __future__ import annotations

from sqlalchemy import Engine

from ragtrail.evaluate.comparison.drift_decision import worsening
from ragtrail.evaluate.comparison.run_compare import query_cells
from ragtrail.evaluate.contract import facet_key
from ragtrail.stats.intervals import mean_interval
from ragtrail.storage.drift_store import DriftStore
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.drift_summary import (
    DriftDecision,
    DriftHeadline,
    DriftRowEvidence,
    DriftView,
    HistoryPoint,
)


def compact(decision: DriftDecision) -> DriftHeadline:
    """A decision's headline (what the nightly result, the event and the CLI line carry)."""
    return DriftHeadline.of(decision)


HISTORY_RUNS = 60
"""At most this many of the corpus's newest runs are read for a history plot."""


def drift_history(engine: Engine, decision: DriftDecision) -> dict[str, list[HistoryPoint]]:
    """Per watched (evaluation, metric) of ``decision``, the history of one facet cell on the
    run's QA-set version (and on the predecessor version its baseline ran on, whose points
    cover that version's items), oldest first: the most-worsened drifted cell, else the tested cell with
    the most paired questions. Keyed ``evaluation:metric [facets]``.

    Runs that did not complete are left out (the checked run itself excepted: the night plots
    it before publishing it). Each point is the mean of the cell's per-question values in one
    run with a bootstrap 95% CI:
    the cells the check pairs (:func:`~ragtrail.evaluate.comparison.run_compare.query_cells`), including the
    pooled ``label=inclusive`` cell, which evaluators' stored aggregates may pool and name
    differently (``all``, ``answerable``)."""
    chosen: dict[tuple[str, str], DriftRowEvidence] = {}
    for row in decision.evidence.rows:
        key = (row.evaluation, row.metric)
        if key not in chosen or _plot_rank(row) > _plot_rank(chosen[key]):
            chosen[key] = row
    if not chosen:
        return {}
    store = RunStore(engine)
    listed = store.list_runs(decision.corpus, limit=HISTORY_RUNS)
    used = decision.evidence.baseline
    versions = {decision.qa_set_version, used.qa_set_version if used else None} - {None}
    runs = [
        item.run
        for item in reversed(listed)
        if item.run.qa_set_version in versions
        and (item.run.complete or item.run.run_id == decision.run_id)
    ]
    cells = {run.run_id: query_cells(store.query_results(run.run_id)) for run in runs}
    out: dict[str, list[HistoryPoint]] = {}
    for (evaluation, metric), row in sorted(chosen.items()):
        cell = (evaluation, metric, facet_key(row.facets))
        points = []
        for run in runs:
            values = list(cells[run.run_id].get(cell, {}).values())
            if values:
                unit = all(0.0 <= v <= 1.0 for v in values)  # a share or a rate: Wilson for 0/1
                interval = mean_interval(values, bounds=(0.0, 1.0) if unit else None)
                points.append(
                    HistoryPoint(
                        run_id=run.run_id,
                        value=sum(values) / len(values),
                        ci_low=interval.low,
                        ci_high=interval.high,
                        ci_method=interval.method.value,
                        n=len(values),
                    )
                )
        out[f"{evaluation}:{metric} [{row.facets_text}]"] = points
    return out


def _plot_rank(row: DriftRowEvidence) -> tuple[bool, bool, int, float]:
    return (
        row.drifted,
        row.tested,
        row.n,
        worsening(row.diff or 0.0, row.greater_is_better),
    )


def load_drift(engine: Engine, run_id: str) -> DriftView | None:
    """The newest stored decision of ``run_id`` with its history (what the report shows), or
    None when the run was never checked."""
    decisions = DriftStore(engine).decisions(run_id=run_id, limit=1)
    if not decisions:
        return None
    return DriftView(decision=decisions[0], history=drift_history(engine, decisions[0]))
