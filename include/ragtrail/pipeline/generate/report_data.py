"""The generation summary: funnel, label matrix, critique statistics, failures and usage.

The :class:`~ragtrail.summaries.generation_summary.GenerationSummary` built here is what
:mod:`ragtrail.report.testset_sections` renders and what ``generation.json`` stores next to a version
(:mod:`.artifacts`), so a report can be rebuilt from the artifact alone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict

import numpy as np

from ragtrail.generate.checks import CheckName
from ragtrail.generate.critiques import CRITERIA
from ragtrail.pipeline.generate.plan import GenerationPlan
from ragtrail.records import (
    LABELS,
    REJECT_DETAIL_SEPARATOR,
    CandidateStatus,
    QACandidate,
    RejectKind,
    format_reject_reason,
)
from ragtrail.runtime import Runtime
from ragtrail.summaries.generation_summary import (
    CritiqueStats,
    FailureGroup,
    FunnelStage,
    GenerationSummary,
    JudgeGate,
    LabelDistribution,
    StageUsage,
)

FAILURE_EXAMPLES = 3


def critique_stats(cands: Sequence[QACandidate]) -> dict[str, dict[str, CritiqueStats]]:
    """Per label and criterion: how many ratings, their mean and a 1-5 histogram."""
    out: dict[str, dict[str, CritiqueStats]] = {}
    for label in LABELS:
        rated = [c for c in cands if c.effective_label == label and c.critiques]
        per: dict[str, CritiqueStats] = {}
        for criterion in CRITERIA:
            ratings = [
                c.critiques[criterion]["rating"]
                for c in rated
                if isinstance(c.critiques.get(criterion, {}).get("rating"), int)
            ]
            hist = [ratings.count(r) for r in range(1, 6)]
            per[criterion] = CritiqueStats(
                n=len(ratings), mean=float(np.mean(ratings)) if ratings else None, hist=hist
            )
        if rated:
            out[label] = per
    return out


def rejection_cause(reason: str | None) -> str:
    """The group of a reject reason: its kind, and for a model-free check also the check's name
    (``check:mentions_passage``), since each check fails for a different reason."""
    kind, _, detail = (reason or "unknown").partition(REJECT_DETAIL_SEPARATOR)
    if kind == RejectKind.CHECK and detail:
        return f"{kind}{REJECT_DETAIL_SEPARATOR}{detail.split('=')[0]}"
    return kind


def failures(cands: Sequence[QACandidate]) -> list[FailureGroup]:
    """Failed and rejected candidates grouped by cause, most frequent first, with examples."""
    groups: dict[str, list[QACandidate]] = defaultdict(list)
    for c in cands:
        if c.status == CandidateStatus.FAILED:
            groups[f"failed:{(c.failure_cause or 'unknown').split(':')[0]}"].append(c)
        elif c.status == CandidateStatus.REJECTED:
            groups[f"rejected:{rejection_cause(c.reject_reason)}"].append(c)
    out = []
    for cause, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        examples = [
            (c.raw_outputs[-1] if c.raw_outputs else (c.reject_reason or c.failure_cause or ""))
            for c in items[:FAILURE_EXAMPLES]
        ]
        out.append(FailureGroup(cause=cause, count=len(items), examples=examples))
    return out


def _has_reason(cand: QACandidate, prefix: str) -> bool:
    return (cand.reject_reason or "").startswith(prefix) or (cand.failure_cause or "").startswith(
        prefix
    )


def funnel(candidates: Sequence[QACandidate]) -> list[FunnelStage]:
    """Counts per acceptance stage, derived from each candidate's final status and reason."""
    parsed = [c for c in candidates if c.question]
    wrong_language = format_reject_reason(RejectKind.CHECK, CheckName.WRONG_LANGUAGE.value)
    in_language = [c for c in parsed if wrong_language not in (c.reject_reason or "")]
    checked = [c for c in in_language if not _has_reason(c, RejectKind.CHECK)]
    matched = [c for c in checked if c.label_matches]
    passed = [
        c for c in matched if not (_has_reason(c, "critique") or c.status == CandidateStatus.FAILED)
    ]
    deduped = [c for c in passed if not _has_reason(c, "duplicate_of")]
    selected = [c for c in deduped if c.status == CandidateStatus.ACCEPTED]
    stages = {
        "candidates": candidates,
        "parsed": parsed,
        "in the context's language": in_language,
        "model-free checks passed": checked,
        "label match": matched,
        "critiques passed": passed,
        "after dedup": deduped,
        "selected (quotas)": selected,
    }
    return [FunnelStage(stage=k, count=len(v)) for k, v in stages.items()]


def generation_summary(
    rt: Runtime,
    plan: GenerationPlan,
    candidates: list[QACandidate],
    selected: list[QACandidate],
    existing: list[QACandidate],
    baseline: list[QACandidate],
    version: str | None,
) -> GenerationSummary:
    """The summary of one finalized run (see module docstring)."""
    matrix: dict[str, Counter[str]] = defaultdict(Counter)
    for c in candidates:
        if c.question:
            matrix[c.requested_label][c.observed_label or "failed"] += 1
    usage = rt.llm_usage
    usage_rows = [
        StageUsage(stage=stage, **asdict(c), cost_usd=usage.cost_usd(model, c))
        for (stage, _backend, model), c in sorted(usage.snapshot().items())
    ]
    totals = usage.totals()
    accepted = Counter(c.effective_label for c in selected)
    return GenerationSummary(
        version=version,
        corpus=plan.corpus,
        snapshot_id=plan.snapshot_id,
        run_id=plan.run_id,
        seed=plan.seed,
        targets=plan.targets,
        achieved={lb: accepted[lb] for lb in LABELS},
        accepted={lb: accepted[lb] for lb in LABELS},
        kept_from_previous=len(existing),
        retired=plan.retired,
        funnel=funnel(candidates),
        label_matrix={k: dict(v) for k, v in matrix.items()},
        distribution=LabelDistribution(
            ours={lb: accepted[lb] for lb in LABELS},
            baseline=dict(Counter(c.observed_label for c in baseline if c.observed_label)),
        ),
        critiques=critique_stats(candidates),
        usage=usage_rows,
        model_calls=totals.calls,
        cache_hits=totals.cache_hits,
        failures=failures(candidates),
        backends=rt.backends(),
        judges={name: JudgeGate.from_json(gate) for name, gate in plan.judges.items()},
    )
