"""A small hand-built evidence summary (``runs/<run>/evidence.json``) in the stored shape, for the
GX contract, the report's and the CLI's unit tests (the step itself needs models)."""

from __future__ import annotations

from typing import Any

from ragtrail.summaries.evidence_summary import (
    EvidenceQueryRow,
    EvidenceSummary,
    JudgeUsed,
)
from ragtrail.summaries.sufficiency_summary import AggregateRow

NOISE = (0.0, 1.0)
CELLS = (
    ("extractor", 0.0),
    ("extractor", 1.0),
    ("base", 0.0),
    ("extractive", 0.0),
    ("full", 0.0),
    ("full", 1.0),
    ("none", 0.0),
)
"""(method, noise) cells the summary has figures for, as the step builds them."""


def aggregate(
    metric: str,
    method: str,
    noise: float,
    value: float | None,
    low: float | None = None,
    high: float | None = None,
    n: int = 4,
    reason: str = "no scored questions",
) -> AggregateRow:
    """One aggregate; an undefined one (``value`` None) carries ``reason`` as the step writes it."""
    undefined = {} if value is not None else {k: reason for k in ("value", "ci_low", "ci_high")}
    return AggregateRow(
        metric=metric,
        facets={"method": method, "noise": noise},
        value=value,
        ci_low=low if value is not None else None,
        ci_high=high if value is not None else None,
        n=n if value is not None else 0,
        undefined=undefined,
    )


def _aggregates() -> list[AggregateRow]:
    rows = []
    for method, noise in CELLS:
        drop = 0.25 * noise
        rows.append(aggregate("correct", method, noise, 0.75 - drop, 0.3, 0.95))
        if method in ("extractor", "base", "extractive"):
            rows += [
                aggregate(
                    "compression", method, noise, 9.25 * (1 + noise), 4.0, 20.0 * (1 + noise)
                ),
                aggregate("evidence_tokens", method, noise, 24.0, 12.0, 40.0),
                aggregate("faithfulness", method, noise, 0.9 - drop, 0.5, 1.0),
                aggregate("silver_faithfulness", method, noise, 0.8 - drop, 0.5, 0.95),
                aggregate("conciseness", method, noise, 0.66, 0.5, 0.8),
            ]
            helpful = (
                aggregate("helpfulness", method, noise, None, reason="the scorer failed")
                if method == "base"
                else aggregate("helpfulness", method, noise, 0.62, 0.55, 0.7, n=3)
            )
            rows.append(helpful)
        if method == "full":
            rows.append(aggregate("helpfulness", method, noise, 0.58, 0.5, 0.66, n=3))
        if method not in ("full", "none"):
            rows.append(aggregate("correct_diff_vs_full", method, noise, 0.25, -0.25, 0.5))
            rows.append(aggregate("correct_diff_vs_none", method, noise, 0.5, 0.0, 1.0))
    return rows


def _queries() -> list[EvidenceQueryRow]:
    rows = []
    for qid, label in (("q1", "fact_single"), ("q2", "unanswerable")):
        for method, noise in CELLS:
            writes = method in ("extractor", "base", "extractive")
            unanswerable = label == "unanswerable"
            unscored = qid == "q2" and method == "none"
            undefined: dict[str, Any] = {}
            if unscored:
                undefined["correct"] = "answer failed"
            if unanswerable and writes:
                undefined["helpfulness"] = "no gold answer (unanswerable, or its answer is empty)"
                undefined["conciseness"] = "no gold answer (unanswerable, or its answer is empty)"
            rows.append(
                EvidenceQueryRow(
                    qid=qid,
                    label=label,
                    method=method,
                    noise=noise,
                    passages=3 * (1 + int(noise)),
                    evidence="The <b>install</b> step runs first." if writes else None,
                    evidence_tokens=8 if writes else None,
                    passage_tokens=120 * (1 + int(noise)),
                    compression=15.0 * (1 + noise) if writes else None,
                    faithfulness=0.9 if writes else None,
                    silver_faithfulness=0.8 if writes else None,
                    helpfulness=0.7 if writes and not unanswerable else None,
                    conciseness=0.6 if writes and not unanswerable else None,
                    answer=None if unscored else "install first",
                    outcome=None if unscored else ("abstain" if unanswerable else "correct"),
                    correct=None if unscored else True,
                    undefined=undefined,
                )
            )
    return rows


def evidence_summary() -> EvidenceSummary:
    """Two questions, every method, noise 0 and 1; one undefined figure with its reason."""
    return EvidenceSummary(
        run_id="evidence-1",
        set_name="golden",
        corpus="handbook",
        snapshot_id="snap-1",
        qa_set="golden:v1",
        qa_set_version="v1",
        qa_set_name="golden",
        seed=7,
        extractor="registry:extractor@3",
        extractor_source="registered champion",
        base="hf:Qwen/Qwen2.5-0.5B-Instruct",
        answerer="hf:answerer-small",
        scorer="hf:scorer-lm",
        full_answer_model="hf:generator",
        text_weight=0.2,
        text_weight_source="the set's best weight",
        retrieval_k=3,
        noise_ratios=list(NOISE),
        items=2,
        judges=[
            JudgeUsed(
                role="faithfulness",
                judge="nli:deberta@1",
                gates=True,
                reason="agreement above its bar",
                metric="kappa",
                value=0.72,
                ci_low=0.55,
                ci_high=0.86,
                n=40,
            ),
            JudgeUsed(
                role="correctness",
                judge="llm:judge@2",
                gates=False,
                reason="too few references",
            ),
        ],
        aggregates=_aggregates(),
        queries=_queries(),
        failures={"extractions": 0, "answers": 1},
    )
