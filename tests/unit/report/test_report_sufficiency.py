"""The sufficiency report sections render a stored summary: every rate with its interval and n,
undefined figures as "–" with their reason, the coverage plot only when a curve exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ragtrail.report.sufficiency_sections import sufficiency_sections
from ragtrail.summaries.sufficiency_summary import SufficiencySummary
from tests.unit._sufficiency_docs import (
    fitted_selective,
    sufficiency_document,
    undefined_selective,
)


def _summary(selective: dict[str, Any] | None) -> SufficiencySummary:
    return SufficiencySummary.from_json(sufficiency_document(selective))


def _html(sections) -> str:
    return "\n".join(s.title + s.html for s in sections)


def test_rater_and_cah_tables_show_intervals_and_reasons(tmp_path: Path) -> None:
    html = _html(sufficiency_sections(_summary(None), tmp_path))
    assert "sufficiency.contains_answer ★" in html
    assert "kappa 0.50 [0.10, 0.90] (n=6)" in html
    assert "0.25 [0.05, 0.70] (n=4)" in html and "0.50 [0.15, 0.85] (n=3)" in html
    assert "too few references" in html
    assert "0.50 [0.09, 0.91]" in html
    assert "answer failed (1)" in html
    assert not re.search(r"\bnan\b", html, re.I)
    assert "selective generation was not requested" in html
    # corpus and model text is escaped in the drill-down
    assert "How &lt;many&gt;?" in html and "p &lt;b&gt;1&lt;/b&gt;" in html


def test_coverage_plot_is_drawn_for_a_fitted_policy(tmp_path: Path) -> None:
    html = _html(sufficiency_sections(_summary(fitted_selective()), tmp_path, ".golden"))
    assert (tmp_path / "selective_coverage.golden.png").stat().st_size > 0
    assert "0.15 [-0.10, 0.30]" in html and "n=3" in html
    assert "0.420" in html


def test_an_undefined_policy_says_why(tmp_path: Path) -> None:
    selective = undefined_selective("the training answers hold one class")
    html = _html(sufficiency_sections(_summary(selective), tmp_path))
    assert "the training answers hold one class" in html
    assert not list(tmp_path.glob("*.png"))
