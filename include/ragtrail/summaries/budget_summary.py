"""Budget records: what a budgeted LLM step was asked for, ran, finished and spent, and why a
budget bounded it (README "Budgets")."""

from __future__ import annotations

from ragtrail.summaries.base import Record


class StepBudgetNote(Record):
    """One budgeted step instance (one QA set's citations, a generation shard, ...).

    ``items_planned`` is the n its settings asked for, ``items_run`` the n the budgets allowed
    before it started (from the estimate), ``items_done`` the n it finished (0 when a ceiling
    stopped it mid-way: the model calls it made are cached and the next night replays them).
    ``partial`` says a budget bounded it, ``reason`` which one and how."""

    step: str
    scope: str
    items_planned: int
    items_run: int
    items_done: int
    partial: bool
    reason: str | None
    calls: int
    cache_hits: int
    tokens: int
    cost_usd: float | None
    seconds: float
