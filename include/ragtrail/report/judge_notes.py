"""The report's "judges" section: every judge of the run, its calibration and whether it gated.

Input is the ``judges`` mapping a run records (judge name -> its
:class:`~ragtrail.summaries.generation_summary.JudgeGate`, the stored form of
:class:`ragtrail.judges.gate.GateDecision`), so the section can be rebuilt from stored summaries
alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from ragtrail.generate.judges import LABELLER
from ragtrail.records import GateMode
from ragtrail.report.html import ReportSection, render_section
from ragtrail.summaries.judge_summary import JudgeGate


def _figure(decision: JudgeGate) -> str:
    value = decision.value
    if value is None:
        return "not calibrated" if not decision.n else "undefined"
    low, high = decision.ci_low, decision.ci_high
    ci = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    return f"{decision.metric} {value:.2f}{ci}"


def _bar(decision: JudgeGate) -> str:
    bar = decision.bar
    return f"{bar.metric} >= {bar.minimum:.2f}" if bar else "–"


def label_source_note(judges: Mapping[str, JudgeGate]) -> str:
    """One sentence saying where the test set's labels come from, and why (the labeller is the
    LLM ``labeller`` or a trained one, ``labeller.trained``)."""
    name, labeller = next(
        ((n, d) for n, d in judges.items() if n.partition(".")[0] == LABELLER), ("", None)
    )
    if labeller is None:
        return "No labeller decision was recorded for this run."
    if labeller.mode == GateMode.GATE:
        return (
            f"Labels are the labeller's ({name}): its calibration met the bar "
            f"({_figure(labeller)}, n={labeller.n}, bar {_bar(labeller)})."
        )
    return (
        f"Labels are the requested ones, unverified: the labeller ({name}) only advised because "
        f"{labeller.reason or 'it has no calibration'}."
    )


def _mode(decision: JudgeGate) -> str:
    """ "gated" or "advised only"; with the reason when no calibration figure shows it."""
    if decision.mode == GateMode.GATE:
        return "gated"
    if decision.value is None:
        return f"advised only: {decision.reason or 'no calibration'}"
    return "advised only"


def judges_section(judges: Mapping[str, JudgeGate]) -> ReportSection:
    """A table of the run's judges with their calibration (CI, n), bar and gate/advise mode."""
    rows = [
        [
            name,
            decision.judge.rpartition("@")[2],
            _figure(decision),
            decision.n or "–",
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
