"""Test-set generation as a pipeline step: contexts -> candidates -> funnel -> immutable version.

One run, in order:

1. Retire accepted items whose document changed or disappeared since they were generated
   (their lineage names the document's content hash).
2. Keep the previous version's still-valid items (minus labels or documents being regenerated).
3. Draw contexts — chunks of added/updated documents first, then any unused chunk to top up the
   quotas — interleaved across documents, seeded.
4. Rounds until every label's quota is met or the pool is exhausted: statement extraction, one
   question per chosen statement, foreign-context pairs for unanswerable, labelling (only items whose
   observed label matches the requested one go on), the eight critiques, near-duplicate removal,
   then quota selection with a per-document cap.
5. The single-prompt baseline on a seeded sample of contexts, labelled by the same labeller.
6. Every candidate is stored with its final status (accepted, rejected with a reason, or failed with
   the raw output), the version is created (immutable, content-addressed), artifacts are written.

Everything random is seeded from the run's seed, and every model call goes through the
content-addressed cache, so a rerun with the same seed and cache produces the same version with zero
model calls.
"""

from __future__ import annotations

import io
import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ragtrail.generate.baseline import single_prompt_baseline
from ragtrail.generate.critiques import CRITERIA, apply_thresholds, critique_candidates
from ragtrail.generate.labeller import label_candidates
from ragtrail.generate.steps import (
    extract_statements,
    make_candidates,
    make_unanswerable,
    write_questions,
)
from ragtrail.llm import GenerationParams
from ragtrail.records import (
    LABELS,
    STATEMENT_KINDS,
    CandidateStatus,
    Context,
    QACandidate,
)
from ragtrail.runtime import Runtime
from ragtrail.testset.dedup import find_duplicates
from ragtrail.testset.export import to_frame, write_jsonl
from ragtrail.testset.quotas import QuotaResult, select_with_quotas
from ragtrail.testset.store import TestSetStore

KIND_FOR_LABEL = {label: kind for kind, label in STATEMENT_KINDS.items()}
FAILURE_EXAMPLES = 3


@dataclass
class GenerationRequest:
    """What to generate; ``labels``/``doc_ids`` restrict a manual regeneration."""

    corpus: str
    run_id: str
    per_label: int | None = None
    seed: int | None = None
    labels: tuple[str, ...] = ()
    doc_ids: tuple[str, ...] = ()
    snapshot_id: str | None = None


@dataclass
class GenerationPlan:
    """Everything later steps need, stored as a JSON artifact so each step can run elsewhere."""

    corpus: str
    run_id: str
    snapshot_id: str
    seed: int
    targets: dict[str, int]
    existing_ids: list[str]
    previous_version: str | None
    previous_questions: list[str]
    pool: list[str]  # chunk ids in the seeded order they are offered
    shards: list[list[str]]  # the first round's contexts, split for mapped generation
    retired: int
    params: dict[str, Any]

    def key(self) -> str:
        return plan_key(self.corpus, self.run_id)


def plan_key(corpus: str, run_id: str) -> str:
    return f"testsets/{corpus}/runs/{run_id}/plan.json"


def _contexts(rt: Runtime, corpus: str, snapshot_id: str, doc_ids: Iterable[str]) -> list[Context]:
    docs = rt.store.get_documents(corpus)
    min_tokens = rt.settings.generation.min_context_tokens
    out = []
    for doc_id in sorted(doc_ids):
        doc = docs.get(doc_id)
        if doc is None:
            continue
        for chunk in rt.store.get_chunks(corpus, doc_id):
            if chunk.n_tokens >= min_tokens and chunk.kind == "text":
                out.append(
                    Context(
                        corpus=corpus,
                        snapshot_id=snapshot_id,
                        doc_id=doc_id,
                        doc_content_hash=doc.content_hash,
                        chunk_id=chunk.chunk_id,
                        chunk_hash=chunk.content_hash,
                        text=chunk.text,
                        headings=chunk.headings,
                    )
                )
    return out


def _contexts_by_id(rt: Runtime, plan: GenerationPlan, chunk_ids: Iterable[str]) -> list[Context]:
    wanted = list(chunk_ids)
    docs = {cid.rsplit("#", 1)[0] for cid in wanted}
    found = {c.chunk_id: c for c in _contexts(rt, plan.corpus, plan.snapshot_id, docs)}
    return [found[cid] for cid in wanted if cid in found]


def interleave(contexts: Sequence[Context], rng: random.Random) -> list[Context]:
    """Seeded order that takes one chunk per document in turn, so long documents can't dominate."""
    by_doc: dict[str, list[Context]] = defaultdict(list)
    for ctx in contexts:
        by_doc[ctx.doc_id].append(ctx)
    docs = sorted(by_doc)
    rng.shuffle(docs)
    for doc in docs:
        rng.shuffle(by_doc[doc])
    ordered: list[Context] = []
    while any(by_doc.values()):
        for doc in docs:
            if by_doc[doc]:
                ordered.append(by_doc[doc].pop())
    return ordered


def _ids(cands: Iterable[QACandidate]) -> set[str]:
    return {c.candidate_id for c in cands}


def _reject(cands: Iterable[QACandidate], reason: str) -> None:
    for c in cands:
        c.status, c.reject_reason = CandidateStatus.REJECTED, reason


def _pending(cands: Iterable[QACandidate]) -> list[QACandidate]:
    return [c for c in cands if c.status == CandidateStatus.PENDING]


def _params(rt: Runtime, plan: GenerationPlan) -> GenerationParams:
    return GenerationParams(temperature=rt.settings.generation.temperature, seed=plan.seed)


def _rng(plan: GenerationPlan, *salt: object) -> random.Random:
    """A seeded generator per step, so mapped shards are reproducible in any order."""
    return random.Random(json.dumps([plan.seed, plan.run_id, *map(str, salt)]))


def plan_generation(rt: Runtime, request: GenerationRequest) -> GenerationPlan:
    """Retire invalidated items, keep the still-valid ones, order the context pool, shard it.

    A retried plan of the same run returns the stored plan, so every later step sees the same
    contexts, seed and targets.
    """
    gen = rt.settings.generation
    corpus = request.corpus
    if rt.artifacts.exists(plan_key(corpus, request.run_id)):
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
        and c.observed_label not in request.labels
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
        for c in interleave(_contexts(rt, corpus, snapshot_id, first_docs), rng)
        if c.chunk_id not in used_chunks
    ]
    rest_pool = (
        []
        if request.doc_ids  # an explicit document subset is never topped up from elsewhere
        else [
            c.chunk_id
            for c in interleave(_contexts(rt, corpus, snapshot_id, set(docs) - first_docs), rng)
            if c.chunk_id not in used_chunks
        ]
    )
    have = Counter(c.observed_label for c in existing)
    quotas_met = all(have[lb] >= per_label for lb in LABELS)
    # The first round draws only from changed documents; later rounds top up from the rest.
    first_round = [] if quotas_met else (first_pool or rest_pool)[: gen.contexts_per_round]
    in_first = set(first_round)
    pool = first_round + [c for c in first_pool + rest_pool if c not in in_first]
    shard_size = max(1, gen.llm_batch_size)
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
        shards=[first_round[i : i + shard_size] for i in range(0, len(first_round), shard_size)],
        retired=retired,
        params={
            "per_label": per_label,
            "labels": list(request.labels),
            "doc_ids": list(request.doc_ids),
            "llm": gen.llm,
        },
    )
    rt.artifacts.put_bytes(plan.key(), json.dumps(asdict(plan), indent=1).encode())
    return plan


def load_plan(rt: Runtime, corpus: str, run_id: str) -> GenerationPlan:
    return GenerationPlan(**json.loads(rt.artifacts.get_bytes(plan_key(corpus, run_id))))


def _statement_candidates(
    rt: Runtime, plan: GenerationPlan, contexts: list[Context], deficit: dict[str, int], salt: str
) -> list[QACandidate]:
    """Statements -> chosen statements -> questions -> labels -> critiques for some contexts."""
    client, params = rt.llm_client, _params(rt, plan)
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
        sets, rng=_rng(plan, "statements", salt), kinds_wanted=wanted, generator_info=generator
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
    _label_and_critique(rt, plan, cands)
    return cands


def _label_and_critique(rt: Runtime, plan: GenerationPlan, cands: list[QACandidate]) -> None:
    """Label every pending pair; only label matches are critiqued (others are rejected)."""
    client, params = rt.llm_client, _params(rt, plan)
    label_candidates(client, _pending(cands), params)
    matched = []
    for c in _pending(cands):
        if c.observed_label == c.requested_label:
            matched.append(c)
        else:
            _reject([c], f"label_mismatch:{c.requested_label}->{c.observed_label}")
    critique_candidates(client, matched, params)
    apply_thresholds(matched, rt.settings.generation.critique_thresholds)


def generate_shard(
    rt: Runtime, corpus: str, run_id: str, chunk_ids: Sequence[str]
) -> dict[str, Any]:
    """One mapped unit: candidates for these contexts, stored with their status. Idempotent."""
    plan = load_plan(rt, corpus, run_id)
    contexts = _contexts_by_id(rt, plan, chunk_ids)
    deficit = _initial_deficit(rt, plan)
    cands = _statement_candidates(rt, plan, contexts, deficit, salt=",".join(chunk_ids))
    TestSetStore(rt.engine).upsert_candidates(cands, corpus=corpus, run_id=run_id)
    return {"candidates": len(cands), "pending": len(_pending(cands))}


def _initial_deficit(rt: Runtime, plan: GenerationPlan) -> dict[str, int]:
    existing = TestSetStore(rt.engine).get_candidate_rows(plan.existing_ids)
    have = Counter(row["observed_label"] for row in existing.values())
    return {lb: max(0, n - have[lb]) for lb, n in plan.targets.items()}


def _dedup(
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
            _reject([cand], f"duplicate_of:{where}#{dup.of_index}")


FINALIZE_REJECTIONS = ("quota_full", "document_cap", "duplicate_of")


def _undo_finalize(cand: QACandidate) -> QACandidate:
    """A retried finalize starts from the shard results: its own earlier decisions are undone."""
    reason = (cand.reject_reason or "").split(":")[0]
    if cand.status == CandidateStatus.ACCEPTED or (
        cand.status == CandidateStatus.REJECTED and reason in FINALIZE_REJECTIONS
    ):
        cand.status, cand.reject_reason = CandidateStatus.PENDING, None
    return cand


def finalize_generation(rt: Runtime, corpus: str, run_id: str) -> dict[str, Any]:
    """Unanswerable pairs, dedup, quotas, top-up rounds, baseline, version and artifacts."""
    gen = rt.settings.generation
    plan = load_plan(rt, corpus, run_id)
    testsets = TestSetStore(rt.engine)
    existing_ids = set(plan.existing_ids)
    existing = testsets.get_candidates(corpus, status=CandidateStatus.ACCEPTED)
    existing = [c for c in existing if c.candidate_id in existing_ids]
    sharded = [cid for shard in plan.shards for cid in shard]
    sharded_ids = set(sharded)
    candidates = [
        _undo_finalize(c)
        for c in testsets.get_candidates(corpus, run_id=run_id)
        if c.context.chunk_id in sharded_ids and c.statement_kind != "foreign"
    ]
    contexts_used = _contexts_by_id(rt, plan, sharded)
    remaining = plan.pool[len(sharded) :]

    def select(pool: Sequence[QACandidate]) -> QuotaResult:
        return select_with_quotas(
            pool, plan.targets, max_per_document=gen.max_per_document, existing=existing
        )

    selected: list[QACandidate] = list(existing)
    quota = select([])
    for round_no in range(gen.max_rounds):
        deficit = {lb: max(0, n - quota.achieved.get(lb, 0)) for lb, n in plan.targets.items()}
        if round_no > 0:
            if not any(deficit.values()) or not remaining:
                break
            batch, remaining = (
                remaining[: gen.contexts_per_round],
                remaining[gen.contexts_per_round :],
            )
            new_contexts = _contexts_by_id(rt, plan, batch)
            contexts_used += new_contexts
            candidates += _statement_candidates(rt, plan, new_contexts, deficit, f"round{round_no}")
        fresh = [c for c in _pending(candidates) if c.candidate_id not in _ids(selected)]
        _dedup(rt, selected, fresh, plan.previous_questions)
        quota = select(_pending(candidates))
        selected = list(quota.selected)
        missing = plan.targets["unanswerable"] - quota.achieved.get("unanswerable", 0)
        if missing > 0:
            # Questions that did not make the set (quota surplus, other labels) are asked of a
            # foreign context; the same question never appears twice in a version.
            taken = _ids(selected)
            sources = [
                c
                for c in candidates
                if c.question and c.statement_kind != "foreign" and c.candidate_id not in taken
            ]
            known = _ids(candidates)
            foreign = [
                c
                for c in make_unanswerable(
                    sources, contexts_used, _rng(plan, "foreign", round_no), limit=2 * missing
                )
                if c.candidate_id not in known
            ]
            _label_and_critique(rt, plan, foreign)
            candidates += foreign
            _dedup(rt, selected, _pending(foreign), plan.previous_questions)
            quota = select(_pending(candidates))
            selected = list(quota.selected)

    chosen = {c.candidate_id for c in selected}
    for leftover in quota.leftovers:
        if leftover.candidate.candidate_id not in chosen:
            _reject([leftover.candidate], leftover.reason)
    for cand in selected:
        cand.status = CandidateStatus.ACCEPTED
    baseline = _baseline(rt, plan, contexts_used)
    testsets.upsert_candidates(candidates, corpus=corpus, run_id=run_id)
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
    summary = _summary(rt, plan, candidates, selected, existing, baseline, version)
    if version:
        summary["artifact_uri"] = _write_artifacts(rt, testsets, version, summary)
    rt.llm_client.usage.flush(rt.engine, run_id)
    return summary


def generate_testset(rt: Runtime, request: GenerationRequest) -> dict[str, Any]:
    """The whole generation in process; Airflow runs the same plan/shard/finalize as tasks."""
    plan = plan_generation(rt, request)
    for shard in plan.shards:
        generate_shard(rt, plan.corpus, plan.run_id, shard)
    return finalize_generation(rt, plan.corpus, plan.run_id)


def _baseline(rt: Runtime, plan: GenerationPlan, contexts: list[Context]) -> list[QACandidate]:
    """The single-prompt factoid baseline on a seeded sample of the contexts we used."""
    n = rt.settings.generation.baseline_contexts
    if not n or not contexts:
        return []
    sample = _rng(plan, "baseline").sample(contexts, min(n, len(contexts)))
    params = _params(rt, plan)
    items = single_prompt_baseline(rt.llm_client, sample, params)
    label_candidates(rt.llm_client, _pending(items), params)
    return items


def _critique_stats(cands: Sequence[QACandidate]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for label in LABELS:
        rated = [c for c in cands if c.observed_label == label and c.critiques]
        per: dict[str, dict[str, Any]] = {}
        for criterion in CRITERIA:
            ratings = [
                c.critiques[criterion]["rating"]
                for c in rated
                if isinstance(c.critiques.get(criterion, {}).get("rating"), int)
            ]
            hist = [ratings.count(r) for r in range(1, 6)]
            per[criterion] = {
                "n": len(ratings),
                "mean": float(np.mean(ratings)) if ratings else None,
                "hist": hist,
            }
        if rated:
            out[label] = per
    return out


def _failures(cands: Sequence[QACandidate]) -> list[dict[str, Any]]:
    groups: dict[str, list[QACandidate]] = defaultdict(list)
    for c in cands:
        if c.status == CandidateStatus.FAILED:
            groups[f"failed:{(c.failure_cause or 'unknown').split(':')[0]}"].append(c)
        elif c.status == CandidateStatus.REJECTED:
            groups[f"rejected:{(c.reject_reason or 'unknown').split(':')[0]}"].append(c)
    out = []
    for cause, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        examples = [
            (c.raw_outputs[-1] if c.raw_outputs else (c.reject_reason or c.failure_cause or ""))
            for c in items[:FAILURE_EXAMPLES]
        ]
        out.append({"cause": cause, "count": len(items), "examples": examples})
    return out


def _has_reason(cand: QACandidate, prefix: str) -> bool:
    return (cand.reject_reason or "").startswith(prefix) or (cand.failure_cause or "").startswith(
        prefix
    )


def funnel(candidates: Sequence[QACandidate]) -> list[dict[str, Any]]:
    """Counts per acceptance stage, derived from each candidate's final status and reason."""
    parsed = [c for c in candidates if c.question]
    matched = [c for c in parsed if c.observed_label and c.observed_label == c.requested_label]
    passed = [
        c for c in matched if not (_has_reason(c, "critique") or c.status == CandidateStatus.FAILED)
    ]
    deduped = [c for c in passed if not _has_reason(c, "duplicate_of")]
    selected = [c for c in deduped if c.status == CandidateStatus.ACCEPTED]
    stages = {
        "candidates": candidates,
        "parsed": parsed,
        "label match": matched,
        "critiques passed": passed,
        "after dedup": deduped,
        "selected (quotas)": selected,
    }
    return [{"stage": k, "count": len(v)} for k, v in stages.items()]


def _summary(
    rt: Runtime,
    plan: GenerationPlan,
    candidates: list[QACandidate],
    selected: list[QACandidate],
    existing: list[QACandidate],
    baseline: list[QACandidate],
    version: str | None,
) -> dict[str, Any]:
    matrix: dict[str, Counter[str]] = defaultdict(Counter)
    for c in candidates:
        if c.question:
            matrix[c.requested_label][c.observed_label or "failed"] += 1
    usage = rt.llm_client.usage
    usage_rows = [
        {"stage": stage, **asdict(c), "cost_usd": usage.cost_usd(model, c)}
        for (stage, _backend, model), c in sorted(usage.snapshot().items())
    ]
    totals = usage.totals()
    accepted = Counter(c.observed_label for c in selected)
    return {
        "version": version,
        "corpus": plan.corpus,
        "snapshot_id": plan.snapshot_id,
        "run_id": plan.run_id,
        "seed": plan.seed,
        "targets": plan.targets,
        "achieved": {lb: accepted[lb] for lb in LABELS},
        "accepted": {lb: accepted[lb] for lb in LABELS},
        "kept_from_previous": len(existing),
        "retired": plan.retired,
        "funnel": funnel(candidates),
        "label_matrix": {k: dict(v) for k, v in matrix.items()},
        "distribution": {
            "ours": {lb: accepted[lb] for lb in LABELS},
            "baseline": dict(Counter(c.observed_label for c in baseline if c.observed_label)),
        },
        "critiques": _critique_stats(candidates),
        "usage": usage_rows,
        "model_calls": totals.calls,
        "cache_hits": totals.cache_hits,
        "failures": _failures(candidates),
        "backends": rt.backends(),
    }


def _write_artifacts(
    rt: Runtime, testsets: TestSetStore, version: str, summary: dict[str, Any]
) -> str:
    items = testsets.version_items(version)
    qids = testsets.version_qids(version)
    prefix = f"testsets/{summary['corpus']}/{version}"
    frame = to_frame(items, qids=qids)
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    uri = rt.artifacts.put_bytes(f"{prefix}/items.parquet", buf.getvalue())
    jsonl = rt.settings.home / "testsets" / version / "items.jsonl"
    write_jsonl(items, jsonl, qids=qids)
    rt.artifacts.put_file(f"{prefix}/items.jsonl", jsonl)
    rt.artifacts.put_bytes(
        f"{prefix}/generation.json", json.dumps(summary, indent=1, default=str).encode()
    )
    testsets.set_artifact_uri(version, uri)
    return uri


def load_generation_summary(rt: Runtime, corpus: str, version: str) -> dict[str, Any]:
    return json.loads(rt.artifacts.get_bytes(f"testsets/{corpus}/{version}/generation.json"))


def check_testset_quality(
    rt: Runtime, summary: dict[str, Any], out_dir: Any
) -> list[dict[str, Any]]:
    """GX on a test-set version: item invariants (fail) and label balance vs quotas (warn).

    Raises :class:`QualityGateError` when an item invariant fails, so a broken set is never
    announced to evaluation.
    """
    from ragtrail.quality.runner import QualityRunner, enforce
    from ragtrail.quality.suites import (
        balance_frame,
        prepare_testset,
        testset_balance_suite,
        testset_suite,
    )

    testsets = TestSetStore(rt.engine)
    version = summary["version"]
    items = testsets.version_items(version)
    frame = to_frame(items, qids=testsets.version_qids(version))
    expected = [sum(crit.applies_to(c) for crit in CRITERIA.values()) for c in items]
    runner = QualityRunner(out_dir)
    results = [
        runner.validate("testset", prepare_testset(frame, expected), testset_suite()),
        runner.validate(
            "testset_balance",
            balance_frame(summary["achieved"], summary["targets"]),
            testset_balance_suite(rt.settings.generation.balance_tolerance),
        ),
    ]
    runner.build_docs()
    enforce(results)
    return [r.as_dict() for r in results]
