"""Report sections for the evidence extractor (SEER, METHODS §10): who wrote, scored and judged
the evidence, every method x noise figure, and how the extractor holds up under noise.

Input is the summary a set's run stores (``runs/<run id>/evidence.json``, written by
:mod:`ragtrail.pipeline.evidence.step`) read back as an
:class:`~ragtrail.summaries.evidence_summary.EvidenceSummary`, so the sections can be rebuilt
from the artifact alone. Every figure shows its 95% interval and n; an undefined one shows "–"
with its reason, never "nan".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from ragtrail.report.html import ReportSection, figure_text, render_section
from ragtrail.report.sample_size import sample_size_sections
from ragtrail.summaries.evidence_summary import EvidenceSummary, JudgeUsed
from ragtrail.summaries.sufficiency_summary import AggregateRow

METHODS: Final = ("extractor", "base", "extractive", "full", "none")
"""Methods in table order (the facet ``method`` of the aggregates)."""
METHOD_NOTES: Final = {
    "extractor": "the extractor in service",
    "base": "its base model, zero-shot",
    "extractive": "the sentences closest to the question, up to the extractor's token count",
    "full": "the retrieved passages as they are",
    "none": "no context",
}
FIGURES: Final = (
    ("compression", "compression"),
    ("faithfulness", "faithfulness"),
    ("silver_faithfulness", "silver faithfulness"),
    ("helpfulness", "helpfulness"),
    ("conciseness", "conciseness"),
    ("correct", "correct"),
    ("correct_diff_vs_full", "correct − full"),
    ("correct_diff_vs_none", "correct − none"),
)
"""(metric, column title) of the method x noise table."""
NOT_COMPUTED: Final = "not computed"


def _table(title: str, columns: list[str], rows: list[list[Any]], note: str) -> ReportSection:
    html = render_section("table_section.html", columns=columns, rows=rows, note=note)
    return ReportSection(title=title, html=str(html))


def cell(row: AggregateRow | None, missing: str = NOT_COMPUTED) -> str:
    """``0.62 [0.48, 0.75] n=12``; an undefined figure as ``– (its reason)``; an absent one as
    ``– (missing)``."""
    if row is None:
        return f"– ({missing})"
    if row.value is None:
        return f"– ({row.reason('value', NOT_COMPUTED)})"
    return f"{figure_text(row)} n={row.n}"


def _noise_text(noise: float) -> str:
    if noise == 0:
        return "0 (retrieved only)"
    return f"{noise:g} irrelevant per retrieved"


def _agreement(judge: JudgeUsed) -> str:
    if judge.value is None:
        return f"not measured: {judge.reason or 'no calibration'}"
    ci = (
        f" [{judge.ci_low:.2f}, {judge.ci_high:.2f}]"
        if judge.ci_low is not None and judge.ci_high is not None
        else ""
    )
    return f"{judge.metric or '?'} {judge.value:.2f}{ci} (n={judge.n or 0})"


def _cells(summary: EvidenceSummary) -> list[tuple[str, float]]:
    """Every (method, noise) the summary has a figure for, in table order."""
    present = {
        (str(a.facets.get("method")), float(a.facets.get("noise") or 0.0))
        for a in summary.aggregates
    }
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(present, key=lambda c: (order.get(c[0], len(METHODS)), c[0], c[1]))


def models_section(summary: EvidenceSummary) -> ReportSection:
    """Who wrote the evidence, who answered from it, who scored it, and each judge with its
    role, whether it gates or only advises, and its measured agreement."""
    base = summary.base or f"– ({summary.reason('base', 'no base model')})"
    rows: list[list[Any]] = [
        ["extractor", summary.extractor, summary.extractor_source],
        ["base model", base, "its base model, evaluated zero-shot"],
        ["answerer", summary.answerer, "answers from each method's context"],
        ["scorer LM", summary.scorer, "helpfulness: gain in log p(gold answer)"],
        ["full-answer model", summary.full_answer_model, "conciseness: the full-length answer"],
    ]
    for judge in summary.judges:
        mode = "gates" if judge.gates else "advises only"
        rows.append([f"{judge.role} judge", judge.judge, f"{mode}; agreement {_agreement(judge)}"])
    failures = ", ".join(f"{k} {v}" for k, v in summary.failures.items()) or "none"
    note = (
        f"{summary.items} questions of {summary.qa_set} (version {summary.qa_set_version}), "
        f"seed {summary.seed}; top {summary.retrieval_k} chunks at text weight "
        f"{summary.text_weight} ({summary.text_weight_source}). A judge that has not met its "
        f"agreement bar only advises. Failed calls: {failures}."
    )
    return _table("Evidence extractor: models and judges", ["role", "model", "notes"], rows, note)


def methods_section(summary: EvidenceSummary) -> ReportSection:
    """One row per method and noise level: every figure with its interval and n, and the
    paired differences in correctness against the full passages and against no context."""
    rows = [
        [method, f"{noise:g}", *(cell(summary.aggregate(m, method, noise)) for m, _ in FIGURES)]
        for method, noise in _cells(summary)
    ]
    methods = "; ".join(f"{m} = {note}" for m, note in METHOD_NOTES.items())
    note = (
        f"Methods: {methods}. Noise = irrelevant chunks added per retrieved one. Compression = "
        "passage tokens / evidence tokens; faithfulness = the passages entail the evidence "
        "(silver: the relevant chunk alone does); helpfulness = sigmoid of the gain in log "
        "p(gold answer) under the scorer LM; conciseness = cosine with the full-length answer; "
        "correct = a correct answer, or an abstention on an unanswerable question. Differences "
        "are paired over questions (t intervals below 20 pairs, BCa from 20). – marks a figure that is not defined "
        "for the method, with its reason."
    )
    return _table(
        "Evidence extractor: methods x noise",
        ["method", "noise", *(title for _, title in FIGURES)],
        rows,
        note,
    )


def robustness_line(summary: EvidenceSummary) -> str:
    """The extractor's correctness and silver faithfulness at each noise level, in one line."""
    parts = []
    for noise in sorted(summary.noise_ratios):
        correct = summary.aggregate("correct", "extractor", noise)
        silver = summary.aggregate("silver_faithfulness", "extractor", noise)
        parts.append(
            f"noise {noise:g}: correct {cell(correct)}, silver faithfulness {cell(silver)}"
        )
    return "Extractor under noise — " + "; ".join(parts) + "."


def robustness_section(summary: EvidenceSummary) -> ReportSection:
    """Per noise level: the extractor's and the full passages' correctness, and the
    extractor's (silver) faithfulness and compression."""
    rows = [
        [
            _noise_text(noise),
            cell(summary.aggregate("correct", "extractor", noise)),
            cell(summary.aggregate("correct", "full", noise)),
            cell(summary.aggregate("silver_faithfulness", "extractor", noise)),
            cell(summary.aggregate("faithfulness", "extractor", noise)),
            cell(summary.aggregate("compression", "extractor", noise)),
        ]
        for noise in sorted(summary.noise_ratios)
    ]
    note = (
        robustness_line(summary) + " Silver faithfulness is judged against the relevant chunk "
        "alone, so added noise cannot make it easier."
    )
    return _table(
        "Evidence extractor: robustness to irrelevant passages",
        [
            "noise",
            "extractor correct",
            "full correct",
            "silver faithfulness",
            "faithfulness",
            "compression",
        ],
        rows,
        note,
    )


def evidence_sections(
    summary: EvidenceSummary, out_dir: Path, suffix: str = ""
) -> list[ReportSection]:
    """Every evidence section of one set (``out_dir`` and ``suffix`` match the other sections'
    signature; these sections draw no plot)."""
    del out_dir, suffix
    return [
        *sample_size_sections("Evidence", summary.sample_size),
        models_section(summary),
        methods_section(summary),
        robustness_section(summary),
    ]
