"""The budget gate every LLM client consults before it sends requests to a model.

A pipeline step that runs under a budget pushes a *check* onto the runtime's :class:`BudgetGate`
(``ragtrail.pipeline.budgets``); :class:`~ragtrail.llm.client.LLMClient` asks the gate before
each backend call. When a check names a reason (a ceiling is reached), the client sends nothing
more: the requests it had not sent fail with that reason, the replies it got are cached as
usual, and the call raises :class:`BudgetExhausted` for the step to stop cleanly. Cache hits are
always served: they cost nothing.

This module also prices usage: a model listed in the price table costs what it says, a local
model (any backend but an OpenAI-compatible endpoint) costs 0, and an endpoint's model without a
price has an unknown cost (None), never a made-up one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from ragtrail.llm.usage import Price, UsageCounters, UsageKey

BudgetCheck = Callable[[], "str | None"]
"""Returns why no more model calls may be made now, or None."""

REMOTE_BACKENDS = ("openai",)
"""Backend names (prefixes) that bill per token; every other backend runs locally."""


class BudgetExhausted(RuntimeError):
    """A budget ceiling was reached: the step stops, keeps what it finished, and says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"budget reached: {reason}")
        self.reason = reason
        self.note: object | None = None
        """The stopped step's budget record, attached by the pipeline on its way up."""


class BudgetGate:
    """The checks in force (a stack: a step inside a night), shared by every client of one
    runtime. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checks: list[BudgetCheck] = []

    def push(self, check: BudgetCheck) -> None:
        with self._lock:
            self._checks.append(check)

    def pop(self, check: BudgetCheck) -> None:
        with self._lock:
            if check in self._checks:
                self._checks.remove(check)

    def reason(self) -> str | None:
        """The first reason a check gives, or None when model calls may go on."""
        with self._lock:
            checks = list(self._checks)
        for check in checks:
            why = check()
            if why:
                return why
        return None

    def check(self) -> None:
        """Raise :class:`BudgetExhausted` when a check gives a reason."""
        why = self.reason()
        if why:
            raise BudgetExhausted(why)


def price_of(backend: str, model_id: str, prices: Mapping[str, Price]) -> Price | None:
    """The model's price: from the table, else 0 for a local backend, else unknown (None)."""
    if model_id in prices:
        return prices[model_id]
    if backend.startswith(REMOTE_BACKENDS):
        return None
    return Price(0.0, 0.0)


def cost_usd(
    snapshot: Mapping[UsageKey, UsageCounters], prices: Mapping[str, Price]
) -> float | None:
    """What ``snapshot`` (a :meth:`UsageMeter.snapshot`) cost in USD; None when a model that
    was called has no price."""
    total = 0.0
    for (_stage, backend, model_id), counters in snapshot.items():
        if counters.calls == 0:
            continue
        price = price_of(backend, model_id, prices)
        if price is None:
            return None
        total += price.cost(counters)
    return round(total, 6)
