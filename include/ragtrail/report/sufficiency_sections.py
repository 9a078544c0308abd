"""Report sections for sufficient context, Correct / Abstain / Hallucinate and selective generation.

Input is the summary a set's run stores (``runs/<run id>/sufficiency.json``, written by
:mod:`ragtrail.pipeline.sufficiency.step`) and read back as a
:class:`~ragtrail.summaries.sufficiency_summary.SufficiencySummary`, so the sections can be rebuilt
from the artifact alone. Every rate shows its 95% interval and n; undefined figures show "–" with
the reason in the note, never "nan".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure as Plot

from ragtrail.report.html import ReportSection, figure_text, render_section
from ragtrail.report.sample_size import sample_size_sections
from ragtrail.summaries.base import Figure
from ragtrail.summaries.sufficiency_summary import (
    Agreement,
    CurvePointRow,
    QueryRow,
    RaterSetting,
    SelectiveView,
    SufficiencySummary,
)

DRILL_DOWN_LIMIT = 40


def _table(title: str, columns: list[str], rows: list[list[Any]], note: str) -> ReportSection:
    html = render_section("table_section.html", columns=columns, rows=rows, note=note)
    return ReportSection(title=title, html=str(html))


def _calibration_text(agreement: Agreement) -> str:
    if agreement.value is None:
        return agreement.reason or agreement.status or "not calibrated"
    return f"{agreement.metric or '?'} {figure_text(agreement)} (n={agreement.n or 0})"


def _share(setting: RaterSetting | None) -> str:
    """A share with its interval and the verdicts it is over (failed ones are counted apart)."""
    share = setting.share if setting is not None else None
    return f"{figure_text(share)} (n={share.n if share is not None else 0})"


def raters_section(summary: SufficiencySummary) -> ReportSection:
    """One row per rater: its agreement with the golden references, whether it gates, and the
    share of contexts it called sufficient per rated setting."""
    settings = [s for s in summary.settings if s != "none"]
    primary = summary.primary_rater
    rows = []
    for rater in summary.raters:
        agreement = rater.agreement
        name = rater.name + (" (approximate)" if rater.approximate else "")
        if rater.name == primary.name:
            name += " ★"
        per = [rater.per_setting.get(s) for s in settings]
        rows.append(
            [
                name,
                _calibration_text(agreement),
                agreement.mode or "advise",
                *(_share(p) for p in per),
                sum(p.failed for p in per if p is not None),
                sum(p.truncated for p in per if p is not None),
            ]
        )
    note = (
        "Agreement (Cohen's kappa, 95% BCa interval from 20 items) with golden references: answerable "
        "questions with their ground chunk are sufficient; unanswerable questions, and answerable "
        "ones given unrelated chunks, are not. ★ stratifies the C/A/H table: "
        f"{primary.reason}. A rater that has not met its bar only advises."
    )
    return _table(
        "Sufficient context: raters and their agreement",
        [
            "rater",
            "agreement",
            "mode",
            *(f"sufficient · {s}" for s in settings),
            "failed",
            "truncated",
        ],
        rows,
        note,
    )


def cah_section(summary: SufficiencySummary) -> ReportSection:
    """C/A/H rates per setting x sufficiency stratum x label, each with a Wilson interval."""
    cah = summary.cah
    rows = [
        [
            row.setting,
            row.sufficiency,
            row.label,
            *(figure_text(rate) for rate in (row.correct, row.abstain, row.hallucinate)),
            row.n_scored,
            row.n_unscored,
        ]
        for row in cah.table
        if row.label == "all" or row.sufficiency == "all"
    ]
    correctness = cah.correctness_agreement
    unscored = cah.counts.unscored
    note = (
        f"Answers by {summary.answerer or '?'} in each setting: retrieved = top "
        f"{summary.retrieval_k} chunks at text weight {summary.text_weight}; gold = "
        "the ground chunk; none = no retrieval. Correct = the normalised gold answer appears in "
        "the answer, else the correctness judge "
        f"{correctness.judge or '?'} decides ({correctness.mode or 'advise'}: "
        f"{_calibration_text(correctness)}). An unanswerable question answered is a "
        "hallucination. Rows: setting x context over all labels, then setting x label over "
        "both contexts (every crossing is in sufficiency.json). Not scored: "
        + ("; ".join(f"{reason} ({n})" for reason, n in unscored.items()) or "none")
        + "."
    )
    return _table(
        "Answers: Correct / Abstain / Hallucinate by context sufficiency",
        ["setting", "context", "label", "correct", "abstain", "hallucinate", "n", "unscored"],
        rows,
        note,
    )


def coverage_plot(selective: SelectiveView, path: Path) -> None:
    """Selective accuracy vs coverage for confidence alone and sufficiency + confidence."""
    fig = Plot(figsize=(5.6, 3.6), dpi=110)
    ax = fig.subplots()
    auc, curves = selective.auc, selective.curves
    drawn: list[tuple[list[CurvePointRow] | None, Figure | None, str, str]] = [
        (curves.confidence, auc.confidence, "#999", "confidence alone"),
        (
            curves.sufficiency_confidence,
            auc.sufficiency_confidence,
            "#1f6feb",
            "sufficiency + confidence",
        ),
    ]
    for points, area, colour, title in drawn:
        if not points:
            continue
        value = area.value if area is not None else None
        label = title + (f" (area {value:.2f})" if value is not None else "")
        ax.step(
            [p.coverage for p in points],
            [p.accuracy for p in points],
            where="post",
            color=colour,
            label=label,
            marker="o",
            markersize=3,
        )
    if selective.threshold is not None:
        ax.axvline(selective.threshold.target_coverage, color="#d29922", linestyle=":", linewidth=1)
    ax.set_xlim(0, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("coverage (share of questions answered)")
    ax.set_ylabel("selective accuracy")
    ax.legend(loc="lower left", frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def selective_sections(
    summary: SufficiencySummary, out_dir: Path, suffix: str
) -> list[ReportSection]:
    """The policy's areas under the coverage curve, their difference with its CI, and the plot."""
    selective = summary.selective
    if selective is None:
        reason = summary.reason("selective", "not computed")
        return [_table("Selective generation", ["status"], [[reason]], "")]
    if selective.curves.empty:
        return [
            _table(
                "Selective generation",
                ["status", "reason"],
                [[selective.status, selective.reason]],
                "The policy needs held-out questions with both hallucinated and other answers.",
            )
        ]
    auc = selective.auc
    threshold = selective.threshold
    status = (
        "policy fitted"
        if selective.status == "fitted"
        else f"no policy ({selective.reason}); confidence alone is shown"
    )
    rows = [
        ["confidence alone", figure_text(auc.confidence), selective.confidence_source],
        ["sufficiency + confidence", figure_text(auc.sufficiency_confidence), "policy"],
        ["difference", figure_text(auc.gain), f"n={auc.gain.n if auc.gain is not None else 0}"],
    ]
    note = (
        f"{status}. Logistic regression on {', '.join(selective.features)} predicting "
        "hallucination, "
        f"fitted on the answers to {selective.n_train} questions and evaluated on those to "
        f"{selective.n_test} other questions (seeded split; abstentions and unscored answers "
        f"are not rated, {selective.excluded} held-out answers lacked a feature). The difference's interval is a BCa bootstrap (from 20 questions) over held-out "
        "questions."
    )
    if threshold is not None:
        note += (
            f" At {threshold.target_coverage} coverage the policy answers when its score "
            f"is at least {threshold.value:.3f}."
        )
    table = _table(
        "Selective generation: area under the coverage curve",
        ["ranking", "area", "source"],
        rows,
        note,
    )
    file = f"selective_coverage{suffix}.png"
    coverage_plot(selective, out_dir / file)
    plot = ReportSection(
        title="Selective generation: accuracy vs coverage",
        html=str(
            render_section(
                "figure_section.html",
                src=file,
                alt="selective accuracy vs coverage",
                note="Read from the right: at coverage 1 every question is answered; moving left, "
                "the least confident answers are withheld first. A curve that rises to the left "
                "buys accuracy by abstaining; the higher curve ranks answers better.",
            )
        ),
    )
    return [table, plot]


def drill_down_section(queries: Sequence[QueryRow]) -> ReportSection:
    shown = sorted(queries, key=lambda q: (q.qid, q.setting))[:DRILL_DOWN_LIMIT]
    html = render_section("sufficiency_drilldown.html", queries=shown, total=len(queries))
    return ReportSection(title="Sufficiency and answers: per-question drill-down", html=str(html))


def sufficiency_sections(
    summary: SufficiencySummary, out_dir: Path, suffix: str = ""
) -> list[ReportSection]:
    """Every sufficiency section of one set (``suffix`` keeps plot files of sets apart)."""
    return [
        *sample_size_sections("Sufficiency", summary.sample_size),
        raters_section(summary),
        cah_section(summary),
        *selective_sections(summary, out_dir, suffix),
        drill_down_section(summary.queries),
    ]
