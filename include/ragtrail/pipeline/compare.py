"""Compare two stored runs question by question (``ragtrail runs compare``).

Loads both runs and their per-query values from the metadata database (:class:`RunStore`), refuses
pairs that cannot be compared (unknown run, different or unknown QA-set versions, no per-query
values, a run that did not complete: running, failed or abandoned) and hands the values to
:func:`ragtrail.evaluate.comparison.run_compare.compare_runs`. A run that did not complete is
compared only when asked (``allow_incomplete``), and then flagged in the result.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from sqlalchemy import Engine

from ragtrail.evaluate.comparison.paired import DEFAULT_RESAMPLES, DEFAULT_SEED
from ragtrail.evaluate.comparison.run_compare import FacetComparison, compare_runs
from ragtrail.jsonsafe import JsonObject
from ragtrail.storage.runs_store import RUNNING, RunRecord, RunStore


class RunComparisonError(ValueError):
    """Two runs that cannot be paired."""


@dataclass(frozen=True)
class RunComparison:
    """The comparison of run B against baseline run A."""

    run_a: RunRecord
    run_b: RunRecord
    qa_set_version: str
    n_resamples: int
    seed: int
    rows: tuple[FacetComparison, ...]
    incomplete: Mapping[str, str] = field(default_factory=dict)
    """Run id -> its state, for each run that did not complete and was compared anyway."""
    paired: int = 0
    """Questions with per-query values in both runs (all of them on one QA-set version)."""

    def by_metric(self) -> dict[tuple[str, str], list[FacetComparison]]:
        """Rows grouped per (evaluation, metric), in order."""
        groups: dict[tuple[str, str], list[FacetComparison]] = {}
        for row in self.rows:
            groups.setdefault((row.evaluation, row.metric), []).append(row)
        return groups

    def as_dict(self) -> JsonObject:
        """Strict-JSON summary (undefined numbers are null with a reason); ``incomplete`` only
        when a run that did not complete was compared anyway."""
        flagged = {"incomplete": dict(self.incomplete)} if self.incomplete else {}
        return {
            "run_a": self.run_a.run_id,
            "run_b": self.run_b.run_id,
            "qa_set_version": self.qa_set_version,
            "snapshot_a": self.run_a.snapshot_id,
            "snapshot_b": self.run_b.snapshot_id,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
            "difference": "B - A",
            "comparisons": [row.as_record() for row in self.rows],
            **flagged,
        }


def compare_stored_runs(
    engine: Engine,
    run_a: str,
    run_b: str,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    allow_incomplete: bool = False,
    own: Collection[str] = (),
    across_versions: bool = False,
) -> RunComparison:
    """Pair the per-query values of two runs evaluated on the same QA-set version.

    A run that did not complete is refused, unless ``allow_incomplete`` (then it is flagged in
    :attr:`RunComparison.incomplete`); the runs in ``own`` may be running: the caller is
    writing them (the night compares its runs before it publishes them). ``across_versions``
    pairs two versions of one generated set on the items both hold (question ids are content
    addresses, so an item kept by incremental regeneration keeps its id); the caller has
    checked that one version descends from the other."""
    store = RunStore(engine)
    runs = []
    incomplete: dict[str, str] = {}
    for run_id in (run_a, run_b):
        run = store.get_run(run_id)
        if run is None:
            raise RunComparisonError(f"no run {run_id!r} (see `ragtrail runs list`)")
        if not run.complete and not (run.status == RUNNING and run_id in own):
            if not allow_incomplete:
                raise RunComparisonError(
                    f"run {run_id!r} did not complete: {run.state_text()}; only complete runs "
                    "are compared (--allow-incomplete compares it anyway, flagged)"
                )
            incomplete[run_id] = run.state_text()
        runs.append(run)
    first, second = runs
    if first.qa_set_version is None or second.qa_set_version is None:
        missing = first.run_id if first.qa_set_version is None else second.run_id
        raise RunComparisonError(f"run {missing!r} records no QA-set version: nothing to pair on")
    if first.qa_set_version != second.qa_set_version and not across_versions:
        raise RunComparisonError(
            f"runs used different QA-set versions ({first.run_id}: {first.qa_set_version}, "
            f"{second.run_id}: {second.qa_set_version}); a paired comparison needs the same "
            "questions"
        )
    values = []
    for run in runs:
        stored = store.query_results(run.run_id)
        if not stored:
            raise RunComparisonError(
                f"run {run.run_id!r} has no per-query results (an older run, or not an "
                "evaluation): re-run its evaluation to compare it"
            )
        values.append(stored)
    rows = compare_runs(values[0], values[1], n_resamples=n_resamples, seed=seed)
    return RunComparison(
        run_a=first,
        run_b=second,
        qa_set_version=second.qa_set_version,
        n_resamples=n_resamples,
        seed=seed,
        rows=tuple(rows),
        incomplete=incomplete,
        paired=len({v.qid for v in values[0]} & {v.qid for v in values[1]}),
    )
