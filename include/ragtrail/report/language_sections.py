"""The retrieval facet per question language: one row per language with its n and interval."""

from __future__ import annotations

from ragtrail.report.html import ReportSection, figure_text, metric_title, render_section
from ragtrail.summaries.retrieval_summary import RetrievalSummary

COLUMNS = ["language", "questions", "value [95% CI]", "text weight"]


def language_section(summary: RetrievalSummary) -> ReportSection | None:
    """None when the run has no facet (stored before languages were faceted, or no questions)."""
    if not summary.languages:
        return None
    rows = [
        [row.facet, row.n_questions, figure_text(row), f"{row.text_weight:g}"]
        for row in summary.languages
    ]
    metric = metric_title(summary.languages[0].metric)
    note = (
        f"{metric} at the set's best inclusive text weight, per question language (that of its "
        "ground documents, else the one detected in the question). A language with few "
        "questions has a wide interval."
    )
    html = render_section("table_section.html", columns=COLUMNS, rows=rows, note=note)
    return ReportSection(title=f"{metric} per language", html=str(html))
