"""What the report, the CLI and the GX checks read of a set's evidence evaluation: the compact
headline, the per-(question, method, noise) rows and every figure as frames, and the stored
summary."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ragtrail.artifact_keys import evidence_key
from ragtrail.quality.suites import EVIDENCE_QUERY_COLUMNS
from ragtrail.runtime import Runtime
from ragtrail.summaries.evidence_summary import EvidenceHeadline, EvidenceSummary

HEADLINE_METHODS = ("extractor", "base", "extractive", "full", "none")
"""Every method, in the order tables show them."""
METRIC_COLUMNS = ("evaluation", "method", "noise", "metric", "value", "ci_low", "ci_high", "n")
"""The columns of :func:`metrics_frame` (the GX metrics suite's input, before preparing)."""


def compact(summary: EvidenceSummary) -> EvidenceHeadline:
    """The set's headline: correct share per method without noise, the extractor's compression
    and faithfulness without noise."""
    correct = {
        method: row.figure
        for method in HEADLINE_METHODS
        if (row := summary.aggregate("correct", method)) is not None
    }
    compression = summary.aggregate("compression", "extractor")
    faithfulness = summary.aggregate("faithfulness", "extractor")
    return EvidenceHeadline(
        run_id=summary.run_id,
        extractor=summary.extractor,
        items=summary.items,
        correct=correct,
        compression=compression.figure if compression else None,
        faithfulness=faithfulness.figure if faithfulness else None,
    )


def queries_frame(summary: EvidenceSummary) -> pd.DataFrame:
    """One row per (question, method, noise); an unscored answer keeps its reason."""
    rows = []
    for q in summary.queries:
        data = q.to_json()
        rows.append(
            {
                **{c: data.get(c) for c in EVIDENCE_QUERY_COLUMNS},
                "outcome": q.outcome or "unscored",
                "unscored_reason": q.undefined.get("correct"),
            }
        )
    frame = pd.DataFrame(rows, columns=list(EVIDENCE_QUERY_COLUMNS))
    for col in (
        "noise",
        "compression",
        "faithfulness",
        "silver_faithfulness",
        "helpfulness",
        "conciseness",
        "evidence_tokens",
    ):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame["correct"] = frame["correct"].astype("boolean")
    return frame


def metrics_frame(summary: EvidenceSummary) -> pd.DataFrame:
    """Every figure of an evidence summary as (evaluation, method, noise, metric, value, ci_low,
    ci_high, n): the aggregates (``evidence``) and each judge's calibration figure
    (``calibration.<role>``) — the GX metrics suite's input."""
    rows: list[dict[str, Any]] = []
    for agg in summary.aggregates:
        noise = agg.facets.get("noise")
        rows.append(
            {
                "evaluation": "evidence",
                "method": agg.facets.get("method"),
                "noise": None if noise is None else float(noise),
                "metric": agg.metric,
                "value": agg.value,
                "ci_low": agg.ci_low,
                "ci_high": agg.ci_high,
                "n": agg.n,
            }
        )
    for judge in summary.judges:
        if judge.metric:
            rows.append(
                {
                    "evaluation": f"calibration.{judge.role}",
                    "method": None,
                    "noise": None,
                    "metric": judge.metric,
                    "value": judge.value,
                    "ci_low": judge.ci_low,
                    "ci_high": judge.ci_high,
                    "n": judge.n or 0,
                }
            )
    frame = pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
    for col in ("noise", "value", "ci_low", "ci_high"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame["n"] = pd.to_numeric(frame["n"], errors="coerce").fillna(0).astype(int)
    return frame


def load_evidence(rt: Runtime, run_id: str) -> EvidenceSummary | None:
    """The stored evidence summary of a set's run (None when it was not evaluated)."""
    key = evidence_key(run_id)
    if not rt.artifacts.exists(key):
        return None
    return EvidenceSummary.from_json(rt.artifacts.get_bytes(key))
