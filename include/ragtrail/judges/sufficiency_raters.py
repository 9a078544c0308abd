"""Sufficiency raters: is a context enough to answer a question? (METHODS §9)

A context is *sufficient* when a plausible answer to the question follows from it alone (reasoning
across several of its parts allowed, unsupported leaps not). Five raters answer that, each a
:class:`~ragtrail.judges.contract.Judge` of role SUFFICIENCY with the categories
:data:`SUFFICIENT` / :data:`INSUFFICIENT`, so each is calibrated like every other judge:

* :class:`LlmSufficiencyJudge` asks an LLM, zero-shot (``sufficiency.llm``) or with one worked
  example (``sufficiency.llm_1shot``);
* :class:`ChunkedSufficiencyJudge` (``sufficiency.chunked``) asks an inner rater about every
  ``chunk_tokens`` window of the context: sufficient when any window is;
* :class:`ContainsAnswerJudge` (``sufficiency.contains_answer``) is the string baseline: does a
  gold answer occur in the context, after normalisation;
* :class:`EntailmentSufficiencyJudge` (``sufficiency.entailment``) asks an entailment judge
  whether some window of the context entails the gold answer to the question.

Input convention: ``JudgeInput(question=..., context=..., answer=...)`` where ``answer`` holds
the gold answer(s), one per line, and ``""`` when there is none. The raters that need a gold
answer (contains, entailment) rate an item without one as insufficient ("no gold answer to look
for"): an unanswerable question has no gold answer, so nothing in any context can answer it. An
empty question or context is a failed verdict (nothing to rate), never a guessed category.

Contexts are cut to ``max_context_tokens`` (default 6000) before rating; tokens are counted by a
:class:`~ragtrail.ingest.chunk.Tokenizer` (the pipeline uses the embedder's tokenizer, the unit
every chunk size in ragtrail is measured in), and a verdict on a cut context starts its reason
with "context truncated from N to B tokens" so the cut is recorded with the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from ragtrail.ingest.chunk import Tokenizer
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.contract import (
    SUPPORTED,
    Judge,
    JudgeInput,
    JudgeRole,
    JudgeSpec,
    Verdict,
    VerdictType,
    judge_version,
)
from ragtrail.judges.entailment import failed_verdict, judge_nonempty
from ragtrail.judges.llm_judge import LLM_BACKEND, llm_judge_version
from ragtrail.judges.nli import BACKENDS as NLI_BACKENDS
from ragtrail.llm.client import CallOutcome, GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS, Prompt
from ragtrail.records import SufficiencyRaterName
from ragtrail.text import text_key

SUFFICIENT = "sufficient"
INSUFFICIENT = "insufficient"
SUFFICIENCY_CATEGORIES: tuple[str, ...] = (SUFFICIENT, INSUFFICIENT)

LLM_RATER = SufficiencyRaterName.LLM
LLM_1SHOT_RATER = SufficiencyRaterName.LLM_1SHOT
CHUNKED_RATER = SufficiencyRaterName.CHUNKED
CONTAINS_RATER = SufficiencyRaterName.CONTAINS_ANSWER
ENTAILMENT_RATER = SufficiencyRaterName.ENTAILMENT

DEFAULT_MAX_CONTEXT_TOKENS = 6000
DEFAULT_CHUNK_TOKENS = 1600
DEFAULT_ENTAILMENT_THRESHOLD = 0.05
"""METHODS §9: an NLI model's max-over-chunks P(entailment) of the gold answer; low, since any
entailment signal at all counts (the rater is meant to be precise, not to find every case)."""

STAGE = "judge.sufficiency"
DEFAULT_PARAMS = GenerationParams(max_new_tokens=96, temperature=0.0, seed=0)
"""Greedy; 96 tokens hold the JSON with a reason of about :data:`MAX_REASON_CHARS`."""
MAX_REASON_CHARS = 200
"""Guided decoding closes the reason after this many characters, so a small model that rambles
still reaches its decision."""

NO_GOLD_ANSWER = "no gold answer to look for"
PROBABILITY_BACKENDS = frozenset(NLI_BACKENDS.values())
"""Entailment backends whose ``Verdict.score`` is a probability of entailment (NLI models)."""


# ----------------------------------------------------------------------------- token budgets


@dataclass(frozen=True)
class Truncation:
    """``text`` cut to at most ``budget`` tokens; ``tokens`` is the count before the cut."""

    text: str
    truncated: bool
    tokens: int
    budget: int

    @property
    def note(self) -> str:
        """What a verdict records about the cut ("" when nothing was cut)."""
        if not self.truncated:
            return ""
        return f"context truncated from {self.tokens} to {self.budget} tokens"


def _check_budget(value: int, what: str) -> int:
    if value < 1:
        raise ValueError(f"{what} must be >= 1 token, got {value}")
    return value


def truncate_to_tokens(text: str, budget: int, counter: Tokenizer) -> Truncation:
    """The longest prefix of ``text`` that ends on a token boundary within ``budget`` tokens."""
    _check_budget(budget, "a token budget")
    offsets = counter.offsets(text)
    if len(offsets) <= budget:
        return Truncation(text, False, len(offsets), budget)
    return Truncation(text[: offsets[budget - 1][1]], True, len(offsets), budget)


def split_token_chunks(text: str, chunk_tokens: int, counter: Tokenizer) -> list[str]:
    """Consecutive windows of ``chunk_tokens`` tokens each; joined, they give back ``text``.

    A window starts where its first token starts (the previous window keeps the whitespace
    between), the first window at 0 and the last runs to the end of ``text``. Empty text has no
    windows; text with no tokens (only whitespace) is one window.
    """
    _check_budget(chunk_tokens, "chunk_tokens")
    if not text:
        return []
    offsets = counter.offsets(text)
    starts = [0, *(offsets[i][0] for i in range(chunk_tokens, len(offsets), chunk_tokens))]
    ends = [*starts[1:], len(text)]
    return [text[start:end] for start, end in zip(starts, ends, strict=True)]


def gold_answers(answer: str) -> list[str]:
    """The gold answers in ``JudgeInput.answer`` (one per non-blank line)."""
    return [line.strip() for line in answer.splitlines() if line.strip()]


# ------------------------------------------------------------------------------- shared parts


def sufficiency_spec(**fields: Any) -> JudgeSpec:
    """The spec of a sufficiency rater: role SUFFICIENCY, CATEGORY verdicts over the two classes;
    ``fields`` are the rest of :class:`JudgeSpec` (name, version, backend, model, ...)."""
    return JudgeSpec(
        role=JudgeRole.SUFFICIENCY,
        verdict_type=VerdictType.CATEGORY,
        categories=SUFFICIENCY_CATEGORIES,
        **fields,
    )


def input_problem(item: JudgeInput) -> str | None:
    """Why ``item`` cannot be rated (an empty question or context), or None when it can."""
    return item.blank("question", "context")


def join_reason(*parts: str) -> str:
    """The non-empty parts of a reason, separated by "; "."""
    return "; ".join(p for p in parts if p)


def with_note(verdict: Verdict, note: str) -> Verdict:
    """``verdict`` with ``note`` (e.g. a truncation) put in front of its reason."""
    if not note:
        return verdict
    return Verdict(
        judge=verdict.judge,
        value=verdict.value,
        score=verdict.score,
        reason=join_reason(note, verdict.reason),
        error=verdict.error,
        raw=verdict.raw,
    )


def judge_groups(judge: Judge, groups: Sequence[Sequence[JudgeInput]]) -> list[list[Verdict]]:
    """``judge``'s verdicts for every group of inputs, asked in one batched call (none when all
    groups are empty) and handed back group by group."""
    flat = [item for group in groups for item in group]
    verdicts = judge.judge(flat) if flat else []
    if len(verdicts) != len(flat):
        raise RuntimeError(f"{judge.spec.ref}: {len(verdicts)} verdicts for {len(flat)} items")
    out, start = [], 0
    for group in groups:
        out.append(list(verdicts[start : start + len(group)]))
        start += len(group)
    return out


# -------------------------------------------------------------------------------- LLM rater


class SufficiencyInput(BaseModel):
    """A question and the only context the model may use to answer it."""

    question: str
    context: str


class SufficiencyOutput(BaseModel):
    """The model's reasoning first (it decides after writing it), then the decision."""

    reason: str
    sufficient: bool


def short_reason_schema(_inp: SufficiencyInput) -> JsonObject:
    """What guided decoding enforces: the output schema with the reason capped in length."""
    schema = SufficiencyOutput.model_json_schema()
    schema["properties"]["reason"] = {"type": "string", "maxLength": MAX_REASON_CHARS}
    return schema


_INSTRUCTION = (
    "You check whether a context is enough to answer a question. Use only the context, not "
    "what you know yourself. The context is sufficient when a plausible answer to the question "
    "can be worked out from it: the answer may be stated outright or follow by combining "
    "several statements of the context, but every step must be backed by the context, with no "
    "guessing in between. When the question or the context could mean more than one thing, "
    "the context is sufficient only if it settles which meaning applies. Whether an answer is "
    "true in the world does not matter, only whether this context supports one. First give a "
    "short reason, then decide: sufficient true or false."
)

_EXAMPLE = SufficiencyInput(
    question="Which platform does the ferry to Harbor Island leave from on Sundays?",
    context=(
        "Ferries to Harbor Island run every hour. On weekdays they leave from platform 2. "
        "At weekends the service moves to the north pier, platform 6."
    ),
)
_EXAMPLE_OUTPUT = SufficiencyOutput(
    reason="Sunday is a weekend day, and at weekends the ferry leaves from platform 6.",
    sufficient=True,
)

SUFFICIENCY_PROMPT: Prompt[SufficiencyInput, SufficiencyOutput] = Prompt(
    name="sufficiency.rate",
    version="1",
    instruction=_INSTRUCTION,
    input_model=SufficiencyInput,
    output_model=SufficiencyOutput,
    document_fields=frozenset({"context"}),
    decoding_schema=short_reason_schema,
)
SUFFICIENCY_1SHOT_PROMPT: Prompt[SufficiencyInput, SufficiencyOutput] = Prompt(
    name="sufficiency.rate_1shot",
    version="1",
    instruction=_INSTRUCTION + " A worked example comes first.",
    input_model=SufficiencyInput,
    output_model=SufficiencyOutput,
    examples=[(_EXAMPLE, _EXAMPLE_OUTPUT)],
    document_fields=frozenset({"context"}),
    decoding_schema=short_reason_schema,
)
SUFFICIENCY_PROMPTS = (SUFFICIENCY_PROMPT, SUFFICIENCY_1SHOT_PROMPT)
for _prompt in SUFFICIENCY_PROMPTS:
    if _prompt.key not in PROMPTS:  # the process-wide registry, for listing and auditing
        PROMPTS.register(_prompt)


def outcome_verdict(ref: str, outcome: CallOutcome[SufficiencyOutput]) -> Verdict:
    """The verdict of one LLM call: the decision with the model's reason, or a failure that keeps
    every raw reply (the client has already retried and repaired)."""
    if outcome.ok and outcome.value is not None:
        value = SUFFICIENT if outcome.value.sufficient else INSUFFICIENT
        return Verdict(judge=ref, value=value, reason=outcome.value.reason.strip())
    return failed_verdict(ref, outcome.failure, outcome.raw_texts)


class LlmSufficiencyJudge:
    """Sufficiency asked of an LLM (:data:`SUFFICIENCY_PROMPT`, or the one-shot variant).

    ``shots`` 0 is ``sufficiency.llm``, 1 is ``sufficiency.llm_1shot``. ``tokenizer_name`` names
    the tokenizer behind ``counter`` in the version (the cut depends on it). The version covers
    the backend, the model, the prompt, the decoding settings, the shots and the token budget.
    """

    def __init__(
        self,
        client: LLMClient,
        params: GenerationParams = DEFAULT_PARAMS,
        *,
        shots: Literal[0, 1] = 0,
        max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
        counter: Tokenizer,
        tokenizer_name: str = "",
        stage: str = STAGE,
    ) -> None:
        if shots not in (0, 1):
            raise ValueError(f"shots must be 0 or 1, got {shots!r}")
        self._client = client
        self._params = params
        self._prompt = SUFFICIENCY_1SHOT_PROMPT if shots else SUFFICIENCY_PROMPT
        self.max_context_tokens = _check_budget(max_context_tokens, "max_context_tokens")
        self._counter = counter
        self._stage = stage
        model = str(client.backend.model_id)
        version = llm_judge_version(
            client,
            self._prompt,
            params,
            llm_backend=client.backend.name,
            shots=shots,
            max_context_tokens=self.max_context_tokens,
            tokenizer=tokenizer_name,
        )
        self._spec = sufficiency_spec(
            name=LLM_1SHOT_RATER if shots else LLM_RATER,
            version=version,
            backend=LLM_BACKEND,
            model=f"{client.backend.name}:{model}",
            description=f"LLM {model}, prompt {self._prompt.name} v{self._prompt.version} "
            f"({shots}-shot), context cut to {self.max_context_tokens} tokens",
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        return judge_nonempty(self._spec.ref, items, self._rate, problem=input_problem)

    def _rate(self, items: list[JudgeInput]) -> list[Verdict]:
        cuts = [
            truncate_to_tokens(i.context, self.max_context_tokens, self._counter) for i in items
        ]
        inputs = [
            SufficiencyInput(question=i.question, context=cut.text)
            for i, cut in zip(items, cuts, strict=True)
        ]
        outcomes = self._client.run(self._prompt, inputs, stage=self._stage, params=self._params)
        return [
            with_note(outcome_verdict(self._spec.ref, outcome), cut.note)
            for outcome, cut in zip(outcomes, cuts, strict=True)
        ]


# ---------------------------------------------------------------------------- chunked rater


class ChunkedSufficiencyJudge:
    """Sufficient when the inner rater finds any ``chunk_tokens`` window of the context sufficient.

    The context is first cut to ``max_context_tokens``, then split with
    :func:`split_token_chunks`; the inner rater sees every window of every item in one batched
    call. A failed window verdict with no sufficient window makes the item's verdict fail (the
    failed window might have been the sufficient one), holding the failures' raw outputs.
    """

    def __init__(
        self,
        inner: Judge,
        *,
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
        counter: Tokenizer,
        tokenizer_name: str = "",
    ) -> None:
        if inner.spec.role is not JudgeRole.SUFFICIENCY:
            raise ValueError(f"the inner judge {inner.spec.ref} is not a sufficiency rater")
        self._inner = inner
        self.chunk_tokens = _check_budget(chunk_tokens, "chunk_tokens")
        self.max_context_tokens = _check_budget(max_context_tokens, "max_context_tokens")
        self._counter = counter
        version = judge_version(
            inner=inner.spec.ref,
            chunk_tokens=self.chunk_tokens,
            max_context_tokens=self.max_context_tokens,
            tokenizer=tokenizer_name,
        )
        self._spec = sufficiency_spec(
            name=CHUNKED_RATER,
            version=version,
            backend=f"chunked:{inner.spec.backend}",
            model=inner.spec.ref,
            approximate=inner.spec.approximate,
            description=f"{inner.spec.ref} on {self.chunk_tokens}-token windows of the context: "
            "sufficient when any window is",
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        return judge_nonempty(self._spec.ref, items, self._rate, problem=input_problem)

    def _rate(self, items: list[JudgeInput]) -> list[Verdict]:
        cuts = [
            truncate_to_tokens(i.context, self.max_context_tokens, self._counter) for i in items
        ]
        asks: list[list[JudgeInput]] = []
        for item, cut in zip(items, cuts, strict=True):
            windows = split_token_chunks(cut.text, self.chunk_tokens, self._counter)
            asks.append(
                [JudgeInput(question=item.question, context=w, answer=item.answer) for w in windows]
            )
        return [
            with_note(self._combine(own), cut.note)
            for own, cut in zip(judge_groups(self._inner, asks), cuts, strict=True)
        ]

    def _combine(self, window_verdicts: Sequence[Verdict]) -> Verdict:
        ref, n = self._spec.ref, len(window_verdicts)
        for k, verdict in enumerate(window_verdicts, start=1):
            if verdict.ok and verdict.value == SUFFICIENT:
                return Verdict(
                    judge=ref,
                    value=SUFFICIENT,
                    reason=join_reason(f"chunk {k} of {n} is sufficient", verdict.reason),
                )
        failed = [(k, v) for k, v in enumerate(window_verdicts, start=1) if not v.ok]
        if failed:
            listing = "; ".join(f"chunk {k}: {v.error}" for k, v in failed)
            return failed_verdict(
                ref,
                f"{len(failed)} of {n} chunks failed and no other chunk is sufficient ({listing})",
                [raw for _, v in failed for raw in v.raw],
            )
        return Verdict(
            judge=ref, value=INSUFFICIENT, reason=f"none of the {n} chunks is sufficient"
        )


# --------------------------------------------------------------------- contains-answer baseline


def contains_phrase(context: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``context`` as whole words after normalisation (case folded,
    punctuation dropped, whitespace collapsed: :func:`ragtrail.text.text_key`), so "27 days."
    matches "... 27 days of leave" but "27" does not match "270"."""
    needle = text_key(phrase)
    return bool(needle) and f" {needle} " in f" {text_key(context)} "


class ContainsAnswerJudge:
    """Sufficient when a gold answer occurs in the (cut) context (:func:`contains_phrase`).

    No model. With a ``counter`` the context is cut to ``max_context_tokens`` first, like every
    rater, so an answer beyond the budget does not count; without one the whole context is read.
    """

    def __init__(
        self,
        *,
        max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
        counter: Tokenizer | None = None,
        tokenizer_name: str = "",
    ) -> None:
        self.max_context_tokens = _check_budget(max_context_tokens, "max_context_tokens")
        self._counter = counter
        budget = self.max_context_tokens if counter is not None else None
        self._spec = sufficiency_spec(
            name=CONTAINS_RATER,
            version=judge_version(
                backend="string-match",
                rule="text_key-whole-words-v1",
                max_context_tokens=budget,
                tokenizer=tokenizer_name if counter is not None else "",
            ),
            backend="string-match",
            model="",
            description="baseline: a gold answer occurs in the context after normalisation "
            "(case, punctuation and spacing ignored)",
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        return judge_nonempty(
            self._spec.ref,
            items,
            lambda valid: [self._rate(i) for i in valid],
            problem=input_problem,
        )

    def _rate(self, item: JudgeInput) -> Verdict:
        ref = self._spec.ref
        answers = gold_answers(item.answer)
        if not answers:
            return Verdict(judge=ref, value=INSUFFICIENT, reason=NO_GOLD_ANSWER)
        context, note = item.context, ""
        if self._counter is not None:
            cut = truncate_to_tokens(item.context, self.max_context_tokens, self._counter)
            context, note = cut.text, cut.note
        found = next((a for a in answers if contains_phrase(context, a)), None)
        if found is not None:
            return Verdict(ref, SUFFICIENT, reason=join_reason(note, f"contains {found!r}"))
        return Verdict(
            ref, INSUFFICIENT, reason=join_reason(note, "no gold answer occurs in the context")
        )


# ---------------------------------------------------------------------------- entailment rater


def entailment_hypothesis(question: str, answer: str) -> str:
    """The claim checked against the context: the question followed by its gold answer.

    ("How many days of leave do staff get? 27 days"): the answer alone ("27 days") is rarely a
    claim a context can entail, and without a model to rewrite the pair as one sentence this
    keeps what is asked next to what answers it.
    """
    return f"{question.strip()} {answer.strip()}"


def gives_probabilities(spec: JudgeSpec) -> bool:
    """Whether ``spec``'s ``Verdict.score`` is a probability of entailment (an NLI model)."""
    return spec.verdict_type is VerdictType.PROBABILITY or spec.backend in PROBABILITY_BACKENDS


def _probability(verdict: Verdict) -> float | None:
    if verdict.score is not None:
        return float(verdict.score)
    if isinstance(verdict.value, int | float) and not isinstance(verdict.value, bool):
        return float(verdict.value)
    return None


class EntailmentSufficiencyJudge:
    """Sufficient when some window of the context entails a gold answer to the question.

    Premises are the ``chunk_tokens`` windows of the context cut to ``max_context_tokens``;
    hypotheses :func:`entailment_hypothesis` of each gold answer. ``Verdict.score`` is the maximum
    of the entailment judge's scores over all (window, answer) pairs.

    With an NLI judge (:func:`gives_probabilities`) the score is a probability and the item is
    sufficient when it reaches ``threshold``. Any other entailment judge (the embedding-similarity
    fallback: its score is a cosine, for which 0.05 means nothing; an LLM: no score) decides by
    its own verdicts instead (sufficient when any pair is SUPPORTED); the spec is then marked
    approximate and every verdict's reason says so.
    """

    def __init__(
        self,
        entailment: Judge,
        *,
        threshold: float = DEFAULT_ENTAILMENT_THRESHOLD,
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
        counter: Tokenizer,
        tokenizer_name: str = "",
    ) -> None:
        inner = entailment.spec
        if inner.role is not JudgeRole.ENTAILMENT:
            raise ValueError(f"{inner.ref} is not an entailment judge")
        value = float(threshold)
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {threshold!r}")
        self._entailment = entailment
        self.probabilistic = gives_probabilities(inner)
        self.threshold = value
        self.chunk_tokens = _check_budget(chunk_tokens, "chunk_tokens")
        self.max_context_tokens = _check_budget(max_context_tokens, "max_context_tokens")
        self._counter = counter
        version = judge_version(
            inner=inner.ref,
            rule="max-probability" if self.probabilistic else "inner-verdicts",
            threshold=self.threshold if self.probabilistic else None,
            hypothesis="question-answer-v1",
            chunk_tokens=self.chunk_tokens,
            max_context_tokens=self.max_context_tokens,
            tokenizer=tokenizer_name,
        )
        if self.probabilistic:
            description = (
                f"{inner.ref}: sufficient when max over context windows of P(entailment) of "
                f"question + gold answer >= {self.threshold}"
            )
            self._mode_note = ""
        else:
            description = (
                f"APPROXIMATE: {inner.ref} ({inner.backend}) gives no entailment probability, so "
                "the threshold does not apply; sufficient when the judge calls question + gold "
                "answer supported by any context window"
            )
            self._mode_note = f"decided by {inner.ref}'s own verdicts (no probability)"
        self._spec = sufficiency_spec(
            name=ENTAILMENT_RATER,
            version=version,
            backend=f"entailment:{inner.backend}",
            model=inner.ref,
            approximate=inner.approximate or not self.probabilistic,
            description=description,
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        return judge_nonempty(self._spec.ref, items, self._rate, problem=input_problem)

    def _rate(self, items: list[JudgeInput]) -> list[Verdict]:
        ref = self._spec.ref
        cuts = [
            truncate_to_tokens(i.context, self.max_context_tokens, self._counter) for i in items
        ]
        pairs: list[list[JudgeInput]] = []
        for item, cut in zip(items, cuts, strict=True):
            windows = split_token_chunks(cut.text, self.chunk_tokens, self._counter)
            pairs.append(
                [
                    JudgeInput(premise=w, hypothesis=entailment_hypothesis(item.question, a))
                    for a in gold_answers(item.answer)
                    for w in windows
                    if w.strip()
                ]
            )
        verdicts = []
        for item, cut, own in zip(items, cuts, judge_groups(self._entailment, pairs), strict=True):
            if not gold_answers(item.answer):
                verdict = Verdict(judge=ref, value=INSUFFICIENT, reason=NO_GOLD_ANSWER)
            else:
                verdict = self._combine(own)
            verdicts.append(with_note(verdict, cut.note))
        return verdicts

    def _combine(self, pair_verdicts: Sequence[Verdict]) -> Verdict:
        ref, n = self._spec.ref, len(pair_verdicts)
        scores = [s for v in pair_verdicts if v.ok and (s := _probability(v)) is not None]
        best = max(scores) if scores else None
        if self.probabilistic:
            decided = best is not None and best >= self.threshold
            failed = [v for v in pair_verdicts if not v.ok or _probability(v) is None]
            shown = "none" if best is None else f"{best:.4f}"
            rule = f"max P(entailment) {shown} over {n} pair(s), threshold {self.threshold}"
        else:
            decided = any(v.ok and v.value == SUPPORTED for v in pair_verdicts)
            failed = [v for v in pair_verdicts if not v.ok]
            rule = join_reason(self._mode_note, f"{n} pair(s) checked")
        if decided:
            return Verdict(judge=ref, value=SUFFICIENT, score=best, reason=rule)
        if failed:
            errors = "; ".join(v.error or "no probability in the verdict" for v in failed)
            return Verdict(
                judge=ref,
                value=None,
                score=best,
                reason=rule,
                error=f"{len(failed)} of {n} entailment verdicts failed and none decided "
                f"sufficient ({errors})",
                raw=tuple(raw for v in failed for raw in (v.raw or (repr(v.value),))),
            )
        return Verdict(judge=ref, value=INSUFFICIENT, score=best, reason=rule)
