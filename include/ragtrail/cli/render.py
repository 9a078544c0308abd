"""Rendering shared by several command groups: numbers and confidence intervals as text, and the
best-strategy table of retrieval evaluations (``eval retrieval`` and ``nightly``)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import console
from ragtrail.summaries.base import Figure
from ragtrail.summaries.retrieval_summary import BestRow, Change, ChangeRow


def num(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    """A number, or "undefined" for null (the reason is in the record's ``undefined``)."""
    return "undefined" if value is None else f"{value:{spec}}{suffix}"


def value_ci(agg: Figure | None) -> str:
    """An aggregate as ``value [low, high]`` (two decimals), or "undefined" without a value."""
    if agg is None or agg.value is None:
        return "undefined"
    low, high = agg.ci_low, agg.ci_high
    ci = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    return f"{agg.value:.2f}{ci}"


def print_best(
    best: Sequence[BestRow],
    *,
    title: str | None = None,
    change: Change | None = None,
) -> None:
    """The best-strategy table; with ``change``, each label's change since the previous run."""
    changes = {row.label: row for row in (change.rows or []) if change} if change else {}
    columns = ["label", "n", "dense", "lexical", "best R@5", "best weight", "gap"]
    table = Table(*columns, *(["change vs previous [95% CI]"] if changes else []), title=title)
    reasons: dict[str, str] = {}
    for row in best:
        gap = row.gap_to_best
        cells = [
            row.label,
            str(row.n_questions),
            num(row.dense),
            num(row.lexical),
            num(row.best_recall),
            num(row.best_weight, "g"),
            num(None if gap is None else 100 * gap, ".1f", "%"),
        ]
        if changes:
            cells.append(_change_cell(changes.get(row.label)))
        table.add_row(*cells)
        reasons.update(row.undefined)
    Console().print(table)
    for field, reason in reasons.items():
        console.print(f"{field} undefined: {reason}", highlight=False)
    if change is not None:
        console.print(_change_line(change), highlight=False)


def _change_cell(row: ChangeRow | None) -> str:
    """One label's change with its CI, or "undefined (why)"."""
    if row is None or row.diff is None:
        return f"undefined ({row.reason('diff', 'not compared') if row else 'not compared'})"
    ci = "" if row.ci_low is None else f" [{row.ci_low:+.3f}, {row.ci_high:+.3f}]"
    return f"{row.diff:+.3f}{ci}"


def _change_line(change: Change) -> str:
    """Which run the changes are measured against and how, or why there are none."""
    if change.previous_run is None:
        return f"change since the previous run: {change.undefined.get('previous_run')}"
    if not change.rows:
        return f"change since {change.previous_run}: not compared ({change.undefined.get('rows')})"
    return (
        f"change since {change.previous_run}: {change.metric} at each label's best weight, "
        f"paired bootstrap over questions ({change.n_resamples} resamples, seed "
        f"{change.seed}); all metrics: ragtrail runs compare {change.previous_run} "
        f"{change.run}"
    )
