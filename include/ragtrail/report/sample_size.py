"""The report's account of how many questions an LLM step evaluated and what that n can show."""

from __future__ import annotations

from ragtrail.report.html import ReportSection, render_section
from ragtrail.summaries.qa_sets import SampleSizing


def sample_size_sections(step: str, sizing: SampleSizing | None) -> list[ReportSection]:
    """One small table when the step sized its sample from ``target_mde`` (none otherwise: n was
    ``max_items``)."""
    if sizing is None:
        return []
    bound = "the target" if sizing.bound_by == "target" else sizing.bound_by.replace("_", " ")
    row = [
        sizing.n,
        f"{sizing.target_mde:g}",
        sizing.needed_n,
        bound,
        "unknown" if sizing.mde is None else f"{sizing.mde:.3f}",
        f"{sizing.sd:.3f} ({sizing.sd_source})",
    ]
    note = (
        "n is the smallest sample that detects a change of the target MDE in the step's primary "
        "metric with 80% power, unless a cap bound it: then the MDE at n is what this night can "
        "detect."
    )
    html = render_section(
        "table_section.html",
        columns=["n", "target MDE", "needed n", "bounded by", "MDE at n", "spread (source)"],
        rows=[row],
        note=note,
    )
    return [ReportSection(title=f"{step}: sample size", html=str(html))]
