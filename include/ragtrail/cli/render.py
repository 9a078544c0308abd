"""Rendering shared by several command groups: numbers and confidence intervals as text, and the
best-strategy table of retrieval evaluations (``eval retrieval`` and ``nightly``)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import console
from ragtrail.stats.intervals import method_label
from ragtrail.summaries.base import Figure
from ragtrail.summaries.retrieval_summary import BestRow, Change, ChangeRow


def num(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    """A number, or "undefined" for null (the reason is in the record's ``undefined``)."""
    return "undefined" if value is None else f"{value:{spec}}{suffix}"


def interval_text(
    low: float | None, high: float | None, method: str | None, spec: str = ".2f"
) -> str:
    """`` [low, high] method`` (the method's table name), or `` (no CI)`` when the interval is
    null: no interval is valid at that n, and a bare value must not read as certain."""
    if low is None or high is None:
        return " (no CI)" if method else ""
    label = method_label(method)
    return f" [{low:{spec}}, {high:{spec}}]" + (f" {label}" if label else "")


def value_ci(agg: Figure | None) -> str:
    """An aggregate as ``value [low, high] method`` (two decimals), or "undefined"."""
    if agg is None or agg.value is None:
        return "undefined"
    return f"{agg.value:.2f}{interval_text(agg.ci_low, agg.ci_high, agg.ci_method)}"


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
    ci = interval_text(row.ci_low, row.ci_high, row.ci_method, "+.3f")
    mde = "" if row.mde is None else f", MDE {row.mde:.3f}"
    return f"{row.diff:+.3f}{ci}{mde}"


def _change_line(change: Change) -> str:
    """Which run the changes are measured against and how, or why there are none."""
    if change.previous_run is None:
        return f"change since the previous run: {change.undefined.get('previous_run')}"
    if not change.rows:
        return f"change since {change.previous_run}: not compared ({change.undefined.get('rows')})"
    return (
        f"change since {change.previous_run}: {change.metric} at each label's best weight, "
        f"paired over questions (t interval below 20 pairs, BCa bootstrap with "
        f"{change.n_resamples} resamples and seed {change.seed} from 20; MDE: the smallest "
        f"change detectable with 80% power at that n); all metrics: ragtrail runs compare "
        f"{change.previous_run} {change.run}"
    )
