"""What a generation run works from: the request, the stored plan, and the contexts it draws.

The plan is a JSON artifact so that each mapped step (shard, finalize) can run in another process
and still see the same contexts, seed and targets.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ragtrail.artifact_keys import generation_plan_key
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import Context, GateMode
from ragtrail.runtime import Runtime


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
    shards: list[list[str]]  # the drafted rounds' contexts, split for mapped generation
    retired: int
    params: JsonObject
    # judge name -> its gate decision (GateDecision.as_dict()): the gates the run's calibration
    # step fixed, set on the loaded plan when shards are judged and finalized (with_gates), so
    # every shard applies the same policy even if a calibration lands mid-run; empty when stored
    judges: dict[str, JsonObject] = field(default_factory=dict)
    # the contexts of each round drafted before any selection (generation.rounds_at_once), in
    # round order; empty in plans made before rounds were drafted together: one round, the shards
    rounds: list[list[str]] = field(default_factory=list)

    def drafted_rounds(self) -> list[list[str]]:
        """The contexts of each round the shards drafted, in round order."""
        return self.rounds or [[cid for shard in self.shards for cid in shard]]

    def gates(self, judge: str) -> bool:
        """Whether ``judge`` may reject items in this run (no decision recorded: it advises)."""
        return self.judges.get(judge, {}).get("mode") == GateMode.GATE

    def key(self) -> str:
        return generation_plan_key(self.corpus, self.run_id)


def load_plan(rt: Runtime, corpus: str, run_id: str) -> GenerationPlan:
    return GenerationPlan(**json.loads(rt.artifacts.get_bytes(generation_plan_key(corpus, run_id))))


def contexts_of_documents(
    rt: Runtime, corpus: str, snapshot_id: str, doc_ids: Iterable[str]
) -> list[Context]:
    """The text chunks of ``doc_ids`` long enough to generate from, in document order."""
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
                        language=doc.language,
                    )
                )
    return out


def contexts_by_id(rt: Runtime, plan: GenerationPlan, chunk_ids: Iterable[str]) -> list[Context]:
    """The contexts of ``chunk_ids`` (in that order; chunks no longer usable are skipped)."""
    wanted = list(chunk_ids)
    docs = {cid.rsplit("#", 1)[0] for cid in wanted}
    found = {c.chunk_id: c for c in contexts_of_documents(rt, plan.corpus, plan.snapshot_id, docs)}
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


def step_rng(plan: GenerationPlan, *salt: object) -> random.Random:
    """A generator per step, seeded by the plan's seed and the step alone: mapped shards are
    reproducible in any order, and the same seed on the same corpus draws the same statements
    in any run (the run id seeds nothing; a new draw is a new seed)."""
    return random.Random(json.dumps([plan.seed, *map(str, salt)]))
