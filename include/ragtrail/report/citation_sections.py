"""Report sections for citation quality: model vs random on relevance mixtures, precision vs
recall per query, the attributed-answer scenarios, and a per-query drill-down.

Input is the citation summary a set's run stores (``runs/<run id>/citations.json``, written by
:mod:`ragtrail.pipeline.citations.step`; strict JSON, so the sections can be rebuilt from the artifact
alone). Every figure shows its 95% interval (its method named: Wilson, t or BCa) and n; undefined figures show "–" with the
reason in the note, never "nan".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure as Plot

from ragtrail.evaluate.citations.evaluator import ANSWERABLE as ALL_ANSWERABLE
from ragtrail.records import LABELS
from ragtrail.report.html import ReportSection, figure_text, render_section
from ragtrail.report.sample_size import sample_size_sections
from ragtrail.summaries.base import Figure
from ragtrail.summaries.citation_summary import (
    CitationSummary,
    MixtureAggregate,
    MixtureAnswer,
    MixtureView,
    ScenarioSummary,
)

MODEL, RANDOM = "model", "random"
F1, PRECISION, RECALL = "citation_f1", "citation_precision", "citation_recall"
DRILL_DOWN_LIMIT = 40
"""Answers shown in the drill-down (the first ones by question id and mixture type)."""


def _value(figure: Figure | None, digits: int = 2) -> str:
    """The point estimate alone (for secondary columns, to keep the table readable)."""
    value = figure.value if figure else None
    return "–" if value is None else f"{value:.{digits}f}"


def _defined(figure: Figure | None) -> bool:
    return figure is not None and figure.value is not None


def _n(figure: Figure | None) -> int:
    return (figure.n or 0) if figure else 0


def _by_group(aggregates: Iterable[MixtureAggregate]) -> dict[tuple[str, str, str, str], Figure]:
    """(system, mixture type, label, metric) -> the aggregate's figure."""
    return {(a.system, a.mixture, a.label, a.metric): a.figure for a in aggregates}


def _label_order(labels: Iterable[str]) -> list[str]:
    present = set(labels)
    return [lb for lb in (*LABELS, ALL_ANSWERABLE) if lb in present]


def _table(title: str, columns: list[str], rows: list[list[Any]], note: str) -> ReportSection:
    html = render_section("table_section.html", columns=columns, rows=rows, note=note)
    return ReportSection(title=title, html=str(html))


def mixture_table_section(mixture: MixtureView, answerer: str) -> ReportSection:
    """Model vs random F1 (and the model's precision, recall, invalid rate, length) per mixture
    type and label, each with its CI and n."""
    aggs = mixture.aggregates
    by = _by_group(aggs)
    rows = []
    for mix in mixture.types:
        labels = _label_order(a.label for a in aggs if a.mixture == mix)
        for label in labels:
            model_f1 = by.get((MODEL, mix, label, F1))
            rows.append(
                [
                    mix,
                    label,
                    figure_text(model_f1),
                    figure_text(by.get((RANDOM, mix, label, F1))),
                    figure_text(by.get((MODEL, mix, label, PRECISION))),
                    figure_text(by.get((MODEL, mix, label, RECALL))),
                    _value(by.get((MODEL, mix, label, "invalid_citation_rate"))),
                    _value(by.get((MODEL, mix, label, "answer_words")), 1),
                    _n(model_f1),
                ]
            )
    note = (
        f"Answering model {answerer}; mixture {mixture.spec} (relevant min-max / irrelevant / "
        f"seemingly relevant), seed {mixture.seed}. Random: 1-3 passages cited uniformly at "
        f"random on the same mixtures, {mixture.baseline_repeats} draws each. Macro averages "
        "over questions with 95% intervals (Wilson, t or BCa by kind and n); n = questions with a defined F1. "
        f"{mixture.failed} answer(s) failed after retries and are left out (listed "
        "in the drill-down). Precision is undefined for an answer that cites nothing (shown –)."
    )
    skipped = mixture.skipped
    if skipped:
        reasons = sorted({s.reason for s in skipped})
        note += f" {len(skipped)} question(s) skipped: {'; '.join(reasons[:3])}."
    return _table(
        "Citations: model vs random per mixture type and label",
        [
            "mixture",
            "label",
            "model F1",
            "random F1",
            "model precision",
            "model recall",
            "invalid citations",
            "words",
            "n",
        ],
        rows,
        note,
    )


def unanswerable_section(mixture: MixtureView) -> ReportSection | None:
    """Questions without relevant passages: did the model cite anything, did it abstain."""
    rows = [
        [
            row.mixture,
            row.system,
            figure_text(row.cited_any.figure),
            figure_text(row.abstained.figure if row.abstained else None),
            row.cited_any.n,
        ]
        for row in mixture.unanswerable
        if row.cited_any and row.cited_any.n
    ]
    if not rows:
        return None
    return _table(
        "Citations: questions the passages cannot answer",
        ["mixture", "system", "cited something", "abstained", "n"],
        rows,
        "No passage is relevant, so citation recall does not exist for these questions; the "
        "share that cited anything (lower is better) and that abstained (higher is better) are "
        "reported instead.",
    )


def f1_plot(mixture: MixtureView, path: Path) -> None:
    """Grouped bars: model vs random F1 over all answerable labels, per mixture type, with CIs."""
    by = _by_group(mixture.aggregates)
    types = list(mixture.types)
    fig = Plot(figsize=(6.4, 3.2), dpi=110)
    ax = fig.subplots()
    width = 0.38
    for offset, system, colour in ((-width / 2, MODEL, "#1f6feb"), (width / 2, RANDOM, "#999")):
        values, lows, highs = [], [], []
        for mix in types:
            agg = by.get((system, mix, ALL_ANSWERABLE, F1))
            value = agg.value if agg else None
            values.append(value if value is not None else 0.0)
            low, high = (agg.ci_low, agg.ci_high) if agg else (None, None)
            lows.append(value - low if value is not None and low is not None else 0.0)
            highs.append(high - value if value is not None and high is not None else 0.0)
        xs = [i + offset for i in range(len(types))]
        ax.bar(xs, values, width, yerr=[lows, highs], capsize=3, color=colour, label=system)
    ax.set_xticks(range(len(types)), types)
    ax.set_ylim(0, 1)
    ax.set_ylabel("citation F1")
    ax.legend(loc="upper right", frameon=False)
    fig.tight_layout()
    fig.savefig(path)


def precision_recall_plot(
    queries: Sequence[MixtureAnswer], types: Sequence[str], path: Path
) -> None:
    """One point per answered (answerable) query: the model's citation precision vs recall."""
    fig = Plot(figsize=(4.8, 4.0), dpi=110)
    ax = fig.subplots()
    markers = ("o", "s", "^", "D")
    for i, mix in enumerate(types):
        points = [
            (q.precision, q.recall)
            for q in queries
            if q.mixture == mix and q.precision is not None and q.recall is not None
        ]
        if points:
            ax.scatter(
                [p[1] for p in points],
                [p[0] for p in points],
                marker=markers[i % len(markers)],
                alpha=0.6,
                label=f"{mix} (n={len(points)})",
            )
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("citation recall")
    ax.set_ylabel("citation precision")
    ax.legend(loc="lower left", frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def _plot_section(title: str, file: str, note: str) -> ReportSection:
    html = render_section("figure_section.html", src=file, alt=title, note=note)
    return ReportSection(title=title, html=str(html))


ATTRIBUTION_COLUMNS = (
    ("AutoAIS cit", "autoais_cit"),
    ("AutoAIS pssg", "autoais_pssg"),
    ("NLI recall", "alce_citation_recall"),
    ("NLI precision", "alce_citation_precision"),
    ("cit. precision", PRECISION),
    ("cit. recall", RECALL),
    ("ROUGE-L F", "rouge_l_f1"),
    ("BLEU", "bleu"),
)
RETRIEVAL_COLUMNS = (
    ("P@1", "P@1"),
    ("R@1", "recall@1"),
    ("P@10", "P@10"),
    ("R@10", "recall@10"),
    ("nDCG@10", "ndcg@10"),
)


def _skipped_note(skipped: Mapping[str, str]) -> str:
    """Skipped metrics grouped by reason (one reason usually covers several metrics)."""
    by_reason: dict[str, list[str]] = {}
    for metric, reason in skipped.items():
        by_reason.setdefault(reason, []).append(metric)
    return "; ".join(f"{reason} ({', '.join(ms)})" for reason, ms in by_reason.items()) or "none"


def scenario_section(scenarios: ScenarioSummary) -> ReportSection:
    """One row per scenario: attribution metrics, the judge named with its calibration."""
    by = {(a.scenario, a.metric): a.figure for a in scenarios.aggregates}
    shown = [
        (title, metric)
        for title, metric in ATTRIBUTION_COLUMNS
        if any(_defined(by.get((name, metric))) for name in scenarios.names)
    ]
    rows = []
    for name in scenarios.names:
        n = max((a.n for a in scenarios.aggregates if a.scenario == name), default=0)
        rows.append([name, *(figure_text(by.get((name, metric))) for _, metric in shown), n])
    judge = scenarios.judge
    note = (
        f"{scenarios.items} question(s) per scenario. Entailment by "
        f"{judge.judge}: {judge.mode} "
        f"({judge.reason or 'calibrated'}). Citation precision/recall against the QA "
        "set's ground passages. Not computed: "
        f"{_skipped_note(scenarios.skipped)}."
    )
    return _table(
        "Attributed answers: scenarios", ["scenario", *(t for t, _ in shown), "n"], rows, note
    )


def scenario_retrieval_section(scenarios: ScenarioSummary) -> ReportSection:
    """The retrieval metrics of each scenario's passage list (G retrieves nothing)."""
    by = {(row.scenario, row.metric): row.figure for row in scenarios.retrieval}
    rows = [
        [
            name,
            *(figure_text(by.get((name, metric))) for _, metric in RETRIEVAL_COLUMNS),
            _n(by.get((name, "P@1"))),
        ]
        for name in scenarios.names
        if any((name, metric) in by for _, metric in RETRIEVAL_COLUMNS)
    ]
    return _table(
        "Attributed answers: retrieval of the scenarios' passages",
        ["scenario", *(t for t, _ in RETRIEVAL_COLUMNS), "n"],
        rows,
        "The passages each scenario gave the model, in the order it saw them, against the ground "
        "passages; questions without relevant passages are left out.",
    )


def drill_down_section(queries: Sequence[MixtureAnswer]) -> ReportSection:
    """Per answer: the question, the numbered passages with their kind, the answer, cited vs
    relevant passage numbers (failed answers show their error and raw text)."""
    shown = sorted(queries, key=lambda q: (q.qid, q.mixture))[:DRILL_DOWN_LIMIT]
    html = render_section("citation_drilldown.html", queries=shown, total=len(queries))
    return ReportSection(title="Citations: per-query drill-down", html=str(html))


def citation_sections(
    summary: CitationSummary, out_dir: Path, suffix: str = ""
) -> list[ReportSection]:
    """Every citation section of one set (``suffix`` keeps plot files of several sets apart)."""
    sections: list[ReportSection] = sample_size_sections("Citations", summary.sample_size)
    mixture = summary.mixture
    sections.append(mixture_table_section(mixture, summary.answerer))
    f1_file = f"citation_f1{suffix}.png"
    f1_plot(mixture, out_dir / f1_file)
    sections.append(
        _plot_section(
            "Citations: F1, model vs random",
            f1_file,
            "Over all answerable questions; bars are 95% intervals (methods in the table).",
        )
    )
    pr_file = f"citation_precision_recall{suffix}.png"
    precision_recall_plot(mixture.queries, mixture.types, out_dir / pr_file)
    sections.append(
        _plot_section(
            "Citations: precision vs recall per query",
            pr_file,
            "The model's answers to answerable questions; answers that cite nothing have no "
            "precision and are not drawn.",
        )
    )
    unanswerable = unanswerable_section(mixture)
    if unanswerable:
        sections.append(unanswerable)
    scenarios = summary.scenarios
    if scenarios and scenarios.names:
        sections.append(scenario_section(scenarios))
        sections.append(scenario_retrieval_section(scenarios))
    sections.append(drill_down_section(mixture.queries))
    return sections
