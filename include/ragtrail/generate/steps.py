"""Balanced QA generation by statement extraction (METHODS §2), as batched LLM stages.

The answer is grounded first and the question written last:

1. :func:`extract_statements` — per context a theme and up to five facts, then (where at least
   two facts came back) summary and conclusion statements built from those facts;
2. :func:`make_candidates` — a seeded choice of statements, one :class:`QACandidate` each, whose
   requested label follows from the statement kind (:data:`ragtrail.records.STATEMENT_KINDS`);
3. :func:`write_questions` — one search-style question per candidate; the statement is the answer;
4. :func:`make_unanswerable` — a question paired with a plausible context from another document.

Each function calls :meth:`LLMClient.run` once per stage with every input of that stage, so the
backend sees whole batches and usage is accounted per stage. Nothing is dropped: a failed call is
recorded on the statement set or the candidate with its cause and the raw model output.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from ragtrail.generate.prompts import (
    CONCLUSIONS,
    FACTS,
    FACTS_EXTRACTIVE,
    QUESTION,
    SUMMARIES,
    TOKEN_BUDGETS,
    DerivedInput,
    FactsInput,
    FactsOutput,
    QuestionInput,
    statement_key,
    strip_bullet,
)
from ragtrail.llm.client import CallOutcome, GenerationParams, LLMClient
from ragtrail.llm.prompts import Prompt
from ragtrail.llm.together import together
from ragtrail.records import (
    STATEMENT_KINDS,
    CandidateStatus,
    Context,
    QACandidate,
    StatementKind,
    sha256_text,
)
from ragtrail.text import content_words

__all__ = [
    "DERIVED_KINDS",
    "GENERATED_KINDS",
    "MIN_SUPPORT",
    "STAGES",
    "DroppedStatement",
    "PromptFailure",
    "StatementSet",
    "candidate_id",
    "clean_statements",
    "extract_statements",
    "failure_from_outcome",
    "jaccard",
    "lexical_support",
    "make_candidates",
    "make_unanswerable",
    "params_for",
    "tokens",
    "write_questions",
]

STAGES: dict[str, str] = {
    "facts": "generate.facts",
    "summaries": "generate.summaries",
    "conclusions": "generate.conclusions",
    "question": "generate.question",
}
"""Prompt name -> usage-accounting stage name."""

GENERATED_KINDS: tuple[str, ...] = (
    StatementKind.FACT,
    StatementKind.SUMMARY,
    StatementKind.CONCLUSION,
)
"""Statement kinds extracted from a context, in the (fixed) order candidates are drawn."""

DERIVED_KINDS: dict[str, str] = {
    StatementKind.SUMMARY: "summaries",
    StatementKind.CONCLUSION: "conclusions",
}
"""Derived statement kind -> the prompt that writes it."""

MIN_FACTS_FOR_DERIVED = 2
"""Summaries and conclusions combine several facts, so a context needs at least this many."""

UNANSWERABLE_POOL = 5
"""Foreign contexts are drawn among this many with the highest lexical overlap."""

MIN_SUPPORT: dict[str, float] = {
    StatementKind.FACT: 0.5,
    StatementKind.SUMMARY: 0.5,
    StatementKind.CONCLUSION: 0.3,
}
"""Least share of a statement's content words that must occur in its context, per kind.

A cheap grounding check before any question is written: a small model drifts into its worked
example or into generic filler ("X is a policy that ..."), and such statements share few words
with the context. Conclusions may word an inference anew, so they get a lower bar.
"""


@dataclass(frozen=True)
class PromptFailure:
    """A failed LLM call: the cause, the client's error message and every raw attempt."""

    cause: str
    error: str | None
    raw: tuple[str, ...]


@dataclass(frozen=True)
class DroppedStatement:
    """A statement the model wrote that was not kept, and why (kept for audit, never silent)."""

    kind: str
    text: str
    reason: str


@dataclass
class StatementSet:
    """Everything statement extraction produced for one context (METHODS §2 steps 1-3)."""

    context: Context
    theme: str = ""
    facts: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    conclusions: list[str] = field(default_factory=list)
    failures: dict[str, PromptFailure] = field(default_factory=dict)  # prompt name -> failure
    dropped: list[DroppedStatement] = field(default_factory=list)
    facts_prompt: Prompt[FactsInput, FactsOutput] = FACTS  # which facts prompt produced them

    @property
    def ok(self) -> bool:
        """Whether facts were extracted (the base every other statement kind builds on)."""
        return "facts" not in self.failures and bool(self.facts)

    def statements(self, kind: str) -> list[str]:
        """The statements of one kind: ``fact``, ``summary`` or ``conclusion``."""
        by_kind = {
            StatementKind.FACT: self.facts,
            StatementKind.SUMMARY: self.summaries,
            StatementKind.CONCLUSION: self.conclusions,
        }
        try:
            return by_kind[kind]
        except KeyError:
            raise ValueError(f"unknown statement kind {kind!r}; known: {GENERATED_KINDS}") from None


# --------------------------------------------------------------------------- helpers


def params_for(
    prompt_name: str,
    params: GenerationParams | None,
    budgets: Mapping[str, int] | None = None,
) -> GenerationParams:
    """Decoding parameters for one prompt: ``params`` with the prompt's token budget.

    ``max_new_tokens`` comes from ``budgets`` (default :data:`TOKEN_BUDGETS`; critiques share the
    key ``"critique"``) because one call of a step runs several prompts with different output
    lengths. Prompts without a budget keep ``params.max_new_tokens``.
    """
    base = params or GenerationParams()
    table = TOKEN_BUDGETS if budgets is None else {**TOKEN_BUDGETS, **budgets}
    key = "critique" if prompt_name.startswith("critique_") else prompt_name
    if key in table:
        return replace(base, max_new_tokens=int(table[key]))
    return base


def failure_from_outcome(outcome: CallOutcome[Any]) -> PromptFailure:
    """A :class:`PromptFailure` holding what a failed :class:`CallOutcome` knows."""
    cause = str(outcome.cause) if outcome.cause is not None else "unknown"
    return PromptFailure(cause=cause, error=outcome.error, raw=tuple(outcome.raw_texts))


def clean_statements(statements: Iterable[str], exclude: Iterable[str] = ()) -> list[str]:
    """Statements without bullet marks, blanks and duplicates (case- and space-insensitive).

    A statement equal to one in ``exclude`` (e.g. a "conclusion" that merely copies a fact) is
    dropped too: it would only yield a mislabelled question.
    """
    seen = {statement_key(s) for s in exclude}
    out: list[str] = []
    for raw in statements:
        text = strip_bullet(raw)
        key = statement_key(text)
        if not key or key in seen:
            continue
        seen.add(key)
        out.append(text)
    return out


def lexical_support(statement: str, context_tokens: frozenset[str]) -> float:
    """Share of the statement's content words (see :func:`tokens`) found in the context."""
    words = tokens(statement)
    return len(words & context_tokens) / len(words) if words else 0.0


def _grounded(
    sset: StatementSet,
    kind: str,
    statements: Sequence[str],
    min_support: Mapping[str, float],
) -> list[str]:
    """The statements with enough lexical support; the others go to ``sset.dropped``."""
    bar = float(min_support.get(kind, 0.0))
    if bar <= 0:
        return list(statements)
    ctx_tokens = tokens(sset.context.text + " " + " ".join(sset.context.headings))
    kept: list[str] = []
    for text in statements:
        support = lexical_support(text, ctx_tokens)
        if support >= bar:
            kept.append(text)
        else:
            reason = f"low_support:{support:.2f}<{bar:.2f}"
            sset.dropped.append(DroppedStatement(kind, text, reason))
    return kept


def _headings(context: Context) -> str:
    return " > ".join(context.headings)


# --------------------------------------------------------------------------- step 1-3


def extract_statements(
    client: LLMClient,
    contexts: Sequence[Context],
    params: GenerationParams | None = None,
    *,
    budgets: Mapping[str, int] | None = None,
    min_support: Mapping[str, float] | None = None,
    extractive: bool = False,
) -> list[StatementSet]:
    """Theme and facts for every context, then summaries and conclusions where possible.

    Three stages (facts, summaries, conclusions), each one batched call; summaries and
    conclusions at once on a concurrent backend. Statements sharing too
    few words with their context (``min_support``, default :data:`MIN_SUPPORT`; 0 disables) are
    moved to ``dropped``; a facts reply left with no statement counts as a failure (cause
    ``ungrounded``). Summaries and conclusions are asked only for contexts with at least
    :data:`MIN_FACTS_FOR_DERIVED` facts; a context with fewer simply gets none (short contexts
    cannot support those kinds, METHODS §2). One :class:`StatementSet` per context, in order;
    failed calls are in ``failures`` with their raw output. ``extractive`` picks facts among the
    context's own sentences (:data:`FACTS_EXTRACTIVE`, for small models) instead of rewording them.
    """
    support = MIN_SUPPORT if min_support is None else {**MIN_SUPPORT, **min_support}
    facts_prompt = FACTS_EXTRACTIVE if extractive else FACTS
    sets = [StatementSet(context=c, facts_prompt=facts_prompt) for c in contexts]
    fact_outs = client.run(
        facts_prompt,
        [FactsInput(context=c.text, headings=_headings(c)) for c in contexts],
        stage=STAGES["facts"],
        params=params_for("facts", params, budgets),
    )
    for sset, out in zip(sets, fact_outs, strict=True):
        if out.ok and out.value is not None:
            sset.theme = out.value.theme
            sset.facts = _grounded(
                sset, StatementKind.FACT, clean_statements(out.value.statements), support
            )
            if not sset.facts:
                sset.failures["facts"] = PromptFailure(
                    cause="ungrounded",
                    error="no statement shares enough words with the context",
                    raw=tuple(out.raw_texts),
                )
        else:
            sset.failures["facts"] = failure_from_outcome(out)

    eligible = [s for s in sets if s.ok and len(s.facts) >= MIN_FACTS_FOR_DERIVED]
    derived_inputs = [
        DerivedInput(context=s.context.text, theme=s.theme, facts=list(s.facts)) for s in eligible
    ]
    derived = (
        [
            (SUMMARIES, "summaries", StatementKind.SUMMARY),
            (CONCLUSIONS, "conclusions", StatementKind.CONCLUSION),
        ]
        if eligible
        else []
    )
    # Summaries and conclusions both build on the facts only: on a concurrent backend, at once.
    all_outs = together(
        [
            partial(
                client.run,
                prompt,
                derived_inputs,
                stage=STAGES[prompt.name],
                params=params_for(prompt.name, params, budgets),
            )
            for prompt, _, _ in derived
        ],
        concurrent=client.concurrent,
    )
    for (prompt, attr, kind), outs in zip(derived, all_outs, strict=True):
        for sset, out in zip(eligible, outs, strict=True):
            if out.ok and out.value is not None:
                cleaned = clean_statements(out.value.statements, exclude=sset.facts)
                setattr(sset, attr, _grounded(sset, kind, cleaned, support))
            else:
                sset.failures[prompt.name] = failure_from_outcome(out)
    return sets


# --------------------------------------------------------------------------- candidates


def prompt_chain(kind: str, facts_prompt: Prompt[Any, Any] = FACTS) -> dict[str, str]:
    """``{prompt name: version}`` of the prompts a candidate of this statement kind went through."""
    chain: list[Prompt[Any, Any]] = [facts_prompt]
    if kind in DERIVED_KINDS:
        chain.append(SUMMARIES if kind == StatementKind.SUMMARY else CONCLUSIONS)
    chain.append(QUESTION)
    return {p.name: p.version for p in chain}


def candidate_id(
    chunk_hash: str,
    kind: str,
    statement: str,
    versions: Mapping[str, str],
    *,
    source_chunk_hash: str | None = None,
) -> str:
    """Content address of a candidate: 24 hex digits of SHA-256 over what determines it.

    The chunk's content hash, the statement kind and text, and the prompt versions; so the same
    seed and cache regenerate the same ids, and a changed prompt yields new ones. A ``foreign``
    (unanswerable) candidate passes its question as ``statement`` and the hash of the chunk the
    question was written from as ``source_chunk_hash``.
    """
    parts: list[Any] = [chunk_hash, kind, statement, dict(sorted(versions.items()))]
    if source_chunk_hash is not None:
        parts.append(source_chunk_hash)
    material = json.dumps(
        parts,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return sha256_text(material)[:24]


def make_candidates(
    statement_sets: Sequence[StatementSet],
    *,
    rng: random.Random,
    kinds_wanted: Mapping[str, int] | None = None,
    generator_info: Mapping[str, Any] | None = None,
) -> list[QACandidate]:
    """One candidate per chosen statement, with ``requested_label`` from the statement kind.

    ``kinds_wanted`` maps a statement kind (``fact``, ``summary``, ``conclusion``) to the total
    number of candidates wanted over all contexts; ``None`` takes every statement. The choice is
    seeded by ``rng`` and spread over contexts: contexts are visited in shuffled order, round after
    round, taking one (shuffled) statement of the kind from each until the count is reached, so no
    context dominates. Fewer are returned when fewer statements exist. ``generator_info`` (backend,
    model, seed...) is copied into each candidate's ``generator`` with the prompt versions.
    """
    if kinds_wanted is not None:
        unknown = set(kinds_wanted) - set(GENERATED_KINDS)
        if unknown:
            raise ValueError(
                f"kinds_wanted has unknown kinds {sorted(unknown)}; use {GENERATED_KINDS} "
                "(unanswerable candidates come from make_unanswerable)"
            )
    usable = [s for s in statement_sets if s.ok]
    candidates: list[QACandidate] = []
    for kind in GENERATED_KINDS:
        want = None if kinds_wanted is None else int(kinds_wanted.get(kind, 0))
        if want is not None and want <= 0:
            continue
        for sset, statement in _round_robin(usable, kind, want, rng):
            versions = prompt_chain(kind, sset.facts_prompt)
            info = {**(generator_info or {}), "prompts": versions}
            candidates.append(
                QACandidate(
                    candidate_id=candidate_id(sset.context.chunk_hash, kind, statement, versions),
                    context=sset.context,
                    statement_kind=kind,
                    requested_label=STATEMENT_KINDS[kind],
                    theme=sset.theme,
                    statement=statement,
                    generator=info,
                )
            )
    return candidates


def _round_robin(
    sets: Sequence[StatementSet], kind: str, want: int | None, rng: random.Random
) -> list[tuple[StatementSet, str]]:
    """Seeded, context-balanced choice of ``want`` statements of one kind (all if None)."""
    queues = [(s, list(s.statements(kind))) for s in sets if s.statements(kind)]
    rng.shuffle(queues)
    for _, items in queues:
        rng.shuffle(items)
    chosen: list[tuple[StatementSet, str]] = []
    while queues and (want is None or len(chosen) < want):
        for sset, items in queues:
            if want is not None and len(chosen) >= want:
                break
            chosen.append((sset, items.pop()))
        queues = [(s, items) for s, items in queues if items]
    return chosen


# --------------------------------------------------------------------------- step 4


def write_questions(
    client: LLMClient,
    candidates: Sequence[QACandidate],
    params: GenerationParams | None = None,
    *,
    budgets: Mapping[str, int] | None = None,
) -> None:
    """Write the question of every pending candidate that has a statement and no question yet.

    One batched stage. The statement becomes the answer. A failed call marks the candidate
    ``FAILED`` with ``failure_cause = "question_failed:<cause>"`` and keeps the raw outputs.
    """
    todo = [
        c
        for c in candidates
        if c.status is CandidateStatus.PENDING and c.statement and not c.question
    ]
    if not todo:
        return
    outs = client.run(
        QUESTION,
        [QuestionInput(statement=c.statement, theme=c.theme) for c in todo],
        stage=STAGES["question"],
        params=params_for(QUESTION.name, params, budgets),
    )
    for cand, out in zip(todo, outs, strict=True):
        cand.raw_outputs.extend(out.raw_texts)
        if out.ok and out.value is not None:
            cand.question = out.value.question
            cand.answer = cand.statement
        else:
            fail = failure_from_outcome(out)
            cand.status = CandidateStatus.FAILED
            cand.failure_cause = f"question_failed:{fail.cause}"


# --------------------------------------------------------------------------- unanswerable


def tokens(text: str) -> frozenset[str]:
    """Content words of ``text`` for overlap scoring: :func:`ragtrail.text.content_words`
    (folded, no stop words, no one-letter words)."""
    return content_words(text, min_length=2)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two token sets (0.0 when both are empty)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def make_unanswerable(
    candidates_with_questions: Sequence[QACandidate],
    contexts: Sequence[Context],
    rng: random.Random,
    *,
    limit: int | None = None,
    pool: int = UNANSWERABLE_POOL,
) -> list[QACandidate]:
    """Pair questions with contexts from *other* documents to request ``unanswerable`` items.

    Sources are candidates with a question (failed ones are skipped); ``limit`` takes a seeded
    sample of them. For each source, the contexts of every other document are ranked by the
    token-set Jaccard overlap with the question (ties by chunk id) and one of the top ``pool`` is
    drawn with ``rng``, so the pairing is plausible (shares vocabulary) yet foreign. The new
    candidate has statement kind ``foreign``, an empty answer and ``source_chunk_id`` set; it only
    counts once the labeller confirms it as unanswerable (the caller's quota logic). Sources with
    no context from another document are skipped.
    """
    if pool < 1:
        raise ValueError("pool must be >= 1")
    sources = [
        c
        for c in candidates_with_questions
        if c.question and c.status is not CandidateStatus.FAILED
    ]
    if limit is not None and limit < len(sources):
        sources = rng.sample(sources, max(0, limit))
    ordered = sorted(contexts, key=lambda c: c.chunk_id)
    ordered_tokens = [tokens(c.text + " " + " ".join(c.headings)) for c in ordered]
    out: list[QACandidate] = []
    for src in sources:
        q_tokens = tokens(src.question)
        scored = [
            (-jaccard(q_tokens, ctx_tokens), ctx.chunk_id, n)
            for n, (ctx, ctx_tokens) in enumerate(zip(ordered, ordered_tokens, strict=True))
            if ctx.doc_id != src.context.doc_id
        ]
        if not scored:
            continue
        top = sorted(scored)[:pool]
        target = ordered[rng.choice(top)[2]]
        versions = {
            **dict(src.generator.get("prompts", {})),
            QUESTION.name: QUESTION.version,
        }
        info = {
            **{k: v for k, v in src.generator.items() if k != "prompts"},
            "prompts": versions,
            "source_candidate_id": src.candidate_id,
        }
        out.append(
            QACandidate(
                candidate_id=candidate_id(
                    target.chunk_hash,
                    StatementKind.FOREIGN,
                    src.question,
                    versions,
                    source_chunk_hash=src.context.chunk_hash,
                ),
                context=target,
                statement_kind=StatementKind.FOREIGN,
                requested_label=STATEMENT_KINDS[StatementKind.FOREIGN],
                theme=src.theme,
                statement=src.statement,
                question=src.question,
                answer="",
                source_chunk_id=src.context.chunk_id,
                generator=info,
            )
        )
    return out
