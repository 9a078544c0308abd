"""The round / top-up algorithm: quotas per label, more contexts until they are met.

The first pass works on the candidates the shards produced (the rounds drafted together,
``generation.rounds_at_once``); every later round draws the next contexts from the plan's pool
while some label is short. Each round deduplicates, selects with quotas and a
per-document cap, and asks surplus questions of a foreign context while unanswerable items are
missing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ragtrail.generate.steps import make_unanswerable
from ragtrail.pipeline.generate.candidates import (
    dedup,
    ids,
    label_and_critique,
    pending,
    reject,
    statement_candidates,
)
from ragtrail.pipeline.generate.plan import GenerationPlan, contexts_by_id, step_rng
from ragtrail.records import CandidateStatus, Context, QACandidate
from ragtrail.runtime import Runtime
from ragtrail.testset.quotas import QuotaResult, select_with_quotas
from ragtrail.testset.store import TestSetStore

FINALIZE_REJECTIONS = ("quota_full", "document_cap", "duplicate_of")


def initial_deficit(rt: Runtime, plan: GenerationPlan) -> dict[str, int]:
    """Items still missing per label once the kept items of the previous version count."""
    existing = TestSetStore(rt.engine).get_candidates_by_id(plan.existing_ids)
    have = Counter(c.effective_label for c in existing)
    return {lb: max(0, n - have[lb]) for lb, n in plan.targets.items()}


def undo_finalize(cand: QACandidate) -> QACandidate:
    """A retried finalize starts from the shard results: its own earlier decisions are undone."""
    reason = (cand.reject_reason or "").split(":")[0]
    if cand.status == CandidateStatus.ACCEPTED or (
        cand.status == CandidateStatus.REJECTED and reason in FINALIZE_REJECTIONS
    ):
        cand.status, cand.reject_reason = CandidateStatus.PENDING, None
    return cand


@dataclass
class RoundsOutcome:
    """Every candidate seen (shards and later rounds), the contexts used and the selection."""

    candidates: list[QACandidate]
    contexts_used: list[Context]
    selected: list[QACandidate]
    quota: QuotaResult


def run_rounds(
    rt: Runtime,
    plan: GenerationPlan,
    existing: list[QACandidate],
    candidates: list[QACandidate],
    contexts_used: list[Context],
    remaining: list[str],
) -> RoundsOutcome:
    """Dedup, quota selection and top-up rounds until every quota is met or the pool is empty."""
    gen = rt.settings.generation

    def select(pool: Sequence[QACandidate]) -> QuotaResult:
        return select_with_quotas(
            pool, plan.targets, max_per_document=gen.max_per_document, existing=existing
        )

    selected: list[QACandidate] = list(existing)
    quota = select([])
    drafted = len(plan.drafted_rounds())
    # The drafted rounds' candidates are selected together (the first pass), then top-up rounds.
    for round_no in range(drafted - 1, gen.max_rounds):
        deficit = {lb: max(0, n - quota.achieved.get(lb, 0)) for lb, n in plan.targets.items()}
        if round_no >= drafted:
            if not any(deficit.values()) or not remaining:
                break
            batch, remaining = (
                remaining[: gen.contexts_per_round],
                remaining[gen.contexts_per_round :],
            )
            new_contexts = contexts_by_id(rt, plan, batch)
            contexts_used += new_contexts
            candidates += statement_candidates(rt, plan, new_contexts, deficit, f"round{round_no}")
        fresh = [c for c in pending(candidates) if c.candidate_id not in ids(selected)]
        dedup(rt, selected, fresh, plan.previous_questions)
        quota = select(pending(candidates))
        selected = list(quota.selected)
        missing = plan.targets["unanswerable"] - quota.achieved.get("unanswerable", 0)
        if missing > 0:
            # Questions that did not make the set (quota surplus, other labels) are asked of a
            # foreign context; the same question never appears twice in a version.
            taken = ids(selected)
            sources = [
                c
                for c in candidates
                if c.question and c.statement_kind != "foreign" and c.candidate_id not in taken
            ]
            known = ids(candidates)
            foreign = [
                c
                for c in make_unanswerable(
                    sources, contexts_used, step_rng(plan, "foreign", round_no), limit=2 * missing
                )
                if c.candidate_id not in known
            ]
            label_and_critique(rt, plan, foreign)
            candidates += foreign
            dedup(rt, selected, pending(foreign), plan.previous_questions)
            quota = select(pending(candidates))
            selected = list(quota.selected)
    return RoundsOutcome(candidates, contexts_used, selected, quota)


def settle(outcome: RoundsOutcome) -> None:
    """Accept the selection; reject every leftover with the quota's reason."""
    chosen = {c.candidate_id for c in outcome.selected}
    for leftover in outcome.quota.leftovers:
        if leftover.candidate.candidate_id not in chosen:
            reject([leftover.candidate], leftover.reason)
    for cand in outcome.selected:
        cand.status = CandidateStatus.ACCEPTED
