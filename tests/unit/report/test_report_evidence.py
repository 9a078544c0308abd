"""The evidence report sections render a stored summary: the models and judges with their gate
and agreement, every figure with its interval and n, undefined ones with their reason, and the
extractor's robustness to noise."""

from __future__ import annotations

import re
from pathlib import Path

from ragtrail.report.evidence_sections import evidence_sections, robustness_line
from ragtrail.report.html import ReportSection
from ragtrail.summaries.evidence_summary import EvidenceSummary
from tests.unit._evidence_docs import evidence_summary


def _html(sections: list[ReportSection]) -> str:
    return "\n".join(s.title + s.html for s in sections)


def test_models_and_judges_are_named_with_their_gate(tmp_path: Path) -> None:
    html = _html(evidence_sections(evidence_summary(), tmp_path, ".golden"))
    assert "registry:extractor@3" in html and "registered champion" in html
    assert "hf:Qwen/Qwen2.5-0.5B-Instruct" in html
    for model in ("hf:answerer-small", "hf:scorer-lm", "hf:generator"):
        assert model in html
    assert "nli:deberta@1" in html and "gates; agreement kappa 0.72 [0.55, 0.86] (n=40)" in html
    assert "llm:judge@2" in html and "advises only; agreement not measured: too few" in html
    assert not list(tmp_path.iterdir())  # no plot files


def test_method_by_noise_table_shows_intervals_n_and_reasons(tmp_path: Path) -> None:
    html = _html(evidence_sections(evidence_summary(), tmp_path))
    # extractor at noise 0: compression, faithfulness, correct, paired differences
    assert "9.25 [4.00, 20.00] n=4" in html
    assert "0.90 [0.50, 1.00] n=4" in html
    assert "0.75 [0.30, 0.95] n=4" in html
    assert "0.25 [-0.25, 0.50] n=4" in html and "0.50 [0.00, 1.00] n=4" in html
    # an undefined figure says why; a figure a method has no data for says so
    assert "– (the scorer failed)" in html
    assert "– (not computed)" in html
    assert not re.search(r"\bnan\b", html, re.I)
    for method in ("extractor", "base", "extractive", "full", "none"):
        assert f"<td>{method}</td>" in html


def test_robustness_line_reads_each_noise_level() -> None:
    line = robustness_line(evidence_summary())
    assert "noise 0: correct 0.75 [0.30, 0.95] n=4" in line
    assert "noise 1: correct 0.50 [0.30, 0.95] n=4, silver faithfulness 0.55" in line


def test_without_a_base_model_the_reason_is_shown(tmp_path: Path) -> None:
    data = evidence_summary().to_json()
    data["base"] = None
    data["undefined"] = {"base": "the extractor in service is the configured <extractor> role"}
    data["aggregates"] = [a for a in data["aggregates"] if a["facets"]["method"] != "base"]
    summary = EvidenceSummary.from_json(data)
    html = _html(evidence_sections(summary, tmp_path))
    assert "– (the extractor in service is the configured &lt;extractor&gt; role)" in html
    assert "<td>base</td>" not in html
