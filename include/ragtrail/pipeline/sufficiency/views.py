"""What the report and the CLI read of a set's sufficiency evaluation: the raters' view, the C/A/H
table, the per-(question, setting) rows, the figures the GX suite checks, the compact headline and
the stored summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ragtrail.artifact_keys import sufficiency_key
from ragtrail.evaluate.sufficiency.cah import ALL, CAHEvaluation, CAHRecord, Outcome
from ragtrail.evaluate.sufficiency.confidence import ConfidenceScore
from ragtrail.evaluate.sufficiency.selective import SelectiveRow
from ragtrail.evaluate.sufficiency.selective_policy import P_CORRECT, P_TRUE, SelectivePolicy
from ragtrail.evaluate.sufficiency.selective_policy import SUFFICIENT as SUFFICIENT_FEATURE
from ragtrail.evaluate.sufficiency.short_answers import ShortAnswer
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.calibration import proportion
from ragtrail.judges.contract import Judge, Verdict
from ragtrail.judges.sufficiency_raters import SUFFICIENT
from ragtrail.quality.suites import SUFFICIENCY_QUERY_COLUMNS
from ragtrail.records import QAItem
from ragtrail.runtime import Runtime
from ragtrail.summaries.base import Figure
from ragtrail.summaries.sufficiency_summary import (
    AggregateRow,
    CAHCounts,
    CAHTableRow,
    CAHView,
    Proportion,
    QueryRow,
    RaterSetting,
    RaterView,
    SufficiencyHeadline,
    SufficiencySummary,
)


def rater_view(
    raters: Sequence[Judge],
    calibrations: Mapping[str, Mapping[str, Any]],
    rated: Sequence[tuple[QAItem, str, list[str]]],
    verdicts: Mapping[str, Sequence[Verdict]],
) -> list[RaterView]:
    """Per rater: identity, calibration and gate, and per rated setting the share of contexts
    it called sufficient (Wilson CI), its failures and truncations."""
    out = []
    for rater in raters:
        spec, calibration = rater.spec, dict(calibrations.get(rater.spec.name, {}))
        per_setting = {}
        for setting in dict.fromkeys(s for _, s, _ in rated):
            mine = [
                v for (_, s, _), v in zip(rated, verdicts[spec.name], strict=True) if s == setting
            ]
            ok = [v for v in mine if v.ok]
            share = proportion(sum(v.value == SUFFICIENT for v in ok), len(ok), what="verdicts")
            per_setting[setting] = RaterSetting(
                n=len(mine),
                failed=len(mine) - len(ok),
                truncated=sum("truncated" in v.reason for v in mine),
                share=Proportion.from_json(share.as_dict()),
            )
        out.append(
            RaterView(
                name=spec.name,
                judge=spec.ref,
                approximate=spec.approximate,
                description=spec.description,
                calibration={k: v for k, v in calibration.items() if k != "gate"},
                gate=calibration.get("gate"),
                per_setting=per_setting,
            )
        )
    return out


def cah_view(cah: CAHEvaluation, correctness: Mapping[str, Any]) -> CAHView:
    """The C/A/H table with each rate beside its facets, the counts and the judge."""
    table = []
    for row in cah.table:
        data = row.as_dict()
        rates = data.pop("rates")
        table.append(CAHTableRow.from_json({**data, **{o: rates[o] for o in OUTCOMES}}))
    overall = next(r for r in cah.table if set(r.facets.values()) == {ALL})  # every answer
    decided = Counter(
        "judge" if "@" in r.decided_by else r.decided_by for r in cah.records if r.decided_by
    )
    return CAHView(
        correctness=dict(correctness),
        table=table,
        aggregates=[AggregateRow.from_json(a.as_dict()) for a in cah.result.aggregates],
        counts=CAHCounts(
            answers=overall.n,
            scored=overall.n_scored,
            unscored=dict(overall.unscored_reasons),
            decided_by=dict(decided),
        ),
    )


def query_rows(
    answered: Sequence[tuple[QAItem, str, list[str]]],
    records: Sequence[CAHRecord],
    ratings: Mapping[tuple[str, str], Mapping[str, str | int | float | None]],
    confidence: Mapping[int, Mapping[str, ConfidenceScore]],
    policy: SelectivePolicy | None,
) -> list[QueryRow]:
    """One row per (question, setting): context, stratum, every rater's verdict, the answer, its
    outcome and confidences, and the fitted policy's score when it can score the row."""
    rows = []
    for i, ((item, setting, passages), record) in enumerate(zip(answered, records, strict=True)):
        answer: ShortAnswer = record.case.answer
        scores = confidence.get(i, {})
        features = {k: v.value for k, v in scores.items()}
        features[SUFFICIENT_FEATURE] = sufficiency_feature(setting, record.case.sufficient)
        policy_score = None
        row = SelectiveRow(f"{item.qid}/{setting}", item.qid, features, False, False)
        if policy is not None and policy.can_score(row):
            policy_score = policy.score(row)
        rows.append(
            QueryRow(
                qid=item.qid,
                label=str(item.label),
                setting=setting,
                question=item.question,
                passages=list(passages),
                sufficiency=record.case.sufficiency,
                ratings=dict(ratings.get((item.qid, setting), {})),
                gold=item.gold,
                answer=answer.text,
                abstained=answer.abstained,
                error=answer.error,
                raw="\n---\n".join(answer.raw),
                outcome=None if record.outcome is None else str(record.outcome),
                decided_by=record.decided_by,
                unscored_reason=record.unscored_reason,
                p_true=features.get(P_TRUE),
                p_correct=features.get(P_CORRECT),
                policy_score=policy_score,
            )
        )
    return rows


def queries_frame(summary: SufficiencySummary) -> pd.DataFrame:
    """One row per (question, setting): stratum, outcome (``unscored`` with its reason) and
    confidences — the GX input."""
    columns = list(SUFFICIENCY_QUERY_COLUMNS)
    rows = []
    for query in summary.queries:
        data = query.to_json()
        rows.append({**{c: data.get(c) for c in columns}, "outcome": query.outcome or "unscored"})
    frame = pd.DataFrame(rows, columns=columns)
    for col in ("p_true", "p_correct"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    return frame


def metrics_frame(summary: SufficiencySummary) -> pd.DataFrame:
    """Every figure of a sufficiency summary as (evaluation, metric, value, ci_low, ci_high, n)."""
    rows: list[JsonObject] = [{"evaluation": "cah", **a.to_json()} for a in summary.cah.aggregates]
    for rater in summary.raters:
        agreement = rater.agreement
        if agreement.metric:
            rows.append(
                {
                    "evaluation": f"calibration.{rater.name}",
                    "metric": agreement.metric,
                    "value": agreement.value,
                    "ci_low": agreement.ci_low,
                    "ci_high": agreement.ci_high,
                    "n": agreement.n or 0,
                }
            )
        for setting, per in rater.per_setting.items():
            rows.append(
                {
                    "evaluation": f"rater.{rater.name}.{setting}",
                    "metric": "sufficient_share",
                    **per.share.to_json(),
                }
            )
    if summary.selective is not None:
        auc = summary.selective.auc
        for agg in (auc.confidence, auc.sufficiency_confidence, auc.gain):
            if agg is not None:
                rows.append({"evaluation": "selective", **agg.to_json()})
    columns = ["evaluation", "metric", "value", "ci_low", "ci_high", "n"]
    frame = pd.DataFrame(rows, columns=None if rows else columns)
    return frame.drop(columns=["facets", "undefined"], errors="ignore")


def compact(summary: SufficiencySummary) -> SufficiencyHeadline:
    """The set's headline: hallucination rate per setting (all labels, all strata), the primary
    rater and the selective policy's AUC gain."""
    hallucination = {
        row.setting: _figure(row.hallucinate)
        for row in summary.cah.table
        if row.setting != ALL and row.sufficiency == ALL and row.label == ALL
    }
    gain = summary.selective.auc.gain if summary.selective is not None else None
    return SufficiencyHeadline(
        run_id=summary.run_id,
        answerer=summary.answerer,
        primary_rater=summary.primary_rater.name,
        hallucination=hallucination,
        auc_gain=gain.figure if gain is not None else None,
    )


def _figure(share: Proportion) -> Figure:
    return Figure(value=share.value, ci_low=share.ci_low, ci_high=share.ci_high, n=share.n)


def load_sufficiency(rt: Runtime, run_id: str) -> SufficiencySummary | None:
    """The stored sufficiency summary of a set's run (None when it was not rated)."""
    key = sufficiency_key(run_id)
    if not rt.artifacts.exists(key):
        return None
    return SufficiencySummary.from_json(rt.artifacts.get_bytes(key))


RATED_SETTINGS = ("retrieved", "evidence", "gold")
"""The settings whose context is rated; ``none`` has no context (its answers stay unrated)."""


OUTCOMES = tuple(str(o) for o in Outcome)


def sufficiency_feature(setting: str, sufficient: bool | None) -> float | None:
    """The policy's binary sufficiency feature: 1/0 from the primary rater, 0 without context
    (an empty context answers nothing), None when the rater failed."""
    if setting == "none":
        return 0.0
    return None if sufficient is None else float(sufficient)
