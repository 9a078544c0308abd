"""What the report, the CLI and the GX checks read of a set's evidence evaluation: the compact
headline, the per-(question, method, noise) rows as a frame, and the stored summary."""

from __future__ import annotations

import pandas as pd

from ragtrail.artifact_keys import evidence_key
from ragtrail.runtime import Runtime
from ragtrail.summaries.evidence_summary import EvidenceHeadline, EvidenceSummary

HEADLINE_METHODS = ("extractor", "base", "extractive", "full", "none")
QUERY_COLUMNS = (
    "qid",
    "label",
    "method",
    "noise",
    "passages",
    "evidence_tokens",
    "passage_tokens",
    "compression",
    "faithfulness",
    "silver_faithfulness",
    "helpfulness",
    "conciseness",
    "outcome",
    "correct",
    "unscored_reason",
)
"""The columns of ``evidence_queries.parquet`` (the GX input)."""


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
                **{c: data.get(c) for c in QUERY_COLUMNS},
                "outcome": q.outcome or "unscored",
                "unscored_reason": q.undefined.get("correct"),
            }
        )
    frame = pd.DataFrame(rows, columns=list(QUERY_COLUMNS))
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


def load_evidence(rt: Runtime, run_id: str) -> EvidenceSummary | None:
    """The stored evidence summary of a set's run (None when it was not evaluated)."""
    key = evidence_key(run_id)
    if not rt.artifacts.exists(key):
        return None
    return EvidenceSummary.from_json(rt.artifacts.get_bytes(key))
