"""Report sections for sufficient context, Correct / Abstain / Hallucinate and selective generation.

Input is the summary a set's run stores (``runs/<run id>/sufficiency.json``, written by
:mod:`ragtrail.pipeline.sufficiency.step`; strict JSON, so the sections can be rebuilt from the artifact
alone). Every rate shows its 95% interval and n; undefined figures show "–" with the reason in the
note, never "nan".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ragtrail.report.html import ReportSection, render_section

OUTCOMES = ("correct", "abstain", "hallucinate")
DRILL_DOWN_LIMIT = 40


def _figure(agg: Mapping[str, Any] | None, digits: int = 2) -> str:
    value = (agg or {}).get("value")
    if value is None:
        return "–"
    low, high = (agg or {}).get("ci_low"), (agg or {}).get("ci_high")
    ci = f" [{low:.{digits}f}, {high:.{digits}f}]" if low is not None and high is not None else ""
    return f"{value:.{digits}f}{ci}"


def _table(title: str, columns: list[str], rows: list[list[Any]], note: str) -> ReportSection:
    html = render_section("table_section.html", columns=columns, rows=rows, note=note)
    return ReportSection(title=title, html=str(html))


def _calibration_text(calibration: Mapping[str, Any]) -> str:
    if calibration.get("value") is None:
        return calibration.get("reason") or calibration.get("status") or "not calibrated"
    figure = _figure(calibration)
    return f"{calibration.get('metric', '?')} {figure} (n={calibration.get('n', 0)})"


def _share(share: Mapping[str, Any] | None) -> str:
    """A share with its interval and the verdicts it is over (failed ones are counted apart)."""
    return f"{_figure(share)} (n={(share or {}).get('n', 0)})"


def raters_section(summary: Mapping[str, Any]) -> ReportSection:
    """One row per rater: its agreement with the golden references, whether it gates, and the
    share of contexts it called sufficient per rated setting."""
    settings = [s for s in summary["settings"] if s != "none"]
    primary = summary["primary_rater"]
    rows = []
    for rater in summary["raters"]:
        gate = rater.get("gate") or {}
        name = rater["name"] + (" (approximate)" if rater.get("approximate") else "")
        if rater["name"] == primary["name"]:
            name += " ★"
        per = rater.get("per_setting", {})
        rows.append(
            [
                name,
                _calibration_text(rater.get("calibration") or {}),
                gate.get("mode", "advise"),
                *(_share(per.get(s, {}).get("share")) for s in settings),
                sum(per.get(s, {}).get("failed", 0) for s in settings),
                sum(per.get(s, {}).get("truncated", 0) for s in settings),
            ]
        )
    note = (
        "Agreement (Cohen's kappa, 95% bootstrap interval) with golden references: answerable "
        "questions with their ground chunk are sufficient; unanswerable questions, and answerable "
        "ones given unrelated chunks, are not. ★ stratifies the C/A/H table: "
        f"{primary['reason']}. A rater that has not met its bar only advises."
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


def cah_section(summary: Mapping[str, Any]) -> ReportSection:
    """C/A/H rates per setting x sufficiency stratum x label, each with a Wilson interval."""
    cah = summary["cah"]
    rows = [
        [
            row["setting"],
            row["sufficiency"],
            row["label"],
            *(_figure(row.get(o)) for o in OUTCOMES),
            row.get("n_scored", 0),
            row.get("n_unscored", 0),
        ]
        for row in cah["table"]
        if row["label"] == "all" or row["sufficiency"] == "all"
    ]
    correctness = cah.get("correctness") or {}
    gate = correctness.get("gate") or {}
    unscored = cah.get("counts", {}).get("unscored", {})
    note = (
        f"Answers by {summary.get('answerer') or '?'} in each setting: retrieved = top "
        f"{summary.get('retrieval_k')} chunks at text weight {summary.get('text_weight')}; gold = "
        "the ground chunk; none = no retrieval. Correct = the normalised gold answer appears in "
        "the answer, else the correctness judge "
        f"{correctness.get('judge', '?')} decides ({gate.get('mode', 'advise')}: "
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


def coverage_plot(selective: Mapping[str, Any], path: Path) -> None:
    """Selective accuracy vs coverage for confidence alone and sufficiency + confidence."""
    fig = Figure(figsize=(5.6, 3.6), dpi=110)
    ax = fig.subplots()
    auc = selective.get("auc", {})
    styles = {
        "confidence": ("#999", "confidence alone"),
        "sufficiency_confidence": ("#1f6feb", "sufficiency + confidence"),
    }
    for key, (colour, title) in styles.items():
        points = selective.get("curves", {}).get(key) or []
        if not points:
            continue
        area = (auc.get(key) or {}).get("value")
        label = title + (f" (area {area:.2f})" if area is not None else "")
        ax.step(
            [p["coverage"] for p in points],
            [p["accuracy"] for p in points],
            where="post",
            color=colour,
            label=label,
            marker="o",
            markersize=3,
        )
    target = (selective.get("threshold") or {}).get("target_coverage")
    if target is not None:
        ax.axvline(target, color="#d29922", linestyle=":", linewidth=1)
    ax.set_xlim(0, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("coverage (share of questions answered)")
    ax.set_ylabel("selective accuracy")
    ax.legend(loc="lower left", frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def selective_sections(
    summary: Mapping[str, Any], out_dir: Path, suffix: str
) -> list[ReportSection]:
    """The policy's areas under the coverage curve, their difference with its CI, and the plot."""
    selective = summary.get("selective")
    if not selective:
        reason = summary.get("undefined", {}).get("selective", "not computed")
        return [_table("Selective generation", ["status"], [[reason]], "")]
    if not selective.get("curves"):
        return [
            _table(
                "Selective generation",
                ["status", "reason"],
                [[selective.get("status", "undefined"), selective.get("reason", "")]],
                "The policy needs held-out questions with both hallucinated and other answers.",
            )
        ]
    auc = selective.get("auc") or {}
    threshold = selective.get("threshold") or {}
    status = (
        "policy fitted"
        if selective.get("status") == "fitted"
        else f"no policy ({selective.get('reason', '')}); confidence alone is shown"
    )
    rows = [
        ["confidence alone", _figure(auc.get("confidence")), selective.get("confidence_source")],
        ["sufficiency + confidence", _figure(auc.get("sufficiency_confidence")), "policy"],
        ["difference", _figure(auc.get("gain")), f"n={(auc.get('gain') or {}).get('n', 0)}"],
    ]
    note = (
        f"{status}. Logistic regression on {', '.join(selective['features'])} predicting "
        "hallucination, "
        f"fitted on the answers to {selective['n_train']} questions and evaluated on those to "
        f"{selective['n_test']} other questions (seeded split; abstentions and unscored answers "
        f"are not rated, {selective.get('excluded', 0)} held-out answers lacked a feature). The difference's interval is a bootstrap over held-out "
        "questions."
    )
    if threshold:
        note += (
            f" At {threshold.get('target_coverage')} coverage the policy answers when its score "
            f"is at least {_figure(threshold, 3)}."
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


def drill_down_section(queries: Sequence[Mapping[str, Any]]) -> ReportSection:
    shown = sorted(queries, key=lambda q: (q["qid"], q["setting"]))[:DRILL_DOWN_LIMIT]
    html = render_section("sufficiency_drilldown.html", queries=shown, total=len(queries))
    return ReportSection(title="Sufficiency and answers: per-question drill-down", html=str(html))


def sufficiency_sections(
    summary: Mapping[str, Any], out_dir: Path, suffix: str = ""
) -> list[ReportSection]:
    """Every sufficiency section of one set (``suffix`` keeps plot files of sets apart)."""
    return [
        raters_section(summary),
        cah_section(summary),
        *selective_sections(summary, out_dir, suffix),
        drill_down_section(summary.get("queries", [])),
    ]
