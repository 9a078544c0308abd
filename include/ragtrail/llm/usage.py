"""Per-stage accounting of model calls: calls, cache hits, failures, tokens and optional cost.

A :class:`UsageMeter` lives for one pipeline run. :meth:`UsageMeter.flush` writes its cumulative
totals to ``llm_usage`` with an upsert keyed by (run_id, stage, backend, model_id), so flushing
after every stage, or twice after a retried task, leaves exactly one correct row per key.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from sqlalchemy import Engine, and_, select, update

from ragtrail.jsonsafe import JsonObject
from ragtrail.redact import redact
from ragtrail.storage.db import write_transaction
from ragtrail.storage.tables import llm_usage


def _added(row: JsonObject, other: JsonObject) -> JsonObject:
    """Two usage rows of one key as one: counters and costs added (a cost stays unknown only
    when both are)."""
    total = dict(row)
    for name in asdict(UsageCounters()):
        total[name] = row[name] + other[name]
    costs = [c for c in (row["cost_usd"], other["cost_usd"]) if c is not None]
    total["cost_usd"] = round(sum(costs), 6) if costs else None
    return total


@dataclass
class UsageCounters:
    calls: int = 0
    cache_hits: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def model_calls(self) -> int:
        """Requests actually sent to a backend (cache hits excluded)."""
        return self.calls


@dataclass(frozen=True)
class Price:
    """USD per 1,000 tokens."""

    prompt_per_1k: float
    completion_per_1k: float

    def cost(self, c: UsageCounters) -> float:
        return (
            c.prompt_tokens * self.prompt_per_1k + c.completion_tokens * self.completion_per_1k
        ) / 1000.0


UsageKey = tuple[str, str, str]
"""(stage, backend name, model id)."""


class UsageMeter:
    """Thread-safe counters keyed by (stage, backend, model). ``prices`` maps model id -> Price."""

    def __init__(self, prices: Mapping[str, Price | tuple[float, float]] | None = None) -> None:
        self._lock = threading.Lock()
        self._counters: dict[UsageKey, UsageCounters] = {}
        self.prices: dict[str, Price] = {
            k: v if isinstance(v, Price) else Price(*v) for k, v in (prices or {}).items()
        }

    def record(
        self,
        stage: str,
        backend: str,
        model_id: str,
        *,
        calls: int = 0,
        cache_hits: int = 0,
        failures: int = 0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
    ) -> None:
        with self._lock:
            c = self._counters.setdefault((stage, backend, model_id), UsageCounters())
            c.calls += calls
            c.cache_hits += cache_hits
            c.failures += failures
            c.prompt_tokens += prompt_tokens
            c.completion_tokens += completion_tokens

    def get(self, stage: str, backend: str, model_id: str) -> UsageCounters:
        with self._lock:
            c = self._counters.get((stage, backend, model_id), UsageCounters())
            return UsageCounters(**asdict(c))

    def totals(self, stage: str | None = None) -> UsageCounters:
        """Sum over all keys (or over one stage)."""
        out = UsageCounters()
        with self._lock:
            for (st, _, _), c in self._counters.items():
                if stage is None or st == stage:
                    for f in asdict(out):
                        setattr(out, f, getattr(out, f) + getattr(c, f))
        return out

    def snapshot(self) -> dict[UsageKey, UsageCounters]:
        with self._lock:
            return {k: UsageCounters(**asdict(v)) for k, v in self._counters.items()}

    def cost_usd(self, model_id: str, counters: UsageCounters) -> float | None:
        price = self.prices.get(model_id)
        return None if price is None else round(price.cost(counters), 6)

    def flush(self, engine: Engine, run_id: str) -> int:
        """Upsert every key's cumulative totals into ``llm_usage``; returns the rows written.

        The stored model id is redacted (:func:`ragtrail.redact.redact`): ids that differ only
        in hidden credentials share one row, their counts added."""
        merged: dict[tuple[str, str, str], JsonObject] = {}
        for (stage, backend, model_id), c in self.snapshot().items():
            row = {
                "run_id": run_id,
                "stage": stage[:64],
                "backend": backend[:64],
                "model_id": redact(model_id)[:256],
                **asdict(c),
                "cost_usd": self.cost_usd(model_id, c),
            }
            key = (row["stage"], row["backend"], row["model_id"])
            merged[key] = _added(merged[key], row) if key in merged else row
        rows = list(merged.values())
        if not rows:
            return 0
        keys = ["run_id", "stage", "backend", "model_id"]
        values = [
            "calls",
            "cache_hits",
            "failures",
            "prompt_tokens",
            "completion_tokens",
            "cost_usd",
        ]
        dialect = engine.dialect.name
        with write_transaction(engine) as conn:
            if dialect in ("sqlite", "postgresql"):
                if dialect == "sqlite":
                    from sqlalchemy.dialects.sqlite import insert
                else:
                    from sqlalchemy.dialects.postgresql import insert
                stmt = insert(llm_usage).values(rows)
                stmt = stmt.on_conflict_do_update(
                    index_elements=keys, set_={v: stmt.excluded[v] for v in values}
                )
                conn.execute(stmt)
            else:  # portable fallback: update, insert when nothing matched
                for row in rows:
                    cond = and_(*(llm_usage.c[k] == row[k] for k in keys))
                    exists = conn.execute(select(llm_usage.c.id).where(cond)).first()
                    if exists:
                        conn.execute(
                            update(llm_usage).where(cond).values(**{v: row[v] for v in values})
                        )
                    else:
                        conn.execute(llm_usage.insert().values(**row))
        return len(rows)
