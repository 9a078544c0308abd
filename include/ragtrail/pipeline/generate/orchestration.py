"""The entry points of a generation run: plan, one mapped shard, finalize, or all in process."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace

from ragtrail.artifact_keys import (
    generation_baseline_key,
    generation_draft_key,
    generation_plan_key,
)
from ragtrail.config import ModelRole
from ragtrail.failures import FailureCount, check_failures
from ragtrail.jsonsafe import JsonObject
from ragtrail.pipeline.generate.artifacts import write_artifacts
from ragtrail.pipeline.generate.candidates import (
    baseline,
    draft_candidates,
    label_and_critique,
    pending,
)
from ragtrail.pipeline.generate.plan import (
    GenerationPlan,
    GenerationRequest,
    contexts_by_id,
    contexts_of_documents,
    interleave,
    load_plan,
)
from ragtrail.pipeline.generate.report_data import generation_summary
from ragtrail.pipeline.generate.rounds import (
    initial_deficit,
    run_rounds,
    settle,
    undo_finalize,
)
from ragtrail.pipeline.judges import generation_gates
from ragtrail.progress import ProgressUpdate
from ragtrail.records import LABELS, CandidateStatus, ModelKind, ModelSpec, QACandidate
from ragtrail.redact import redact
from ragtrail.runtime import Runtime
from ragtrail.summaries.generation_summary import GenerationSummary
from ragtrail.testset.store import TestSetStore

GENERATION_ROLES = (ModelRole.GENERATOR, ModelRole.LABELLER, ModelRole.CRITIC)
"""The model roles a generation run uses (recorded in the plan and the version's params)."""


def shard_size_for(rt: Runtime) -> int:
    """Contexts per mapped shard: a local generator's batch, or for an OpenAI-compatible
    endpoint at least its concurrency (shards run one after the other in one process, so a
    local model's batch size would cap what the endpoint gets at once)."""
    gen = rt.settings.generation
    spec = ModelSpec.try_parse(rt.settings.model_for(ModelRole.GENERATOR))
    if spec is not None and spec.kind == ModelKind.OPENAI:
        return max(gen.llm_batch_size, gen.llm_max_concurrency)
    return max(1, gen.llm_batch_size)


def rounds_at_once(rt: Runtime) -> int:
    """How many rounds' contexts the shards draft together (``generation.rounds_at_once``;
    empty: every round when every model is an endpoint, else one)."""
    gen = rt.settings.generation
    if gen.rounds_at_once is not None:
        return min(gen.rounds_at_once, gen.max_rounds)
    return gen.max_rounds if rt.llm_calls_overlap() else 1


def draft_rounds(pool: Sequence[str], first: int, rounds: int, per_round: int) -> list[list[str]]:
    """The contexts of the rounds drafted together: the pool's first ``first`` (the first round,
    drawn from changed documents), then up to ``rounds - 1`` more rounds of ``per_round`` from
    the rest of the pool, in the order the top-up rounds would take them. No round without a
    first one (every quota is met)."""
    if not first:
        return []
    drafted = [list(pool[:first])]
    rest = pool[first:]
    for k in range(rounds - 1):
        batch = list(rest[k * per_round : (k + 1) * per_round])
        if not batch:
            break
        drafted.append(batch)
    return drafted


def plan_generation(rt: Runtime, request: GenerationRequest) -> GenerationPlan:
    """Retire invalidated items, keep the still-valid ones, order the context pool, shard it.

    A retried plan of the same run returns the stored plan, so every later step sees the same
    contexts, seed and targets.
    """
    gen = rt.settings.generation
    corpus = request.corpus
    if rt.artifacts.exists(generation_plan_key(corpus, request.run_id)):
        return load_plan(rt, corpus, request.run_id)
    snapshot = (
        rt.store.get_snapshot(request.snapshot_id)
        if request.snapshot_id
        else rt.store.latest_snapshot(corpus)
    )
    if snapshot is None or snapshot.status != "complete":
        raise ValueError(f"corpus {corpus!r} has no complete snapshot to generate from")
    unknown = set(request.labels) - set(LABELS)
    if unknown:
        raise ValueError(f"unknown labels {sorted(unknown)}; known: {', '.join(LABELS)}")
    snapshot_id = snapshot.snapshot_id
    seed = rt.settings.seed if request.seed is None else request.seed
    per_label = request.per_label or gen.per_label
    testsets = TestSetStore(rt.engine)
    docs = rt.store.get_documents(corpus)

    retired = testsets.retire_stale_hashes(
        corpus, {d: row.content_hash for d, row in docs.items()}, snapshot_id
    )
    previous = testsets.latest_version(corpus)
    prev_items = testsets.version_items(previous["version"]) if previous else []
    live = {
        c.candidate_id for c in testsets.get_candidates(corpus, status=CandidateStatus.ACCEPTED)
    }
    existing = [
        c
        for c in prev_items
        if c.candidate_id in live
        and c.effective_label not in request.labels
        and c.context.doc_id not in request.doc_ids
    ]
    kept_ids = {c.candidate_id for c in existing}
    used_chunks = {c.context.chunk_id for c in existing}
    if request.doc_ids:
        first_docs = set(request.doc_ids)
    elif previous:  # documents added or updated since the previous version's snapshot
        # Snapshot ids start with a UTC timestamp, so they sort in creation order.
        first_docs = {
            d for d, row in docs.items() if row.last_changed_snapshot_id > previous["snapshot_id"]
        }
    else:
        first_docs = set(docs)
    rng = random.Random(seed)
    first_pool = [
        c.chunk_id
        for c in interleave(contexts_of_documents(rt, corpus, snapshot_id, first_docs), rng)
        if c.chunk_id not in used_chunks
    ]
    rest_pool = (
        []
        if request.doc_ids  # an explicit document subset is never topped up from elsewhere
        else [
            c.chunk_id
            for c in interleave(
                contexts_of_documents(rt, corpus, snapshot_id, set(docs) - first_docs), rng
            )
            if c.chunk_id not in used_chunks
        ]
    )
    have = Counter(c.effective_label for c in existing)
    quotas_met = all(have[lb] >= per_label for lb in LABELS)
    # The first round draws only from changed documents; later rounds top up from the rest.
    first_round = [] if quotas_met else (first_pool or rest_pool)[: gen.contexts_per_round]
    in_first = set(first_round)
    pool = first_round + [c for c in first_pool + rest_pool if c not in in_first]
    rounds = draft_rounds(pool, len(first_round), rounds_at_once(rt), gen.contexts_per_round)
    shard_size = shard_size_for(rt)
    plan = GenerationPlan(
        corpus=corpus,
        run_id=request.run_id,
        snapshot_id=snapshot_id,
        seed=seed,
        targets=dict.fromkeys(LABELS, per_label),
        existing_ids=[c.candidate_id for c in existing],
        previous_version=previous["version"] if previous else None,
        previous_questions=[c.question for c in prev_items if c.candidate_id not in kept_ids],
        pool=pool,
        shards=[r[i : i + shard_size] for r in rounds for i in range(0, len(r), shard_size)],
        rounds=rounds,
        retired=retired,
        params={
            "per_label": per_label,
            "labels": list(request.labels),
            "doc_ids": list(request.doc_ids),
            "llm": redact(rt.settings.model_for(ModelRole.GENERATOR)),
            "models": {
                role.value: redact(rt.settings.model_for(role)) for role in GENERATION_ROLES
            },
        },
    )
    rt.artifacts.put_bytes(plan.key(), json.dumps(asdict(plan), indent=1).encode())
    return plan


def draft_shard(rt: Runtime, corpus: str, run_id: str, chunk_ids: Sequence[str]) -> JsonObject:
    """One mapped unit: statements and questions for these contexts (the generator's calls),
    kept as the shard's draft for :func:`judge_shard`. Needs no judge, so it runs beside the
    judges' calibration. Idempotent."""
    plan = load_plan(rt, corpus, run_id)
    contexts = contexts_by_id(rt, plan, chunk_ids)
    salt = ",".join(chunk_ids)
    cands = draft_candidates(rt, plan, contexts, initial_deficit(rt, plan), salt)
    _put_candidates(rt, generation_draft_key(corpus, run_id, chunk_ids), cands)
    return {"candidates": len(cands), "questions": sum(1 for c in cands if c.question)}


def judge_shard(
    rt: Runtime,
    corpus: str,
    run_id: str,
    chunk_ids: Sequence[str],
    gates: Mapping[str, JsonObject] | None = None,
) -> JsonObject:
    """One mapped unit: the shard's drafted candidates checked, labelled and critiqued under the
    run's ``gates`` (:func:`with_gates`), stored with their status. Idempotent; a shard whose
    drafting stopped (a budget) has no draft and no candidates."""
    cands = _stored_candidates(rt, generation_draft_key(corpus, run_id, chunk_ids))
    if cands is None:
        return {"candidates": 0, "skipped": "the shard has no draft: its drafting stopped"}
    plan = with_gates(rt, load_plan(rt, corpus, run_id), gates)
    label_and_critique(rt, plan, cands)
    TestSetStore(rt.engine).upsert_candidates(cands, corpus=corpus, run_id=run_id)
    return {"candidates": len(cands), "pending": len(pending(cands))}


def with_gates(
    rt: Runtime, plan: GenerationPlan, gates: Mapping[str, JsonObject] | None
) -> GenerationPlan:
    """The plan with the gate decisions its run applies: those the run's calibration step handed
    on (one policy for every shard, whatever lands later), else those of the judges' stored
    calibrations now."""
    return replace(plan, judges=dict(generation_gates(rt) if gates is None else gates))


def run_baseline(rt: Runtime, corpus: str, run_id: str) -> list[QACandidate]:
    """The single-prompt baseline on a seeded sample of the contexts the plan drafted, kept for
    finalize (the plan fixes its contexts, so it runs beside the shards). Idempotent."""
    done = _stored_candidates(rt, generation_baseline_key(corpus, run_id))
    if done is not None:
        return done
    plan = load_plan(rt, corpus, run_id)
    drafted = [cid for contexts in plan.drafted_rounds() for cid in contexts]
    items = baseline(rt, plan, contexts_by_id(rt, plan, drafted))
    _put_candidates(rt, generation_baseline_key(corpus, run_id), items)
    return items


def stored_baseline(rt: Runtime, corpus: str, run_id: str) -> list[QACandidate]:
    """The run's baseline items (none when its step did not run, e.g. stopped by a budget)."""
    return _stored_candidates(rt, generation_baseline_key(corpus, run_id)) or []


def _put_candidates(rt: Runtime, key: str, cands: Sequence[QACandidate]) -> None:
    """Candidates a step hands a later one (a shard's draft, the baseline), as JSON at ``key``."""
    rt.artifacts.put_bytes(key, json.dumps([c.to_json() for c in cands]).encode())


def _stored_candidates(rt: Runtime, key: str) -> list[QACandidate] | None:
    """The candidates :func:`_put_candidates` stored at ``key``; None when nothing was."""
    if not rt.artifacts.exists(key):
        return None
    return [QACandidate.from_json(c) for c in json.loads(rt.artifacts.get_bytes(key))]


def finalize_generation(
    rt: Runtime, corpus: str, run_id: str, gates: Mapping[str, JsonObject] | None = None
) -> GenerationSummary:
    """Unanswerable pairs, dedup, quotas, top-up rounds, version and artifacts, under the run's
    ``gates`` (:func:`with_gates`); the baseline's items are read back (:func:`run_baseline`).

    Every candidate is stored with its status first; then, when more than
    ``generation.max_failed_share`` of them failed (a model error or an unusable reply), no
    version is made and :class:`~ragtrail.failures.EvaluationFailedError` is raised: a set
    made of the few survivors of a dead endpoint would pose as a test set."""
    plan = with_gates(rt, load_plan(rt, corpus, run_id), gates)
    testsets = TestSetStore(rt.engine)
    existing_ids = set(plan.existing_ids)
    existing = testsets.get_candidates(corpus, status=CandidateStatus.ACCEPTED)
    existing = [c for c in existing if c.candidate_id in existing_ids]
    rounds = plan.drafted_rounds()
    round_of = {cid: k for k, contexts in enumerate(rounds) for cid in contexts}
    sharded = [cid for contexts in rounds for cid in contexts]
    # Selection takes candidates in round order (by id within a round), so the surplus of
    # rounds drafted together is what the later rounds made, as when rounds run one by one.
    candidates = sorted(
        (
            undo_finalize(c)
            for c in testsets.get_candidates(corpus, run_id=run_id)
            if c.context.chunk_id in round_of and c.statement_kind != "foreign"
        ),
        key=lambda c: round_of[c.context.chunk_id],
    )
    contexts_used = contexts_by_id(rt, plan, sharded)
    remaining = plan.pool[len(sharded) :]
    outcome = run_rounds(rt, plan, existing, candidates, contexts_used, remaining)
    baseline_items = stored_baseline(rt, corpus, run_id)
    candidates, selected, quota = outcome.candidates, outcome.selected, outcome.quota
    settle(outcome)
    testsets.upsert_candidates(candidates, corpus=corpus, run_id=run_id)
    failed = FailureCount.of(
        "candidates",
        (
            (c.failure_cause or "failed") if c.status == CandidateStatus.FAILED else None
            for c in candidates
        ),
    )
    if failed.exceeds(rt.settings.generation.max_failed_share):
        rt.llm_usage.flush(rt.engine, run_id)
        check_failures(
            "test-set generation",
            [failed],
            max_share=rt.settings.generation.max_failed_share,
            setting="generation.max_failed_share",
            run_id=run_id,
        )
    version = (
        testsets.create_version(
            corpus,
            plan.snapshot_id,
            [c.candidate_id for c in selected],
            parent_version=plan.previous_version,
            run_id=run_id,
            seed=plan.seed,
            params=plan.params,
            counts={"achieved": dict(quota.achieved), "targets": plan.targets},
        )
        if selected
        else None
    )
    summary = generation_summary(rt, plan, candidates, selected, existing, baseline_items, version)
    if version:
        uri = write_artifacts(rt, testsets, version, summary)
        summary = summary.model_copy(update={"artifact_uri": uri})
    rt.llm_usage.flush(rt.engine, run_id)
    return summary


def generate_testset(rt: Runtime, request: GenerationRequest) -> GenerationSummary:
    """The whole generation in process, under the gates of the judges' stored calibrations; the
    ``generate_testset`` DAG runs the same steps as tasks (plan, baseline, shards drafted then
    judged, finalize), beside its calibration step."""
    plan = plan_generation(rt, request)
    gates = generation_gates(rt)
    run_baseline(rt, plan.corpus, plan.run_id)
    for done, shard in enumerate(plan.shards, start=1):
        draft_shard(rt, plan.corpus, plan.run_id, shard)
        judge_shard(rt, plan.corpus, plan.run_id, shard, gates)
        rt.report(ProgressUpdate("generation shards", done, len(plan.shards)))
    return finalize_generation(rt, plan.corpus, plan.run_id, gates)
