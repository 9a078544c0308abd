"""The model steps of one batch of contexts: statements, questions, labels, critiques, dedup.

Each step runs through the cached LLM client of its model role (statements, questions and the
baseline: generator; labels: labeller; critiques: critic); statuses and reasons are written onto
the candidates, which the round algorithm (:mod:`.rounds`) then selects from.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from ragtrail.config import ModelRole
from ragtrail.generate.baseline import single_prompt_baseline
from ragtrail.generate.checks import check_candidates, reject_reason
from ragtrail.generate.critiques import CRITERIA, apply_thresholds, critique_candidates
from ragtrail.generate.judges import critique_judge_name
from ragtrail.generate.labeller import label_candidates
from ragtrail.generate.steps import extract_statements, make_candidates, write_questions
from ragtrail.llm import GenerationParams
from ragtrail.llm.together import together
from ragtrail.pipeline.generate.plan import GenerationPlan, step_rng
from ragtrail.pipeline.judges import labeller_for, labeller_name
from ragtrail.records import STATEMENT_KINDS, CandidateStatus, Context, QACandidate
from ragtrail.runtime import Runtime
from ragtrail.testset.dedup import find_duplicates

KIND_FOR_LABEL = {label: kind for kind, label in STATEMENT_KINDS.items()}


def ids(cands: Iterable[QACandidate]) -> set[str]:
    return {c.candidate_id for c in cands}


def reject(cands: Iterable[QACandidate], reason: str) -> None:
    for c in cands:
        c.status, c.reject_reason = CandidateStatus.REJECTED, reason


def pending(cands: Iterable[QACandidate]) -> list[QACandidate]:
    return [c for c in cands if c.status == CandidateStatus.PENDING]


def generation_params(rt: Runtime, plan: GenerationPlan) -> GenerationParams:
    return GenerationParams(temperature=rt.settings.generation.temperature, seed=plan.seed)


def statement_candidates(
    rt: Runtime, plan: GenerationPlan, contexts: list[Context], deficit: dict[str, int], salt: str
) -> list[QACandidate]:
    """Statements -> chosen statements -> questions -> labels -> critiques for some contexts."""
    cands = draft_candidates(rt, plan, contexts, deficit, salt)
    label_and_critique(rt, plan, cands)
    return cands


def draft_candidates(
    rt: Runtime, plan: GenerationPlan, contexts: list[Context], deficit: dict[str, int], salt: str
) -> list[QACandidate]:
    """Statements -> chosen statements -> questions for some contexts (the generator's calls;
    the judges' come after, :func:`label_and_critique`)."""
    client, params = rt.llm(ModelRole.GENERATOR), generation_params(rt, plan)
    sets = extract_statements(
        client, contexts, params, extractive=rt.settings.generation.extractive_facts
    )
    generator = {
        "backend": client.backend.name,
        "model": client.backend.model_id,
        "seed": plan.seed,
    }
    wanted = {KIND_FOR_LABEL[lb]: 2 * n for lb, n in deficit.items() if lb != "unanswerable" and n}
    cands = make_candidates(
        sets, rng=step_rng(plan, "statements", salt), kinds_wanted=wanted, generator_info=generator
    )
    for s in sets:  # a context whose facts failed is a failed candidate, not a silent gap
        if "facts" in s.failures:
            f = s.failures["facts"]
            cands.append(
                QACandidate(
                    candidate_id=f"facts-{s.context.chunk_hash[:18]}",
                    context=s.context,
                    statement_kind="fact",
                    requested_label="fact_single",
                    status=CandidateStatus.FAILED,
                    failure_cause=f"facts_failed:{f.cause}",
                    raw_outputs=list(f.raw),
                    generator=generator,
                )
            )
    write_questions(client, cands, params)
    return cands


def run_checks(rt: Runtime, cands: list[QACandidate]) -> None:
    """Reject the pending candidates that fail a model-free check (:mod:`ragtrail.generate.checks`)."""
    todo = pending(cands)
    if not todo:
        return
    bar = rt.settings.generation.min_question_statement_similarity
    for cand, failed in zip(todo, check_candidates(todo, rt.embedder.encode, bar), strict=True):
        if failed:
            reject([cand], reject_reason(failed))


def label_and_critique(rt: Runtime, plan: GenerationPlan, cands: list[QACandidate]) -> None:
    """Model-free checks, then label and critique every pending pair under the run's gates.

    The checks always gate and cost no model call. A labeller that gates rejects label mismatches
    (only matches are critiqued); an advisory one leaves every item its requested label, so its
    verdicts and the critiques do not depend on each other and an endpoint gets both at once.
    Only gating critiques reject; advisory ratings are recorded on the items all the same.
    """
    run_checks(rt, cands)
    params = generation_params(rt, plan)
    labeller = labeller_for(rt)
    critic = rt.llm(ModelRole.CRITIC)
    if plan.gates(labeller_name(rt)):
        label_candidates(labeller, pending(cands), params, gates=True)
        matched = []
        for c in pending(cands):
            if c.label_matches:
                matched.append(c)
            else:
                reject([c], f"label_mismatch:{c.requested_label}->{c.observed_label}")
        critique_candidates(critic, matched, params)
    else:
        matched = pending(cands)
        together(
            [
                partial(label_candidates, labeller, matched, params, gates=False),
                partial(critique_candidates, critic, matched, params),
            ],
            concurrent=critic.concurrent,
        )
    gating = [name for name in CRITERIA if plan.gates(critique_judge_name(name))]
    apply_thresholds(matched, rt.settings.generation.critique_thresholds, gating)


def dedup(
    rt: Runtime, kept: list[QACandidate], fresh: list[QACandidate], previous: list[str]
) -> None:
    """Reject near-duplicates within the kept items and against the previous version."""
    if not fresh:
        return
    questions = [c.question for c in kept + fresh]
    encode = rt.embedder.encode
    gen = rt.settings.generation
    dups = find_duplicates(
        questions,
        embeddings=encode(questions),
        previous=previous,
        previous_embeddings=encode(previous) if previous else None,
        cos_threshold=gen.dedup_cosine,
        jaccard_threshold=gen.dedup_jaccard,
    )
    for cand, dup in zip(fresh, dups[len(kept) :], strict=True):
        if dup is not None:
            where = "previous version" if dup.of_previous else "this set"
            reject([cand], f"duplicate_of:{where}#{dup.of_index}")


def baseline(rt: Runtime, plan: GenerationPlan, contexts: list[Context]) -> list[QACandidate]:
    """The single-prompt factoid baseline on a seeded sample of the contexts we used, labelled by
    the same labeller as our candidates."""
    n = rt.settings.generation.baseline_contexts
    if not n or not contexts:
        return []
    sample = step_rng(plan, "baseline").sample(contexts, min(n, len(contexts)))
    params = generation_params(rt, plan)
    items = single_prompt_baseline(rt.llm(ModelRole.GENERATOR), sample, params)
    label_candidates(labeller_for(rt), pending(items), params)
    return items
