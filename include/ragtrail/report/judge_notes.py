"""The report's "judges" section: every judge of the run, its calibration and whether it gated.

Input is the ``judges`` mapping a run records (judge name -> its gate decision as a dict, see
:meth:`ragtrail.judges.gate.GateDecision.as_dict`), so the section can be rebuilt from stored
summaries alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragtrail.generate.judges import LABELLER
from ragtrail.records import GateMode
from ragtrail.report.html import ReportSection, render_section


def _figure(decision: Mapping[str, Any]) -> str:
    value = decision.get("value")
    if value is None:
        return "not calibrated" if not decision.get("n") else "undefined"
    low, high = decision.get("ci_low"), decision.get("ci_high")
    ci = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    return f"{decision.get('metric')} {value:.2f}{ci}"


def _bar(decision: Mapping[str, Any]) -> str:
    bar = decision.get("bar")
    return f"{bar['metric']} >= {bar['minimum']:.2f}" if bar else "–"


def label_source_note(judges: Mapping[str, Mapping[str, Any]]) -> str:
    """One sentence saying where the test set's labels come from, and why."""
    labeller = judges.get(LABELLER)
    if labeller is None:
        return "No labeller decision was recorded for this run."
    if labeller.get("mode") == GateMode.GATE:
        return (
            "Labels are the labeller's: its calibration met the bar "
            f"({_figure(labeller)}, n={labeller.get('n')}, bar {_bar(labeller)})."
        )
    return (
        "Labels are the requested ones, unverified: the labeller only advised because "
        f"{labeller.get('reason') or 'it has no calibration'}."
    )


def _mode(decision: Mapping[str, Any]) -> str:
    """ "gated" or "advised only"; with the reason when no calibration figure shows it."""
    if decision.get("mode") == GateMode.GATE:
        return "gated"
    if decision.get("value") is None:
        return f"advised only: {decision.get('reason') or 'no calibration'}"
    return "advised only"


def judges_section(judges: Mapping[str, Mapping[str, Any]]) -> ReportSection:
    """A table of the run's judges with their calibration (CI, n), bar and gate/advise mode."""
    rows = [
        [
            name,
            str(decision.get("judge", name)).rpartition("@")[2],
            _figure(decision),
            decision.get("n") or "–",
            _bar(decision),
            _mode(decision),
        ]
        for name, decision in judges.items()
    ]
    note = (
        f"{label_source_note(judges)} A judge rejects items only when its latest calibration for "
        "its exact version meets its bar (point estimate; the 95% CI is shown). Below the bar, or "
        "without a calibration, its verdicts are recorded on every item but reject nothing. "
        "Model-free checks (question mentions the passage, answer repeats the question, empty "
        "answer, question unrelated to its statement) always gate."
    )
    html = render_section(
        "table_section.html",
        columns=["judge", "version", "calibration", "n", "bar", "this run"],
        rows=rows,
        note=note,
    )
    return ReportSection(title="Judges", html=str(html))
