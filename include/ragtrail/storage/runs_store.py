"""Runs, their metrics history and their per-query results (tables ``runs``, ``metrics_history``,
``query_results``).

A run is ``running`` until whoever started it ends it: ``success`` (or ``failed_quality``: its
metrics were published but a GX check failed), ``failed`` (a step raised, e.g. most of its model
calls failed; :mod:`ragtrail.failures`) with the reason in ``status_detail``, or ``abandoned``: a
run left running by a process that is gone from this host, or that has not reported for
``runs.stale_after_s``, is marked so by :meth:`RunStore.settle_stale_runs`, which every command
reading the runs calls first. Only complete runs (neither running, failed nor abandoned) are
previous runs, drift baselines or compared without a flag.

:class:`RunStore` returns frozen records, never dicts. Every write is one transaction and
idempotent per run: starting a run again resets it, recording an evaluation again replaces that
run's points and per-query values of that evaluation. Per-query values live in the database (not in
a parquet artifact) so that ``ragtrail runs compare`` can pair any two runs with nothing but the
metadata database, whether that is a local SQLite file or PostgreSQL beside S3. A run's parameters
and the models and judges of its points are stored redacted (:mod:`ragtrail.redact`): no credential
of a URL in them reaches the database.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, and_, delete, func, or_, select, update
from sqlalchemy.engine import URL, RowMapping

from ragtrail.evaluation_records import (
    EvaluationResult,
    FacetValue,
    QueryValue,
    canonical_facets,
    facet_key,
    parse_facet_key,
)
from ragtrail.jsonsafe import JsonObject, check_finite
from ragtrail.redact import redact_json
from ragtrail.storage import tables as t
from ragtrail.storage.corpus_store import pid_alive, stored_detail
from ragtrail.storage.db import make_engine, upgrade, utcnow, write_transaction
from ragtrail.storage.sql import batches, insert, utc

RUNNING, SUCCESS, FAILED_QUALITY = "running", "success", "failed_quality"
FAILED, ABANDONED = "failed", "abandoned"
INCOMPLETE = frozenset({RUNNING, FAILED, ABANDONED})
"""The statuses of a run that did not complete: never a previous run, a baseline or compared
without a flag."""
BATCH_SIZE = 2000
"""Rows per executemany batch."""
T = TypeVar("T")


@dataclass(frozen=True)
class RunOwner:
    """Who runs a run: its host, and its pid when one process runs all of it (the CLI,
    ``ragtrail nightly``); Airflow tasks, each a process of its own, leave the pid out."""

    host: str
    pid: int | None

    @classmethod
    def this_process(cls, *, holds_run: bool = True) -> RunOwner:
        return cls(socket.gethostname(), os.getpid() if holds_run else None)


@dataclass(frozen=True)
class RunRecord:
    """One row of ``runs``; datetimes are timezone-aware UTC."""

    run_id: str
    kind: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    params: JsonObject
    report_uri: str | None
    corpus: str | None
    snapshot_id: str | None
    qa_set_version: str | None
    owner_host: str | None = None
    owner_pid: int | None = None
    heartbeat_at: datetime | None = None
    status_detail: str | None = None

    @property
    def complete(self) -> bool:
        """Neither running, failed nor abandoned."""
        return self.status not in INCOMPLETE

    def owner_text(self) -> str:
        """Who runs it, for messages: "pid 42 on host h", "host h" or "an unknown owner"."""
        if self.owner_host is None:
            return "an unknown owner"
        if self.owner_pid is None:
            return f"host {self.owner_host}"
        return f"pid {self.owner_pid} on host {self.owner_host}"

    def state_text(self) -> str:
        """Its status with why, for messages: "failed (6 of 6 ... failed)", "still running (pid
        42 on host h, last heartbeat ...)"."""
        if self.status == RUNNING:
            beat = _when(self.heartbeat_at or self.started_at)
            return f"still running ({self.owner_text()}, last heartbeat {beat})"
        detail = f" ({self.status_detail})" if self.status_detail else ""
        return f"{self.status}{detail}"


@dataclass(frozen=True)
class RunListing:
    """A run as ``ragtrail runs list`` shows it: the run plus its evaluations and metric count."""

    run: RunRecord
    evaluations: tuple[str, ...]
    n_metrics: int
    n_query_values: int


@dataclass(frozen=True)
class MetricPoint:
    """One aggregated metric of one run, evaluation and facet set (a ``metrics_history`` row)."""

    run_id: str
    evaluation: str
    metric: str
    facets: Mapping[str, FacetValue]
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    corpus: str | None
    corpus_snapshot: str
    qa_set_version: str
    models: Mapping[str, Any] = field(default_factory=dict)
    judges: Mapping[str, Any] = field(default_factory=dict)
    undefined: Mapping[str, str] = field(default_factory=dict)
    created_at: datetime | None = None
    ci_method: str | None = None

    @property
    def facet_key(self) -> str:
        return facet_key(self.facets)

    @property
    def label(self) -> str | None:
        label = self.facets.get("label")
        return None if label is None else str(label)

    @property
    def text_weight(self) -> float | None:
        weight = self.facets.get("text_weight")
        return None if weight is None else float(weight)


@dataclass(frozen=True)
class StoredQueryValue:
    """One stored per-query value (a ``query_results`` row)."""

    run_id: str
    evaluation: str
    qid: str
    facet_key: str
    metric: str
    value: float | None
    undefined_reason: str | None

    @property
    def facets(self) -> dict[str, FacetValue]:
        return parse_facet_key(self.facet_key)


class RunStore:
    """Runs, metrics history and per-query results on SQLite or PostgreSQL (SQLAlchemy Core)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def from_url(cls, url: str | URL, *, migrate: bool = True) -> RunStore:
        engine = make_engine(url)
        if migrate:
            upgrade(engine)
        return cls(engine)

    # -- runs --------------------------------------------------------------------------------

    def start_run(
        self,
        run_id: str,
        kind: str,
        params: Mapping[str, Any],
        *,
        corpus: str | None = None,
        snapshot_id: str | None = None,
        qa_set_version: str | None = None,
        owner: RunOwner | None = None,
    ) -> None:
        """Register a running run owned by ``owner``; starting it again resets it (retries are
        idempotent).

        ``corpus``, ``snapshot_id`` and ``qa_set_version`` default to the same keys of ``params``.
        Without an owner only its heartbeat tells whether it is alive.
        """
        now = utcnow()
        row = {
            "run_id": run_id,
            "kind": kind,
            "status": RUNNING,
            "started_at": now,
            "finished_at": None,
            "params": check_finite(redact_json(dict(params)), "run params"),
            "report_uri": None,
            "corpus": corpus if corpus is not None else _str_or_none(params.get("corpus")),
            "snapshot_id": snapshot_id
            if snapshot_id is not None
            else _str_or_none(params.get("snapshot_id")),
            "qa_set_version": qa_set_version
            if qa_set_version is not None
            else _str_or_none(params.get("qa_set_version")),
            **_owner_values(owner, now),
        }
        r = t.runs
        with write_transaction(self.engine) as conn:
            conn.execute(delete(r).where(r.c.run_id == run_id))
            conn.execute(r.insert(), [row])

    def finish_run(self, run_id: str, status: str, report_uri: str | None = None) -> None:
        """Record a run's final status and report location (kept when None); KeyError for an
        unknown run."""
        r = t.runs
        values: dict[str, Any] = {"status": status, "finished_at": utcnow(), "status_detail": None}
        if report_uri is not None:
            values["report_uri"] = report_uri
        with write_transaction(self.engine) as conn:
            result = conn.execute(update(r).where(r.c.run_id == run_id).values(values))
            if result.rowcount == 0:
                raise KeyError(f"no run {run_id!r}")

    def claim_run(self, run_id: str, owner: RunOwner | None) -> RunRecord:
        """Make ``owner`` the owner of a run a step is about to write to: running again (a
        retried or added step), with a fresh heartbeat and no reason; its start stays. KeyError
        for an unknown run."""
        r = t.runs
        values = {
            "status": RUNNING,
            "finished_at": None,
            "status_detail": None,
            **_owner_values(owner, utcnow()),
        }
        with write_transaction(self.engine) as conn:
            conn.execute(update(r).where(r.c.run_id == run_id).values(values))
            row = conn.execute(select(r).where(r.c.run_id == run_id)).mappings().first()
        if row is None:
            raise KeyError(f"no run {run_id!r}")
        return _run(row)

    def fail_run(self, run_id: str, detail: str, *, status: str = FAILED) -> bool:
        """End a *running* run as ``failed`` (or ``abandoned``) with the reason; False when it
        is unknown or not running (nothing changed)."""
        if status not in (FAILED, ABANDONED):
            raise ValueError(f"a run is closed as failed or abandoned, not {status!r}")
        r = t.runs
        values = {"status": status, "finished_at": utcnow(), "status_detail": stored_detail(detail)}
        with write_transaction(self.engine) as conn:
            result = conn.execute(
                update(r).where(r.c.run_id == run_id, r.c.status == RUNNING).values(values)
            )
        return bool(result.rowcount)

    def heartbeat(self, run_ids: Iterable[str], *, nights: Iterable[str] = ()) -> None:
        """Record that the running runs ``run_ids`` are alive, and every running run of the
        ``nights`` (``<night>.<set name>``): under Airflow a set's run may wait for the other
        sets' tasks for long, and the night's progress is its sign of life."""
        ids, prefixes = list(run_ids), [f"{night}." for night in nights]
        if not ids and not prefixes:
            return
        r = t.runs
        which = or_(
            r.c.run_id.in_(ids), *(r.c.run_id.startswith(p, autoescape=True) for p in prefixes)
        )
        with write_transaction(self.engine) as conn:
            conn.execute(
                update(r).where(r.c.status == RUNNING, which).values(heartbeat_at=utcnow())
            )

    def settle_stale_runs(
        self, stale_after: timedelta, *, host: str | None = None
    ) -> list[RunRecord]:
        """Mark the running runs whose owner is presumed dead ``abandoned`` with the reason,
        and return them as they are now: the owner's process is gone from this host, or the run
        has not reported for ``stale_after``."""
        host = host or socket.gethostname()
        r = t.runs
        with self.engine.connect() as conn:
            query = select(r).where(r.c.status == RUNNING)
            running = [_run(row) for row in conn.execute(query).mappings()]
        now = utcnow()
        doomed = [
            (run, reason)
            for run in running
            if (reason := run_stale_reason(run, now, stale_after, host)) is not None
        ]
        settled = []
        for run, reason in doomed:
            values = {"status": ABANDONED, "finished_at": now, "status_detail": reason}
            with write_transaction(self.engine) as conn:
                result = conn.execute(
                    update(r).where(r.c.run_id == run.run_id, r.c.status == RUNNING).values(values)
                )
            if result.rowcount:
                settled.append(
                    replace(run, status=ABANDONED, finished_at=now, status_detail=reason)
                )
        return settled

    def get_run(self, run_id: str) -> RunRecord | None:
        r = t.runs
        with self.engine.connect() as conn:
            row = conn.execute(select(r).where(r.c.run_id == run_id)).mappings().first()
        return _run(row) if row is not None else None

    def previous_run(self, run_id: str) -> RunRecord | None:
        """The most recent complete run of the same kind, corpus and QA-set version that started
        before ``run_id`` did (what a night is compared with); None when there is none. Runs
        that are running, failed or abandoned are skipped.

        KeyError for an unknown run; a run without corpus or QA-set version has no previous run.
        """
        run = self.get_run(run_id)
        if run is None:
            raise KeyError(f"no run {run_id!r}")
        if run.corpus is None or run.qa_set_version is None:
            return None
        r = t.runs
        query = (
            select(r)
            .where(
                r.c.kind == run.kind,
                r.c.corpus == run.corpus,
                r.c.qa_set_version == run.qa_set_version,
                r.c.run_id != run.run_id,
                r.c.started_at < run.started_at,
                r.c.status.not_in(sorted(INCOMPLETE)),
            )
            .order_by(r.c.started_at.desc(), r.c.run_id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _run(row) if row is not None else None

    def list_runs(self, corpus: str | None = None, limit: int = 100) -> list[RunListing]:
        """Runs newest first (optionally of one corpus) with their evaluations and counts."""
        r, m, q = t.runs, t.metrics_history, t.query_results
        query = select(r)
        if corpus is not None:
            query = query.where(r.c.corpus == corpus)
        query = query.order_by(r.c.started_at.desc(), r.c.run_id.desc()).limit(limit)
        with self.engine.connect() as conn:
            runs = [_run(row) for row in conn.execute(query).mappings()]
            ids = [run.run_id for run in runs]
            metric_counts: dict[str, int] = {}
            evaluations: dict[str, set[str]] = {}
            query_counts: dict[str, int] = {}
            for batch in batches(ids, 500):
                per_eval = (
                    select(m.c.run_id, m.c.evaluation, func.count())
                    .where(m.c.run_id.in_(batch))
                    .group_by(m.c.run_id, m.c.evaluation)
                )
                for run_id, evaluation, count in conn.execute(per_eval):
                    metric_counts[run_id] = metric_counts.get(run_id, 0) + int(count)
                    evaluations.setdefault(run_id, set()).add(evaluation)
                per_query = (
                    select(q.c.run_id, func.count())
                    .where(q.c.run_id.in_(batch))
                    .group_by(q.c.run_id)
                )
                query_counts.update({rid: int(n) for rid, n in conn.execute(per_query)})
        return [
            RunListing(
                run=run,
                evaluations=tuple(sorted(evaluations.get(run.run_id, ()))),
                n_metrics=metric_counts.get(run.run_id, 0),
                n_query_values=query_counts.get(run.run_id, 0),
            )
            for run in runs
        ]

    # -- metrics history ---------------------------------------------------------------------

    def replace_metrics(
        self, run_id: str, points: Sequence[MetricPoint], *, evaluation: str | None = None
    ) -> None:
        """Replace the metric points of ``run_id`` (of one ``evaluation``, or all) with ``points``.

        (evaluation, metric, facets) must be unique per run; the database enforces it too.
        """
        rows = _metric_rows(run_id, points, evaluation)
        m = t.metrics_history
        with write_transaction(self.engine) as conn:
            _delete_run_rows(conn, m, run_id, evaluation)
            insert(conn, m, rows)

    def metrics_history(
        self,
        metric: str | None = None,
        label: str | None = None,
        limit: int = 10_000,
        *,
        corpus: str | None = None,
        evaluation: str | None = None,
        facets: Mapping[str, FacetValue] | None = None,
    ) -> list[MetricPoint]:
        """The most recent ``limit`` points matching the filters, oldest first.

        ``facets`` selects points with exactly that facet set (via the canonical facet key).
        """
        m = t.metrics_history
        conditions = []
        if metric is not None:
            conditions.append(m.c.metric == metric)
        if label is not None:
            conditions.append(m.c.label == label)
        if corpus is not None:
            conditions.append(m.c.corpus == corpus)
        if evaluation is not None:
            conditions.append(m.c.evaluation == evaluation)
        if facets is not None:
            conditions.append(m.c.facet_key == facet_key(facets))
        query = select(m).where(and_(True, *conditions))
        query = query.order_by(m.c.created_at.desc(), m.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            points = [_point(row) for row in conn.execute(query).mappings()]
        points.reverse()
        return points

    # -- per-query results -------------------------------------------------------------------

    def replace_query_results(
        self, run_id: str, evaluation: str, values: Sequence[QueryValue]
    ) -> None:
        """Replace the per-query values of one run and evaluation."""
        rows = _query_rows(run_id, evaluation, values)
        q = t.query_results
        with write_transaction(self.engine) as conn:
            _delete_run_rows(conn, q, run_id, evaluation)
            insert(conn, q, rows)

    def query_results(self, run_id: str, evaluation: str | None = None) -> list[StoredQueryValue]:
        """Per-query values of a run (optionally one evaluation), in a stable order."""
        q = t.query_results
        query = select(q).where(q.c.run_id == run_id)
        if evaluation is not None:
            query = query.where(q.c.evaluation == evaluation)
        query = query.order_by(q.c.evaluation, q.c.metric, q.c.facet_key, q.c.qid)
        with self.engine.connect() as conn:
            return [
                StoredQueryValue(
                    run_id=row["run_id"],
                    evaluation=row["evaluation"],
                    qid=row["qid"],
                    facet_key=row["facet_key"],
                    metric=row["metric"],
                    value=row["value"],
                    undefined_reason=row["undefined_reason"],
                )
                for row in conn.execute(query).mappings()
            ]

    # -- both at once ------------------------------------------------------------------------

    def record_evaluation(
        self,
        run_id: str,
        result: EvaluationResult,
        *,
        corpus: str | None,
        corpus_snapshot: str,
        qa_set_version: str,
        models: Mapping[str, Any],
        judges: Mapping[str, Any] | None = None,
    ) -> list[MetricPoint]:
        """Store an evaluation's aggregates and per-query values in one transaction."""
        now = utcnow()
        points = [
            MetricPoint(
                run_id=run_id,
                evaluation=result.evaluator,
                metric=agg.metric,
                facets=agg.facets,
                value=agg.value,
                ci_low=agg.ci_low,
                ci_high=agg.ci_high,
                n=agg.n,
                corpus=corpus,
                corpus_snapshot=corpus_snapshot,
                qa_set_version=qa_set_version,
                models=redact_json(dict(models)),
                judges=redact_json(dict(judges or {})),
                undefined=dict(agg.undefined),
                created_at=now,
                ci_method=agg.ci_method,
            )
            for agg in result.aggregates
        ]
        metric_rows = _metric_rows(run_id, points, result.evaluator)
        query_rows = _query_rows(run_id, result.evaluator, result.queries)
        with write_transaction(self.engine) as conn:
            _delete_run_rows(conn, t.metrics_history, run_id, result.evaluator)
            insert(conn, t.metrics_history, metric_rows)
            _delete_run_rows(conn, t.query_results, run_id, result.evaluator)
            insert(conn, t.query_results, query_rows)
        return points


# -- rows in and out -------------------------------------------------------------------------


def _metric_rows(
    run_id: str, points: Sequence[MetricPoint], evaluation: str | None
) -> list[dict[str, Any]]:
    now = utcnow()
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for point in points:
        if point.run_id != run_id:
            raise ValueError(f"metric point of run {point.run_id!r} given for run {run_id!r}")
        if evaluation is not None and point.evaluation != evaluation:
            raise ValueError(f"point of {point.evaluation!r} given for {evaluation!r}")
        facets = canonical_facets(point.facets)
        key = (point.evaluation, point.metric, facet_key(facets))
        if key in seen:
            raise ValueError(f"duplicate metric point {key} in run {run_id!r}")
        seen.add(key)
        for name in ("value", "ci_low", "ci_high"):
            if getattr(point, name) is None and name not in point.undefined:
                raise ValueError(f"{key}: {name} is None without a reason in undefined")
        row = {
            "run_id": run_id,
            "corpus_snapshot": point.corpus_snapshot,
            "qa_set_version": point.qa_set_version,
            "metric": point.metric,
            "label": point.label,
            "text_weight": point.text_weight,
            "value": point.value,
            "ci_low": point.ci_low,
            "ci_high": point.ci_high,
            "n": point.n,
            "created_at": point.created_at or now,
            "corpus": point.corpus,
            "evaluation": point.evaluation,
            "facet_key": key[2],
            "facets": facets,
            "models": redact_json(dict(point.models)),
            "judges": redact_json(dict(point.judges)),
            "undefined": dict(point.undefined),
            "ci_method": point.ci_method,
        }
        rows.append(check_finite(row, f"metric point {key}"))
    return rows


def _query_rows(run_id: str, evaluation: str, values: Sequence[QueryValue]) -> list[dict[str, Any]]:
    rows = []
    seen: set[tuple[str, str, str]] = set()
    for value in values:
        key = (value.metric, facet_key(value.facets), value.qid)
        if key in seen:
            raise ValueError(f"duplicate per-query value {key} in run {run_id!r}")
        seen.add(key)
        rows.append(
            {
                "run_id": run_id,
                "evaluation": evaluation,
                "qid": value.qid,
                "facet_key": key[1],
                "metric": value.metric,
                "value": value.value,
                "undefined_reason": value.undefined_reason,
            }
        )
    return check_finite(rows, "per-query values")


def _delete_run_rows(conn: Connection, table: Any, run_id: str, evaluation: str | None) -> None:
    query = delete(table).where(table.c.run_id == run_id)
    if evaluation is not None:
        query = query.where(table.c.evaluation == evaluation)
    conn.execute(query)


def run_stale_reason(
    run: RunRecord, now: datetime, stale_after: timedelta, host: str
) -> str | None:
    """Why the owner of the running ``run`` is presumed dead, or None while it may be alive."""
    beat = run.heartbeat_at or run.started_at
    if now - beat > stale_after:
        return (
            f"no heartbeat from {run.owner_text()} since {_when(beat)} "
            f"(runs.stale_after_s={int(stale_after.total_seconds())})"
        )
    if run.owner_pid is not None and run.owner_host == host and not pid_alive(run.owner_pid):
        return f"its process (pid {run.owner_pid} on host {host}) is gone"
    return None


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _owner_values(owner: RunOwner | None, now: datetime) -> dict[str, Any]:
    return {
        "owner_host": owner.host if owner else None,
        "owner_pid": owner.pid if owner else None,
        "heartbeat_at": now,
    }


def _run(row: RowMapping) -> RunRecord:
    return RunRecord(
        run_id=row["run_id"],
        kind=row["kind"],
        status=row["status"],
        started_at=utc(row["started_at"]),
        finished_at=utc(row["finished_at"]) if row["finished_at"] is not None else None,
        params=dict(row["params"] or {}),
        report_uri=row["report_uri"],
        corpus=row["corpus"],
        snapshot_id=row["snapshot_id"],
        qa_set_version=row["qa_set_version"],
        owner_host=row["owner_host"],
        owner_pid=row["owner_pid"],
        heartbeat_at=utc(row["heartbeat_at"]) if row["heartbeat_at"] is not None else None,
        status_detail=row["status_detail"],
    )


def _point(row: RowMapping) -> MetricPoint:
    return MetricPoint(
        run_id=row["run_id"],
        evaluation=row["evaluation"],
        metric=row["metric"],
        facets=dict(row["facets"]),
        value=row["value"],
        ci_low=row["ci_low"],
        ci_high=row["ci_high"],
        n=int(row["n"]),
        corpus=row["corpus"],
        corpus_snapshot=row["corpus_snapshot"],
        qa_set_version=row["qa_set_version"],
        models=dict(row["models"]),
        judges=dict(row["judges"]),
        undefined=dict(row["undefined"]),
        created_at=utc(row["created_at"]),
        ci_method=row["ci_method"],
    )


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
