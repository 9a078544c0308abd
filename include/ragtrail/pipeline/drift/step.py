"""Drift checks of stored runs: baseline, paired comparison, decision, corpus and QA-set changes.

``check_run`` is what ``ragtrail drift check`` and the nightly ``drift`` step call for each run:

1. resolve the run's baseline (pinned, else champion, else first; :mod:`ragtrail.storage.drift_store`);
   a generated test-set version without one takes the baseline of its nearest predecessor
   version that has one (a corpus change makes a new version every time, so without this a
   generated set would never have a baseline);
2. pair the two runs' per-query values exactly as ``ragtrail runs compare`` does
   (:func:`ragtrail.pipeline.compare.compare_stored_runs`); across versions, on the items both
   hold (incremental regeneration keeps unchanged items with their ids), counted as ``paired``;
3. decide on the primary metrics (:func:`ragtrail.evaluate.comparison.drift_decision.assess_drift`);
4. record, beside the decision, how much of the corpus changed since the baseline's snapshot and
   how many items of the QA set were retired by those changes;
5. store the decision (replacing an earlier check of the same run against the same baseline).

Only complete runs are checked or serve as baselines: a run that failed (most of its model calls
failed) or was abandoned (its process was killed) is refused with its reason, and ``ragtrail
drift check`` refuses a run that is still running too (the night's own drift step checks its
runs before it publishes them).

Only primary-metric drops fire a decision. Corpus changes and retired items are evidence, not
triggers: a corpus can change a lot without hurting the model, and retraining on every edit would
waste the GPU pool; when the changes do hurt, the metrics show it. A first night (no baseline)
and a run that cannot be paired are stored as decisions that did not fire, with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from sqlalchemy import Engine

from ragtrail.config import DriftSettings
from ragtrail.evaluate.comparison.corpus_drift import SnapshotDocuments, corpus_drift
from ragtrail.evaluate.comparison.drift_decision import (
    DriftPolicy,
    PrimaryMetric,
    assess_drift,
)
from ragtrail.pipeline.compare import RunComparisonError, compare_stored_runs
from ragtrail.records import CandidateStatus
from ragtrail.storage.db import utcnow
from ragtrail.storage.document_store import DocumentStore
from ragtrail.storage.drift_store import (
    CHECKED,
    NO_BASELINE,
    DriftStore,
    ResolvedBaseline,
    decision_id_for,
)
from ragtrail.storage.runs_store import ABANDONED, FAILED, RunRecord, RunStore
from ragtrail.summaries.drift_summary import (
    BaselineUsed,
    CorpusChanges,
    DriftDecision,
    DriftEvidence,
    DriftPolicyUsed,
    DriftRowEvidence,
    PrimaryMetricUsed,
    QASetRetirement,
)
from ragtrail.testset.golden import GoldenSetStore
from ragtrail.testset.store import TestSetStore

INCOMPARABLE = "incomparable"
FIRES_ON = (
    "a primary metric worse by more than its threshold with Holm-corrected p < alpha; corpus "
    "drift and retired QA items are recorded, never firing"
)
NO_BASELINE_REASON = (
    "no pinned baseline, no champion baseline and no earlier successful run of this corpus and "
    "QA-set version"
)


INCOMPLETE_RUN = (
    "drift is checked on complete runs only (see `ragtrail runs list`; check another run or "
    "night with --run)"
)


class DriftCheckError(ValueError):
    """A drift check that cannot start (unknown run, run of another corpus, no runs)."""


def drift_policy(settings: DriftSettings) -> DriftPolicy:
    return DriftPolicy(
        alpha=settings.alpha,
        threshold=settings.threshold,
        thresholds=dict(settings.thresholds),
        min_n=settings.min_n,
        exclude_facets={k: tuple(v) for k, v in settings.exclude_facets.items()},
    )


def registered_primary_metrics() -> dict[str, PrimaryMetric]:
    """Every registered evaluator's primary metric by evaluation name (imports the evaluators
    the nightly stores, so that the registry is filled)."""
    from ragtrail.evaluate.registered import registered_evaluators

    evaluators = registered_evaluators()
    out = {}
    for name in evaluators.names():
        cls = evaluators.get(name)
        out[name] = PrimaryMetric(name, cls.primary_metric, cls.greater_is_better)
    return out


def check_run(
    engine: Engine,
    run_id: str,
    settings: DriftSettings,
    *,
    corpus: str | None = None,
    primaries: dict[str, PrimaryMetric] | None = None,
) -> DriftDecision:
    """Check ``run_id`` against its baseline and store the decision (see the module docstring)."""
    run = RunStore(engine).get_run(run_id)
    if run is None:
        raise DriftCheckError(f"no run {run_id!r} (see `ragtrail runs list`)")
    if corpus is not None and run.corpus != corpus:
        raise DriftCheckError(f"run {run_id!r} is of corpus {run.corpus!r}, not {corpus!r}")
    if run.status in (FAILED, ABANDONED):
        raise DriftCheckError(f"run {run_id!r} {run.state_text()}: {INCOMPLETE_RUN}")
    store = DriftStore(engine)
    baseline = store.resolve_baseline(run) or predecessor_baseline(engine, store, run)
    qa_set = qa_set_retirement(engine, run)
    if baseline is None:
        evidence = DriftEvidence(
            fires_on=FIRES_ON,
            policy=DriftPolicyUsed(**settings.model_dump(), primary_metrics=None),
            qa_set=qa_set,
            undefined={"baseline": NO_BASELINE_REASON, "corpus_drift": NO_BASELINE_REASON},
            corpus_drift=None,
            rows=[],
            drifted=[],
            n_tested=0,
        )
        record = _decision(run, None, None, NO_BASELINE, False, evidence)
        store.save_decision(record)
        return record
    primaries = primaries if primaries is not None else registered_primary_metrics()
    policy = DriftPolicyUsed(
        **settings.model_dump(),
        primary_metrics={
            name: PrimaryMetricUsed(metric=p.metric, greater_is_better=p.greater_is_better)
            for name, p in sorted(primaries.items())
        },
    )
    across = baseline.run.qa_set_version != run.qa_set_version
    baseline_used = BaselineUsed(
        run_id=baseline.run.run_id,
        kind=baseline.kind,
        snapshot_id=baseline.run.snapshot_id,
        started_at=baseline.run.started_at.isoformat(),
        qa_set_version=baseline.run.qa_set_version if across else None,
    )
    undefined: dict[str, str] = {}
    changes = corpus_evidence(engine, baseline.run, run)
    if changes is None:
        undefined["corpus_drift"] = "a run records no corpus snapshot"
    status = CHECKED
    rows: list[DriftRowEvidence] = []
    drifted: list[str] = []
    n_tested = 0
    try:
        comparison = compare_stored_runs(
            engine,
            baseline.run.run_id,
            run.run_id,
            n_resamples=settings.n_resamples,
            seed=settings.seed,
            own=(run.run_id,),
            across_versions=across,
        )
    except RunComparisonError as exc:
        status = INCOMPARABLE
        undefined["rows"] = str(exc)
        fired = False
    else:
        if across:
            baseline_used = baseline_used.model_copy(update={"paired": comparison.paired})
        assessment = assess_drift(comparison.rows, primaries, drift_policy(settings))
        rows = list(assessment.rows)
        drifted = [row.name for row in assessment.drifted]
        n_tested = assessment.n_tested
        fired = assessment.fired
    evidence = DriftEvidence(
        fires_on=FIRES_ON,
        policy=policy,
        qa_set=qa_set,
        undefined=undefined,
        baseline=baseline_used,
        corpus_drift=changes,
        rows=rows,
        drifted=drifted,
        n_tested=n_tested,
    )
    record = _decision(run, baseline.run.run_id, baseline.kind, status, fired, evidence)
    store.save_decision(record)
    return record


def predecessor_baseline(
    engine: Engine, store: DriftStore, run: RunRecord
) -> ResolvedBaseline | None:
    """The baseline of the nearest predecessor of ``run``'s generated version that has one
    (pinned, champion or first run on that version, started before ``run``); None for a
    golden set or a file, or when no predecessor has a baseline."""
    testsets = TestSetStore(engine)
    seen: set[str] = set()
    version = run.qa_set_version
    while version is not None and version not in seen:
        seen.add(version)
        row = testsets.get_version(version)
        parent = row["parent_version"] if row is not None else None
        if parent is None:
            return None
        found = store.resolve_baseline(replace(run, qa_set_version=parent))
        if found is not None:
            return found
        version = parent
    return None


def corpus_evidence(engine: Engine, baseline: RunRecord, run: RunRecord) -> CorpusChanges | None:
    """Corpus drift between the two runs' snapshots; None when either records no snapshot."""
    if baseline.snapshot_id is None or run.snapshot_id is None:
        return None
    before = snapshot_documents(engine, baseline.snapshot_id)
    after = snapshot_documents(engine, run.snapshot_id)
    return corpus_drift(before, after)


def snapshot_documents(engine: Engine, snapshot_id: str) -> SnapshotDocuments:
    """The documents present in a snapshot (its change log without the removed ones)."""
    rows = DocumentStore(engine).get_snapshot_documents(snapshot_id)
    return SnapshotDocuments(
        snapshot_id, {r.doc_id: r.content_hash for r in rows if r.change != "removed"}
    )


def qa_set_retirement(engine: Engine, run: RunRecord) -> QASetRetirement:
    """How many items of the run's QA-set version the corpus changes retired.

    A generated version's candidates carry a retired state (their source text changed or went);
    a golden version's items count as retired when a ground document is missing from the run's
    snapshot. A QA set file has no such record: ``retired`` is null with the reason.
    """
    version = run.qa_set_version
    testsets = TestSetStore(engine)
    if version is not None and testsets.get_version(version) is not None:
        ids = list(testsets.version_qids(version))
        rows = testsets.get_candidate_rows(ids)
        reasons = Counter(
            str(rows[c]["retired_reason"] or "unknown")
            for c in ids
            if rows[c]["status"] == CandidateStatus.RETIRED.value
        )
        return _retired(version, "testset", len(ids), reasons)
    golden = GoldenSetStore(engine)
    if version is not None and golden.get(version) is not None:
        present = (
            set(snapshot_documents(engine, run.snapshot_id).hashes) if run.snapshot_id else None
        )
        items = golden.items(version)
        if present is None:
            return QASetRetirement(
                version=version,
                undefined={"retired": "the run records no corpus snapshot"},
                kind="golden",
                n_items=len(items),
                retired=None,
            )
        reasons = Counter(
            "ground_document_removed" for item in items if not set(item.ground_doc_ids) <= present
        )
        return _retired(version, "golden", len(items), reasons)
    return QASetRetirement(
        version=version,
        undefined={"retired": "not a stored test-set or golden version (a QA set file)"},
        kind="file",
        n_items=None,
        retired=None,
        n_retired=None,
    )


def _retired(
    version: str, kind: Literal["testset", "golden"], n_items: int, reasons: Counter[str]
) -> QASetRetirement:
    n = sum(reasons.values())
    return QASetRetirement(
        version=version,
        kind=kind,
        n_items=n_items,
        retired=n > 0,
        n_retired=n,
        reasons=dict(sorted(reasons.items())),
    )


def _decision(
    run: RunRecord,
    baseline_run: str | None,
    baseline_kind: str | None,
    status: str,
    fired: bool,
    evidence: DriftEvidence,
) -> DriftDecision:
    return DriftDecision(
        decision_id=decision_id_for(run.run_id, baseline_run),
        run_id=run.run_id,
        corpus=run.corpus,
        snapshot_id=run.snapshot_id,
        qa_set_version=run.qa_set_version,
        baseline_run_id=baseline_run,
        baseline_kind=baseline_kind,
        status=status,
        fired=fired,
        evidence=evidence,
        created_at=utcnow(),
    )


def night_of(run: RunRecord) -> str | None:
    """The nightly run id a set's run belongs to (``<night>.<set name>``), None for a lone run."""
    name = run.params.get("qa_set_name")
    if isinstance(name, str) and run.run_id.endswith(f".{name}"):
        return run.run_id[: -len(name) - 1]
    return None


def runs_to_check(engine: Engine, corpus: str, run: str | None = None) -> list[str]:
    """The runs ``ragtrail drift check`` covers: ``run`` (a set's run, or a night's id: all its
    sets), else every set of the corpus's newest night (or its newest lone run). Refused when
    one of them did not complete (running, failed or abandoned), naming it and why."""
    listed = [item.run for item in RunStore(engine).list_runs(corpus, limit=10_000)]
    evaluated = [r for r in listed if r.qa_set_version is not None]
    if run is not None:
        exact = [r.run_id for r in evaluated if r.run_id == run]
        night = [r.run_id for r in evaluated if night_of(r) == run]
        found = exact or sorted(night)
        if not found:
            raise DriftCheckError(
                f"corpus {corpus!r} has no evaluation run or night {run!r} "
                "(see `ragtrail runs list`)"
            )
        return _complete(evaluated, found)
    if not evaluated:
        raise DriftCheckError(f"corpus {corpus!r} has no evaluation run to check")
    newest = evaluated[0]
    night = night_of(newest)
    if night is None:
        return _complete(evaluated, [newest.run_id])
    return _complete(evaluated, sorted(r.run_id for r in evaluated if night_of(r) == night))


def _complete(listed: Sequence[RunRecord], run_ids: list[str]) -> list[str]:
    """``run_ids``, or DriftCheckError naming the first of them that did not complete."""
    by_id = {r.run_id: r for r in listed}
    for run_id in run_ids:
        if not by_id[run_id].complete:
            raise DriftCheckError(f"run {run_id!r} {by_id[run_id].state_text()}: {INCOMPLETE_RUN}")
    return run_ids


def check_runs(
    engine: Engine, run_ids: Sequence[str], settings: DriftSettings, *, corpus: str | None = None
) -> list[DriftDecision]:
    """:func:`check_run` for each run, sharing one look-up of the primary metrics."""
    primaries = registered_primary_metrics()
    return [
        check_run(engine, run_id, settings, corpus=corpus, primaries=primaries)
        for run_id in run_ids
    ]
