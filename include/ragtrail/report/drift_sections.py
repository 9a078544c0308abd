"""Report sections for a set's drift decision: the verdict, its evidence table and a history plot.

Input is the set's :class:`~ragtrail.summaries.drift_summary.DriftView`: the stored decision with
its evidence and, per watched series (``evaluation:metric [facets]``), the metric's history on the
set's QA-set version: one point per run, oldest first, with its interval. Undefined figures show
"–" (the reason is in the evidence), never "nan".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from ragtrail.report.html import ReportSection, render_section
from ragtrail.stats.intervals import method_label
from ragtrail.summaries.drift_summary import (
    DriftDecision,
    DriftEvidence,
    DriftView,
    HistoryPoint,
)

EVIDENCE_COLUMNS = [
    "metric",
    "facets",
    "baseline",
    "current",
    "difference [95% CI]",
    "p",
    "Holm p",
    "threshold",
    "detectable drop (MDE)",
    "direction",
    "drift",
]


def _num(value: float | None, spec: str = ".3f") -> str:
    return "–" if value is None else f"{value:{spec}}"


def verdict(decision: DriftDecision) -> str:
    """One sentence: fired or not, against which baseline and why that one."""
    if decision.baseline_run_id is None:
        return "No baseline yet for this corpus and QA-set version: nothing to compare with."
    evidence = decision.evidence
    head = "DRIFT: retraining is asked for." if decision.fired else "No drift."
    text = (
        f"{head} Run {decision.run_id} against {decision.baseline_run_id} "
        f"({decision.baseline_kind} baseline); {evidence.n_tested} cells tested, "
        f"{len(evidence.drifted)} drifted."
    )
    used = evidence.baseline
    if used is not None and used.qa_set_version is not None:
        text += (
            f" The baseline ran on the predecessor version {used.qa_set_version}: compared on "
            f"the {'–' if used.paired is None else used.paired} items both versions hold."
        )
    if evidence.undefined.get("rows"):
        text += f" Not compared: {evidence.undefined['rows']}"
    return text


def changes_text(evidence: DriftEvidence) -> str:
    """Corpus changes since the baseline's snapshot and retired items of the QA set."""
    drift = evidence.corpus_drift
    if drift is None:
        corpus = f"Corpus drift: undefined ({evidence.reason('corpus_drift', 'no baseline')})."
    else:
        corpus = (
            f"Corpus since the baseline snapshot {drift.baseline_snapshot}: "
            f"{drift.added} added, {drift.updated} updated, {drift.removed} removed of "
            f"{drift.n_baseline} documents (changed share {_num(drift.changed_share, '.1%')})."
        )
    qa = evidence.qa_set
    if qa.retired is None:
        retired = f"Retired QA items: unknown ({qa.undefined.get('retired', '')})."
    else:
        retired = f"Retired QA items: {qa.n_retired} of {qa.n_items} {qa.reasons or {}}."
    return f"{corpus} {retired} Only metric drops fire a decision."


def evidence_rows(evidence: DriftEvidence) -> list[list[str]]:
    """The evidence table: drifted rows first, then worse, then the rest, as evaluated."""
    order = {"worse": 1, "unchanged": 2, "better": 3, None: 4}
    rows = sorted(evidence.rows, key=lambda r: (not r.drifted, order[r.direction]))
    out = []
    for r in rows:
        ci = "" if r.ci_low is None else f" [{r.ci_low:+.3f}, {r.ci_high:+.3f}]"
        if r.ci_low is not None and r.ci_method:
            ci += f" {method_label(r.ci_method)}"
        out.append(
            [
                f"{r.evaluation}:{r.metric}" + ("" if r.greater_is_better else " (↓)"),
                r.facets_text or "–",
                _num(r.baseline),
                _num(r.current),
                _num(r.diff, "+.3f") + ci + f" (n={r.n})",
                _num(r.p_value, ".4f"),
                _num(r.p_holm, ".4f") if r.tested else "untested",
                f"{r.threshold:.3f}",
                "" if r.drifted else r.detect_text,
                r.direction or "–",
                "yes" if r.drifted else "",
            ]
        )
    return out


def history_plot(
    history: Mapping[str, Sequence[HistoryPoint]], baseline_run: str | None, path: Path
) -> None:
    """One panel per watched series: the value per run with its interval, baseline starred."""
    series = list(history.items())
    fig = Figure(figsize=(6.4, 1.0 + 2.0 * len(series)), dpi=110)
    axes = fig.subplots(len(series), 1, squeeze=False)[:, 0]
    for ax, (name, points) in zip(axes, series, strict=True):
        xs = list(range(len(points)))
        values = [p.value for p in points]
        lows = [p.value - (p.ci_low if p.ci_low is not None else p.value) for p in points]
        highs = [(p.ci_high if p.ci_high is not None else p.value) - p.value for p in points]
        ax.errorbar(xs, values, yerr=[lows, highs], marker="o", capsize=3, color="#1f6feb")
        for i, p in enumerate(points):
            if p.run_id == baseline_run:
                ax.plot(
                    [i],
                    [p.value],
                    marker="*",
                    markersize=14,
                    color="#d97706",
                    linestyle="none",
                    label="baseline",
                )
                ax.legend(loc="best", frameon=False, fontsize=8)
        # Every point is a run of the same set (<night>.<set>): the night tells them apart.
        ticks = [p.run_id.rsplit(".", 1)[0][-24:] for p in points]
        ax.set_xticks(range(len(points)), ticks, rotation=20, fontsize=7)
        ax.set_title(name, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)


def drift_sections(view: DriftView, out: Path, suffix: str = "") -> list[ReportSection]:
    """The drift verdict with its evidence table, then the history plot (when there is one)."""
    decision, evidence = view.decision, view.decision.evidence
    note = (
        f"{verdict(decision)} {changes_text(evidence)} Drift = the primary metric worse by more "
        f"than its threshold with Holm p < {evidence.policy.alpha} (Holm across every "
        "tested cell of the decision; cells with fewer paired questions than "
        f"{evidence.policy.min_n} are untested). A cell that did not drift says the smallest "
        "drop it could have detected (80% power at its n, from the spread of its paired "
        "differences): a smaller drop may be there unseen. ↓: lower is better. "
        f"Decision {decision.decision_id}."
    )
    table = render_section(
        "table_section.html", columns=EVIDENCE_COLUMNS, rows=evidence_rows(evidence), note=note
    )
    sections = [ReportSection(title="Drift against the baseline", html=str(table))]
    if any(view.history.values()):
        file = f"drift_history{suffix}.png"
        history_plot(view.history, decision.baseline_run_id, out / file)
        figure = render_section(
            "figure_section.html",
            src=file,
            alt="primary metrics over the runs of this QA-set version",
            note="The primary metrics over the runs of this QA-set version (95% intervals); the "
            "star marks the baseline run.",
        )
        sections.append(ReportSection(title="Drift: primary metrics over time", html=str(figure)))
    return sections
