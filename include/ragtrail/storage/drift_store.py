"""Drift baselines and drift decisions (tables ``drift_baselines`` and ``drift_decisions``).

A run is checked against the *baseline* of its corpus and QA-set version, resolved in this order:

1. ``pinned``: the run pinned by hand (``ragtrail runs pin RUN``);
2. ``champion``: the run the current champion model was accepted on
   (:meth:`DriftStore.record_champion_baseline`, called by the promotion step);
3. ``first``: the earliest successfully finished run of the same kind, corpus and QA-set version
   that started before the checked run.

A run that did not complete (running, failed, abandoned) is never a baseline: it cannot be
pinned or recorded as the champion's, and a stored baseline whose run has since failed or been
abandoned is passed over for the next kind.

Decisions are stored whatever they say; the id is derived from (run, baseline run) so checking the
same pair again replaces the row instead of adding one.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import delete, select
from sqlalchemy.engine import RowMapping

from ragtrail.jsonsafe import JsonObject
from ragtrail.storage import tables as t
from ragtrail.storage.db import utcnow, write_transaction
from ragtrail.storage.runs_store import ABANDONED, FAILED, RunRecord, RunStore
from ragtrail.storage.sql import SqlStore, as_dict, upsert
from ragtrail.summaries.drift_summary import DriftDecision

PINNED, CHAMPION, FIRST = "pinned", "champion", "first"
BaselineKind = Literal["pinned", "champion", "first"]
CHECKED, NO_BASELINE = "checked", "no_baseline"
SUCCESS = "success"
"""The status of a run whose publication passed (``pipeline/publish.py``)."""

log = logging.getLogger(__name__)


class BaselineError(ValueError):
    """A run that cannot serve as a baseline (every problem listed in the message)."""


@dataclass(frozen=True)
class BaselineRecord:
    """One stored baseline of a (corpus, QA-set version)."""

    corpus: str
    qa_set_version: str
    kind: str  # pinned | champion
    run_id: str
    model: str | None
    model_version: str | None
    note: str | None
    created_at: datetime

    def as_dict(self) -> JsonObject:
        return {**self.__dict__, "created_at": self.created_at.isoformat()}


@dataclass(frozen=True)
class ResolvedBaseline:
    """The run a check compares with, and why that one."""

    run: RunRecord
    kind: BaselineKind


def decision_id_for(run_id: str, baseline_run_id: str | None) -> str:
    """Stable id of the check of ``run_id`` against ``baseline_run_id`` (None: no baseline)."""
    digest = hashlib.sha256(f"{run_id}\n{baseline_run_id or ''}".encode()).hexdigest()
    return f"drift-{digest[:20]}"


class DriftStore(SqlStore):
    """Baselines and decisions in the metadata database."""

    # -- baselines ---------------------------------------------------------------------------

    def pin(self, run_id: str, *, note: str | None = None) -> BaselineRecord:
        """Pin ``run_id`` as the baseline of its corpus and QA-set version (replacing a pin)."""
        run = self._baseline_run(run_id, require_finished=True)
        return self._put_baseline(run, PINNED, note=note)

    def unpin(self, run_id: str) -> int:
        """Remove every pin of ``run_id``; returns how many were removed (0: it was not pinned)."""
        b = t.drift_baselines
        with write_transaction(self.engine) as conn:
            result = conn.execute(delete(b).where(b.c.kind == PINNED, b.c.run_id == run_id))
            return int(result.rowcount)

    def record_champion_baseline(
        self, corpus: str, run_id: str, model: str, version: str
    ) -> BaselineRecord:
        """Record ``run_id`` as the run the champion ``model`` version ``version`` was accepted
        on: the baseline of the run's QA-set version when nothing is pinned. Replaces the
        previous champion baseline of that QA-set version."""
        run = self._baseline_run(run_id, require_finished=False)
        problems = []
        if run.corpus != corpus:
            problems.append(f"run {run_id!r} is of corpus {run.corpus!r}, not {corpus!r}")
        if not model or not version:
            problems.append("the champion needs a model name and a version")
        if problems:
            raise BaselineError("; ".join(problems))
        return self._put_baseline(run, CHAMPION, model=model, model_version=version)

    def baselines(self, corpus: str | None = None) -> list[BaselineRecord]:
        """Stored baselines (optionally of one corpus), by corpus, QA-set version and kind."""
        b = t.drift_baselines
        query = select(b).order_by(b.c.corpus, b.c.qa_set_version, b.c.kind)
        if corpus is not None:
            query = query.where(b.c.corpus == corpus)
        with self.engine.connect() as conn:
            return [BaselineRecord(**as_dict(r)) for r in conn.execute(query).mappings()]

    def resolve_baseline(self, run: RunRecord) -> ResolvedBaseline | None:
        """The baseline of ``run``: pinned, else champion, else first (module docstring)."""
        if run.corpus is None or run.qa_set_version is None:
            return None
        runs = RunStore(self.engine)
        stored = {
            b.kind: b for b in self.baselines(run.corpus) if b.qa_set_version == run.qa_set_version
        }
        for kind in (PINNED, CHAMPION):
            baseline = stored.get(kind)
            if baseline is not None:
                record = runs.get_run(baseline.run_id)
                if record is not None and record.complete:
                    return ResolvedBaseline(record, kind)  # type: ignore[arg-type]
                if record is not None:
                    log.warning(
                        "%s baseline %s passed over: it %s",
                        kind,
                        record.run_id,
                        record.state_text(),
                    )
        first = self._first_run(run)
        return ResolvedBaseline(first, FIRST) if first is not None else None

    def _first_run(self, run: RunRecord) -> RunRecord | None:
        r = t.runs
        query = (
            select(r.c.run_id)
            .where(
                r.c.kind == run.kind,
                r.c.corpus == run.corpus,
                r.c.qa_set_version == run.qa_set_version,
                r.c.status == SUCCESS,
                r.c.finished_at.is_not(None),
                r.c.run_id != run.run_id,
                r.c.started_at < run.started_at,
            )
            .order_by(r.c.started_at, r.c.run_id)
            .limit(1)
        )
        with self.engine.connect() as conn:
            run_id = conn.execute(query).scalar()
        return RunStore(self.engine).get_run(run_id) if run_id is not None else None

    def _baseline_run(self, run_id: str, *, require_finished: bool) -> RunRecord:
        run = RunStore(self.engine).get_run(run_id)
        if run is None:
            raise BaselineError(f"no run {run_id!r} (see `ragtrail runs list`)")
        problems = []
        if run.corpus is None:
            problems.append("it records no corpus")
        if run.qa_set_version is None:
            problems.append("it records no QA-set version")
        if run.status in (FAILED, ABANDONED):
            problems.append(f"it did not complete: {run.state_text()}")
        elif require_finished and run.finished_at is None:
            problems.append(f"it has not finished (status {run.status!r})")
        if problems:
            raise BaselineError(f"run {run_id!r} cannot be a baseline: " + "; ".join(problems))
        return run

    def _put_baseline(
        self,
        run: RunRecord,
        kind: str,
        *,
        note: str | None = None,
        model: str | None = None,
        model_version: str | None = None,
    ) -> BaselineRecord:
        assert run.corpus is not None and run.qa_set_version is not None
        record = BaselineRecord(
            corpus=run.corpus,
            qa_set_version=run.qa_set_version,
            kind=kind,
            run_id=run.run_id,
            model=model,
            model_version=model_version,
            note=note,
            created_at=utcnow(),
        )
        with write_transaction(self.engine) as conn:
            upsert(conn, t.drift_baselines, [record.__dict__], ["corpus", "qa_set_version", "kind"])
        return record

    # -- decisions ---------------------------------------------------------------------------

    def save_decision(self, record: DriftDecision) -> None:
        """Insert or replace the decision (same id: same run and baseline run)."""
        row = {**dict(record), "evidence": record.evidence.to_json()}  # strict JSON
        with write_transaction(self.engine) as conn:
            upsert(conn, t.drift_decisions, [row], ["decision_id"])

    def get_decision(self, decision_id: str) -> DriftDecision | None:
        d = t.drift_decisions
        with self.engine.connect() as conn:
            row = conn.execute(select(d).where(d.c.decision_id == decision_id)).mappings().first()
        return _decision(row) if row is not None else None

    def decisions(
        self, *, corpus: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> list[DriftDecision]:
        """Stored decisions, newest first, optionally of one corpus or one run."""
        d = t.drift_decisions
        query = select(d)
        if corpus is not None:
            query = query.where(d.c.corpus == corpus)
        if run_id is not None:
            query = query.where(d.c.run_id == run_id)
        query = query.order_by(d.c.created_at.desc(), d.c.decision_id).limit(limit)
        with self.engine.connect() as conn:
            return [_decision(r) for r in conn.execute(query).mappings()]


def _decision(row: RowMapping) -> DriftDecision:
    values = as_dict(row)
    values["fired"] = bool(values["fired"])
    return DriftDecision.model_validate(values)
