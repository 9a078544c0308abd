"""What the night's LLM steps spent (table ``step_usage``): the ledger budgets read and write.

One row per step instance, keyed by (night, step, scope): a QA set's citation / sufficiency /
evidence run (scope: the set's run id), a generation shard, the judges' calibration. A row is
written ``running`` when the instance starts and rewritten with its usage when it ends
(``complete``, or ``partial`` with the reason a budget gave), so a retried task replaces its own
row instead of adding one. A night's totals are the sum of its rows, read from the database, so
a budget holds across Airflow tasks (each its own process). The row ``step = "night"`` marks when
the night started (its time budget runs from there). Earlier nights' rows are the history the
estimates of the next night are made from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, not_, select, update

from ragtrail.storage import tables as t
from ragtrail.storage.db import utcnow, write_transaction
from ragtrail.storage.sql import SqlStore, upsert, utc

NIGHT_STEP = "night"
"""The ``step`` of the row that marks a night's start."""
RUNNING, COMPLETE, PARTIAL = "running", "complete", "partial"


@dataclass(frozen=True)
class StepUsage:
    """One step instance's row: how many items it was asked for, ran and finished, what it
    spent, and (``partial``) why a budget stopped it."""

    night: str
    corpus: str
    step: str
    scope: str
    status: str
    started_at: datetime
    items_planned: int = 0
    items_run: int = 0
    items_done: int = 0
    calls: int = 0
    cache_hits: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    seconds: float = 0.0
    fingerprint: str | None = None
    reason: str | None = None
    finished_at: datetime | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def partial(self) -> bool:
        return self.status == PARTIAL


@dataclass(frozen=True)
class Spent:
    """A night's (or a step's) usage so far: model calls, tokens, cost (None: a model without
    price was used), and the start of the night."""

    calls: int = 0
    tokens: int = 0
    cost_usd: float | None = 0.0
    started_at: datetime | None = None


class BudgetStore(SqlStore):
    """Reads and writes ``step_usage``."""

    def open_night(self, night: str, corpus: str, started_at: datetime | None = None) -> datetime:
        """Mark the start of ``night`` unless it is marked already; returns the start."""
        existing = self.night_start(night)
        if existing is not None:
            return existing
        start = started_at or utcnow()
        row = StepUsage(night, corpus, NIGHT_STEP, NIGHT_STEP, COMPLETE, start, finished_at=start)
        with write_transaction(self.engine) as conn:
            upsert(conn, t.step_usage, [_row(row)], ["night", "step", "scope"], update_cols=[])
        return self.night_start(night) or start

    def close_night(self, night: str) -> None:
        """Mark the end of ``night`` (its marker's ``finished_at`` and wall seconds)."""
        s = t.step_usage
        start = self.night_start(night)
        if start is None:
            return
        now = utcnow()
        with write_transaction(self.engine) as conn:
            conn.execute(
                update(s)
                .where(s.c.night == night, s.c.step == NIGHT_STEP)
                .values(finished_at=now, seconds=(now - start).total_seconds())
            )

    def last_closed_night(self, corpus: str, before: str | None = None) -> StepUsage | None:
        """The newest finished night of ``corpus`` (its marker row), other than ``before``."""
        s = t.step_usage
        cond = [s.c.corpus == corpus, s.c.step == NIGHT_STEP, s.c.finished_at.is_not(None)]
        cond.append(s.c.seconds > 0)
        if before is not None:
            cond.append(s.c.night != before)
        query = select(s).where(*cond).order_by(s.c.started_at.desc()).limit(1)
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _usage(row)

    def night_start(self, night: str) -> datetime | None:
        """When ``night`` started (its marker row), or None."""
        s = t.step_usage
        query = select(s.c.started_at).where(s.c.night == night, s.c.step == NIGHT_STEP)
        with self.engine.connect() as conn:
            value = conn.execute(query).scalar()
        return None if value is None else utc(value)

    def latest_night_since(self, corpus: str, since: datetime) -> str | None:
        """The newest night of ``corpus`` started at or after ``since`` (Airflow's night)."""
        s = t.step_usage
        query = (
            select(s.c.night)
            .where(s.c.corpus == corpus, s.c.step == NIGHT_STEP, s.c.started_at >= since)
            .order_by(s.c.started_at.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            return conn.execute(query).scalar()

    def record(self, usage: StepUsage) -> None:
        """Write (or rewrite) one step instance's row."""
        with write_transaction(self.engine) as conn:
            upsert(conn, t.step_usage, [_row(usage)], ["night", "step", "scope"])

    def spent(
        self, night: str, step: str | None = None, *, exclude: tuple[str, str] | None = None
    ) -> Spent:
        """The night's usage over its rows (one step's, when given), leaving out the row
        ``exclude`` = (step, scope): the instance asking, which counts its own usage live."""
        s = t.step_usage
        cond = [s.c.night == night, s.c.step != NIGHT_STEP]
        if step is not None:
            cond.append(s.c.step == step)
        if exclude is not None:
            cond.append(not_(and_(s.c.step == exclude[0], s.c.scope == exclude[1])))
        query = select(
            func.coalesce(func.sum(s.c.calls), 0),
            func.coalesce(func.sum(s.c.prompt_tokens + s.c.completion_tokens), 0),
            func.coalesce(func.sum(s.c.cost_usd), 0.0),
            func.count(s.c.id) - func.count(s.c.cost_usd),
        ).where(*cond)
        with self.engine.connect() as conn:
            calls, tokens, cost, unpriced = conn.execute(query).one()
        return Spent(
            calls=int(calls),
            tokens=int(tokens),
            cost_usd=None if unpriced else round(float(cost), 6),
            started_at=self.night_start(night),
        )

    def night_rows(self, night: str) -> list[StepUsage]:
        """Every step instance of ``night`` (not its marker), in the order they started."""
        s = t.step_usage
        query = (
            select(s)
            .where(s.c.night == night, s.c.step != NIGHT_STEP)
            .order_by(s.c.started_at, s.c.id)
        )
        with self.engine.connect() as conn:
            return [_usage(r) for r in conn.execute(query).mappings()]

    def history(
        self,
        step: str,
        *,
        corpus: str | None = None,
        before_night: str | None = None,
        limit: int = 50,
    ) -> list[StepUsage]:
        """Finished instances of ``step`` (newest first) from nights other than
        ``before_night``: what the estimates are made from."""
        s = t.step_usage
        cond = [s.c.step == step, s.c.status != RUNNING]
        if corpus is not None:
            cond.append(s.c.corpus == corpus)
        if before_night is not None:
            cond.append(s.c.night != before_night)
        query = select(s).where(*cond).order_by(s.c.started_at.desc(), s.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [_usage(r) for r in conn.execute(query).mappings()]


def _row(u: StepUsage) -> dict[str, object]:
    return {
        "night": u.night[:128],
        "corpus": u.corpus[:128],
        "step": u.step[:32],
        "scope": u.scope[:256],
        "fingerprint": u.fingerprint,
        "status": u.status,
        "reason": u.reason,
        "started_at": u.started_at,
        "finished_at": u.finished_at,
        "items_planned": u.items_planned,
        "items_run": u.items_run,
        "items_done": u.items_done,
        "calls": u.calls,
        "cache_hits": u.cache_hits,
        "failures": u.failures,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "cost_usd": u.cost_usd,
        "seconds": round(u.seconds, 3),
    }


def _usage(row: object) -> StepUsage:
    r = dict(row)  # type: ignore[call-overload]
    r.pop("id", None)
    r["started_at"] = utc(r["started_at"])
    r["finished_at"] = utc(r["finished_at"]) if r["finished_at"] is not None else None
    return StepUsage(**r)
