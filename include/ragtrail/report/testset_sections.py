"""Report sections for a test-set generation run.

Input is the :class:`~ragtrail.summaries.generation_summary.GenerationSummary` written by
:mod:`ragtrail.pipeline.generate` (stored as ``generation.json``, so a report can be rebuilt from the
artifact alone). Output is a list of :class:`ReportSection` that
:func:`ragtrail.report.html.render_retrieval_report` appends to the evaluation report, plus a bar
chart of the label distribution (ours vs the single-prompt baseline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ragtrail.generate.prompts import CRITIQUE_NAMES
from ragtrail.records import LABELS
from ragtrail.redact import redact
from ragtrail.report.html import ReportSection, render_section
from ragtrail.report.judge_notes import judges_section
from ragtrail.summaries.generation_summary import GenerationSummary

LABEL_CHART = "label_distribution.png"


def _pct(n: int, total: int) -> str:
    return f"{n} ({100 * n / total:.0f}%)" if total else str(n)


def _table(title: str, columns: list[str], rows: list[list[Any]], note: str = "") -> ReportSection:
    html = render_section("table_section.html", columns=columns, rows=rows, note=note)
    return ReportSection(title=title, html=str(html))


def funnel_section(summary: GenerationSummary) -> ReportSection:
    funnel = summary.funnel
    first = funnel[0].count if funnel else 0
    rows = [
        [step.stage, step.count, f"{100 * step.count / first:.0f}%" if first else "–"]
        for step in funnel
    ]
    return _table(
        "Test set: acceptance funnel",
        ["stage", "items", "of candidates"],
        rows,
        note="When the labeller gates, only items whose observed label matches the requested "
        "label count toward quotas; when it only advises, every item keeps its requested label.",
    )


def balance_section(summary: GenerationSummary) -> ReportSection:
    ours, base = summary.distribution.ours, summary.distribution.baseline
    n_ours, n_base = sum(ours.values()), sum(base.values())
    targets, achieved = summary.targets, summary.achieved
    rows = [
        [
            label,
            targets.get(label, 0),
            achieved.get(label, 0),
            _pct(ours.get(label, 0), n_ours),
            _pct(base.get(label, 0), n_base),
        ]
        for label in LABELS
    ]
    note = (
        f"Baseline: one prompt asking for a factoid question and answer per context, labelled by "
        f"the same labeller ({n_base} labelled items). Ours: statement extraction, accepted items "
        f"of version {summary.version}."
    )
    return _table(
        "Test set: label balance, ours vs single-prompt baseline",
        ["label", "target", "achieved", "ours", "baseline"],
        rows,
        note=note,
    )


def label_matrix_section(summary: GenerationSummary) -> ReportSection:
    matrix = summary.label_matrix
    observed = [*LABELS, "failed"]
    rows = [
        [requested, *[matrix.get(requested, {}).get(obs, 0) for obs in observed]]
        for requested in LABELS
        if requested in matrix
    ]
    return _table(
        "Test set: requested vs observed label",
        ["requested \\ observed", *observed],
        rows,
        note="Contexts differ in what they support; a mismatch is rejected (not relabelled) when "
        "the labeller gates, and only recorded when it advises.",
    )


def critique_section(summary: GenerationSummary) -> ReportSection:
    per_label = summary.critiques
    rows = []
    for label in LABELS:
        scores = per_label.get(label)
        if not scores:
            continue
        cells = []
        for criterion in CRITIQUE_NAMES:
            cell = scores.get(criterion)
            cells.append("–" if not cell or not cell.n else f"{cell.mean:.2f} ({cell.hist})")
        rows.append([label, *cells])
    return _table(
        "Test set: critique ratings per label (mean, histogram of 1..5)",
        ["label", *CRITIQUE_NAMES],
        rows,
        note="Ratings of every labelled candidate, accepted or not (reasoning and summary "
        "questions legitimately score lower on q_to_c_groundedness).",
    )


def llm_models_line(backends: dict[str, str]) -> str:
    """The LLMs of a run's ``backends`` in one line: ``"spec"`` when every role shares one model,
    else ``"spec_a (generator, critic); spec_b (labeller)"``; redacted, runs stored before
    ragtrail redacted specs included."""
    if "llm" in backends:
        return redact(backends["llm"])
    return "; ".join(
        f"{redact(spec)} {name.removeprefix('llm ')}"
        for name, spec in backends.items()
        if name.startswith("llm (")
    )


def usage_section(summary: GenerationSummary) -> ReportSection:
    rows = [
        [
            u.stage,
            u.calls,
            u.cache_hits,
            u.failures,
            u.prompt_tokens,
            u.completion_tokens,
            "–" if u.cost_usd is None else f"${u.cost_usd:.4f}",
        ]
        for u in summary.usage
    ]
    model = llm_models_line(summary.backends)
    return _table(
        "Test set: model calls, tokens and cost per stage",
        [
            "stage",
            "model calls",
            "cache hits",
            "failures",
            "prompt tokens",
            "completion tokens",
            "cost",
        ],
        rows,
        note=f"LLM: {model}. Cost is shown when a price per 1k tokens is configured.",
    )


def failures_section(summary: GenerationSummary) -> ReportSection:
    rows = [
        [f.cause, f.count, " | ".join(ex[:160] for ex in f.examples[:2]) or "–"]
        for f in summary.failures
    ]
    return _table(
        "Test set: failures and rejections by cause (with examples)",
        ["cause", "items", "examples (raw output or reason, truncated)"],
        rows,
    )


def plot_label_distribution(summary: GenerationSummary, out_dir: Path) -> Path:
    """Grouped bars of label shares: ours vs the single-prompt baseline."""
    ours, base = summary.distribution.ours, summary.distribution.baseline
    n_ours, n_base = sum(ours.values()) or 1, sum(base.values()) or 1
    fig = Figure(figsize=(7, 3.5))
    ax = fig.subplots()
    xs = range(len(LABELS))
    ax.bar([x - 0.2 for x in xs], [ours.get(lb, 0) / n_ours for lb in LABELS], 0.4, label="ours")
    ax.bar(
        [x + 0.2 for x in xs],
        [base.get(lb, 0) / n_base for lb in LABELS],
        0.4,
        label="single-prompt baseline",
    )
    ax.set_xticks(list(xs), list(LABELS))
    ax.set_ylabel("share of labelled items")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("Label distribution")
    fig.tight_layout()
    path = out_dir / LABEL_CHART
    fig.savefig(path, dpi=100)
    return path


def testset_sections(summary: GenerationSummary, out_dir: Path) -> list[ReportSection]:
    """All generation sections, in reading order; writes the label chart into ``out_dir``."""
    plot_label_distribution(summary, out_dir)
    chart = ReportSection(
        title="Test set: label distribution chart",
        html=f'<img src="{LABEL_CHART}" alt="label distribution, ours vs baseline">',
    )
    return [
        judges_section(summary.judges),
        funnel_section(summary),
        balance_section(summary),
        chart,
        label_matrix_section(summary),
        critique_section(summary),
        usage_section(summary),
        failures_section(summary),
    ]
