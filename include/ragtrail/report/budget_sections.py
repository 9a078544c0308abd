"""The report's budget section: per budgeted LLM step of the night, the n asked, run and
finished, what it spent, and which budget bounded it (README "Budgets")."""

from __future__ import annotations

from collections.abc import Sequence

from ragtrail.report.html import ReportSection, render_section
from ragtrail.summaries.budget_summary import StepBudgetNote

BUDGET_COLUMNS = [
    "step",
    "instance",
    "n asked",
    "n run",
    "n done",
    "model calls",
    "cache hits",
    "tokens",
    "cost (USD)",
    "seconds",
    "status",
]


def budget_sections(notes: Sequence[StepBudgetNote], night: str) -> list[ReportSection]:
    """One table of the night's budgeted step instances (none when there are none)."""
    if not notes:
        return []
    rows = [
        [
            n.step,
            n.scope,
            n.items_planned,
            n.items_run,
            n.items_done,
            n.calls,
            n.cache_hits,
            n.tokens,
            "unknown (no price)" if n.cost_usd is None else f"{n.cost_usd:.4f}",
            f"{n.seconds:.1f}",
            f"PARTIAL: {n.reason}" if n.partial else "complete",
        ]
        for n in notes
    ]
    partial = sum(1 for n in notes if n.partial)
    note = (
        f"Night {night}: {partial} step instance(s) bounded by a budget (partial: fewer items "
        "than asked, or stopped mid-way with what they finished kept)."
        if partial
        else f"Night {night}: no budget bounded a step."
    )
    html = render_section("table_section.html", columns=BUDGET_COLUMNS, rows=rows, note=note)
    return [
        ReportSection(title="Budgets: model calls, tokens, cost and time per step", html=str(html))
    ]
