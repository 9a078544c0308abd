"""Self-rated confidence of an answering model: P(True) and P(Correct) (METHODS §9).

Both features ask the model about a (question, passages) pair through the cached
:class:`~ragtrail.llm.client.LLMClient`, so a rerun replays every call from the cache.

* **P(True)** rates a given (proposed) answer. The model first brainstorms ``samples``
  alternative answers (:data:`SAMPLE_ANSWER_PROMPT`, sampled at ``temperature``), then is asked
  ``asks`` times, also sampled, whether the proposed answer is correct, seeing the question, the
  passages and the brainstormed answers (:data:`P_TRUE_PROMPT`). P(True) is the share of "true"
  among the asks that produced a valid reply. All samples of all rows go to the model as one
  batch and all asks as one more; every sample and ask has its own seed (shared across rows),
  so each is its own cache entry and a rerun is served entirely from the cache.
* **P(Correct)** asks once, greedily, for the two most likely answers with their probabilities
  (:data:`P_CORRECT_PROMPT`) and keeps the highest probability, clipped to [0, 1]. Probabilities
  are taken as the model states them: when they add up to more than 1 nothing is renormalised
  (the top one is kept as given, then clipped), and a percentage such as 80 clips to 1.

A failed model call is never turned into a number: a row whose every ask (or every sample) failed
gets ``value=None`` with the error and the raw texts. Partial failures leave a value over the
valid replies; ``n_valid`` of ``n_asked`` says how many there were, and ``raw`` keeps the text of
every failed call either way. A row whose proposed answer is an abstention is rated like any
other; whether such a score means anything is the caller's decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from ragtrail.evaluate.citations.mixtures import stable_seed
from ragtrail.jsonsafe import JsonObject, finite_or_undefined
from ragtrail.llm.client import CallOutcome, GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS, Prompt

SAMPLE_STAGE = "confidence.sample_answer"
P_TRUE_STAGE = "confidence.p_true"
P_CORRECT_STAGE = "confidence.p_correct"
MAX_ANSWER_CHARS = 120
SAMPLE_MAX_NEW_TOKENS = 64
ASK_MAX_NEW_TOKENS = 16
P_CORRECT_MAX_NEW_TOKENS = 192
"""Two guided answers with their probabilities; at 96, 4 of the sample night's 12 were cut off."""


# ------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class ConfidenceRow:
    """What a confidence feature is computed for: the question, the passages the answer was
    written from (empty without retrieval) and the proposed answer (used by P(True) only)."""

    question: str
    passages: tuple[str, ...] = ()
    answer: str = ""


@dataclass(frozen=True)
class ConfidenceScore:
    """One row's feature: ``value`` over ``n_valid`` valid replies of ``n_asked`` asked, or None
    with ``error`` when none was valid; ``raw`` holds the text of every failed call's attempts."""

    value: float | None
    n_valid: int
    n_asked: int
    error: str | None = None
    raw: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.value is None and not self.error:
            raise ValueError("a confidence score without a value needs an error")

    def as_dict(self) -> JsonObject:
        """Strict JSON; an undefined value is null with the error as its reason."""
        out: JsonObject = {}
        finite_or_undefined(out, "value", self.value, self.error or "")
        out.update(n_valid=self.n_valid, n_asked=self.n_asked, error=self.error, raw=list(self.raw))
        return out


# ------------------------------------------------------------------------------------ prompts


class SampleAnswerInput(BaseModel):
    """A question and the passages (possibly none) an answer may use."""

    question: str
    passages: list[str]


class SampleAnswerOutput(BaseModel):
    """One short candidate answer."""

    answer: str = Field(description="a few words or one short sentence")


def _sample_schema(_: SampleAnswerInput) -> JsonObject:
    return {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": MAX_ANSWER_CHARS}},
        "required": ["answer"],
        "additionalProperties": False,
    }


class PTrueInput(BaseModel):
    """The question, its passages, the brainstormed answers and the answer to judge."""

    question: str
    passages: list[str]
    brainstormed: list[str]
    proposed_answer: str


class PTrueOutput(BaseModel):
    """Whether the proposed answer is correct."""

    correct: bool


class PCorrectInput(BaseModel):
    """A question and the passages (possibly none) to answer it from."""

    question: str
    passages: list[str]


class LikelyAnswer(BaseModel):
    """A candidate answer and the probability the model gives it."""

    answer: str
    probability: float = Field(allow_inf_nan=False, description="from 0 to 1")


class PCorrectOutput(BaseModel):
    """The most likely answers, most likely first."""

    answers: list[LikelyAnswer] = Field(min_length=1, description="the two most likely answers")


def _p_correct_schema(_: PCorrectInput) -> JsonObject:
    """Two answers of bounded length, each with a number (the number's 0..1 bounds are stated
    but the decoder only checks digits, so the value is clipped after parsing)."""
    item = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "maxLength": MAX_ANSWER_CHARS},
            "probability": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["answer", "probability"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"answers": {"type": "array", "items": item, "minItems": 1, "maxItems": 2}},
        "required": ["answers"],
        "additionalProperties": False,
    }


_EX_QUESTION = "How often does the harbour ferry leave?"
_EX_PASSAGES = ["The harbour ferry leaves every 40 minutes from 6 am. A ticket costs 3 euros."]

SAMPLE_ANSWER_PROMPT: Prompt[SampleAnswerInput, SampleAnswerOutput] = PROMPTS.register(
    Prompt(
        name="confidence.sample_answer",
        version="1",
        instruction=(
            "Give a short answer to the question: a few words or one short sentence. Use the "
            "numbered passages when there are any. Reply in JSON."
        ),
        input_model=SampleAnswerInput,
        output_model=SampleAnswerOutput,
        examples=[
            (
                SampleAnswerInput(question=_EX_QUESTION, passages=_EX_PASSAGES),
                SampleAnswerOutput(answer="Every 40 minutes."),
            )
        ],
        document_fields=frozenset({"passages"}),
        decoding_schema=_sample_schema,
    )
)
"""Brainstorms one candidate answer (sampled several times per row for P(True))."""

P_TRUE_PROMPT: Prompt[PTrueInput, PTrueOutput] = PROMPTS.register(
    Prompt(
        name="confidence.p_true",
        version="1",
        instruction=(
            "You are shown a question, the passages it is asked about (there may be none), "
            "some answers brainstormed for it, and one proposed answer. Decide whether the "
            "proposed answer is correct: true if it answers the question correctly, false "
            "otherwise. Reply in JSON."
        ),
        input_model=PTrueInput,
        output_model=PTrueOutput,
        examples=[
            (
                PTrueInput(
                    question=_EX_QUESTION,
                    passages=_EX_PASSAGES,
                    brainstormed=["Every 40 minutes.", "Every hour."],
                    proposed_answer="Every hour.",
                ),
                PTrueOutput(correct=False),
            )
        ],
        document_fields=frozenset({"passages"}),
    )
)
"""Asks whether a proposed answer is correct (asked several times per row for P(True))."""

P_CORRECT_PROMPT: Prompt[PCorrectInput, PCorrectOutput] = PROMPTS.register(
    Prompt(
        name="confidence.p_correct",
        version="1",
        instruction=(
            "Give the two most likely answers to the question, most likely first, each with "
            "the probability (a number from 0 to 1) that it is correct. Use the numbered "
            "passages when there are any. Reply in JSON."
        ),
        input_model=PCorrectInput,
        output_model=PCorrectOutput,
        examples=[
            (
                PCorrectInput(question=_EX_QUESTION, passages=_EX_PASSAGES),
                PCorrectOutput(
                    answers=[
                        LikelyAnswer(answer="Every 40 minutes.", probability=0.9),
                        LikelyAnswer(answer="Every hour.", probability=0.05),
                    ]
                ),
            )
        ],
        document_fields=frozenset({"passages"}),
        decoding_schema=_p_correct_schema,
    )
)
"""Asks for the most likely answers with probabilities (P(Correct))."""

CONFIDENCE_PROMPTS = (SAMPLE_ANSWER_PROMPT, P_TRUE_PROMPT, P_CORRECT_PROMPT)


# ------------------------------------------------------------------------------------ features


def draw_seeds(seed: int, what: str, count: int) -> list[int]:
    """``count`` distinct seeds for the draws of one kind (``"sample"``, ``"ask"``), derived from
    ``seed``; spaced so that a retry (the client adds the attempt number) meets no other draw."""
    base = stable_seed(seed, what) % 2**31
    return [base + 1000 * k for k in range(count)]


def p_true(
    client: LLMClient,
    rows: Sequence[ConfidenceRow],
    *,
    samples: int,
    asks: int,
    temperature: float,
    seed: int,
) -> list[ConfidenceScore]:
    """P(True) of each row's proposed answer (see the module docstring), in row order.

    Two model batches: ``len(rows) * samples`` brainstormed answers, then ``asks`` questions
    for every row with at least one valid sample. A row whose samples all failed is not asked.
    """
    if samples < 1 or asks < 1:
        raise ValueError(f"samples and asks must be >= 1, got {samples} and {asks}")
    if not rows:
        return []
    sample_seeds = draw_seeds(seed, "sample", samples)
    sampled = client.run(
        SAMPLE_ANSWER_PROMPT,
        [
            SampleAnswerInput(question=r.question, passages=list(r.passages))
            for r in rows
            for _ in range(samples)
        ],
        stage=SAMPLE_STAGE,
        params=GenerationParams(
            max_new_tokens=SAMPLE_MAX_NEW_TOKENS, temperature=temperature, seed=seed
        ),
        seeds=sample_seeds * len(rows),
    )
    per_row = [sampled[i * samples : (i + 1) * samples] for i in range(len(rows))]
    askable = [i for i, outs in enumerate(per_row) if any(o.ok for o in outs)]
    ask_inputs = [
        PTrueInput(
            question=rows[i].question,
            passages=list(rows[i].passages),
            brainstormed=[o.value.answer for o in per_row[i] if o.value is not None],
            proposed_answer=rows[i].answer,
        )
        for i in askable
        for _ in range(asks)
    ]
    asked = (
        client.run(
            P_TRUE_PROMPT,
            ask_inputs,
            stage=P_TRUE_STAGE,
            params=GenerationParams(
                max_new_tokens=ASK_MAX_NEW_TOKENS, temperature=temperature, seed=seed
            ),
            seeds=draw_seeds(seed, "ask", asks) * len(askable),
        )
        if ask_inputs
        else []
    )
    asks_of = {i: asked[n * asks : (n + 1) * asks] for n, i in enumerate(askable)}
    scores = []
    for i, outs in enumerate(per_row):
        if i not in asks_of:
            scores.append(_undefined("every sampled answer failed", outs, n_asked=asks))
            continue
        votes = [o.value.correct for o in asks_of[i] if o.value is not None]
        raw = _failed_raw([*outs, *asks_of[i]])
        if not votes:
            scores.append(_undefined("every ask failed", asks_of[i], n_asked=asks, raw=raw))
        else:
            scores.append(ConfidenceScore(sum(votes) / len(votes), len(votes), asks, raw=raw))
    return scores


def p_correct(
    client: LLMClient, rows: Sequence[ConfidenceRow], *, seed: int
) -> list[ConfidenceScore]:
    """P(Correct) of each row: the highest stated probability, clipped to [0, 1] (one greedy
    call per row, all rows in one batch)."""
    if not rows:
        return []
    outcomes = client.run(
        P_CORRECT_PROMPT,
        [PCorrectInput(question=r.question, passages=list(r.passages)) for r in rows],
        stage=P_CORRECT_STAGE,
        params=GenerationParams(
            max_new_tokens=P_CORRECT_MAX_NEW_TOKENS, temperature=0.0, seed=seed
        ),
    )
    scores = []
    for outcome in outcomes:
        if outcome.value is None:
            scores.append(_undefined("the model gave no valid answer list", [outcome], n_asked=1))
        else:
            top = max(a.probability for a in outcome.value.answers)
            scores.append(ConfidenceScore(min(1.0, max(0.0, top)), 1, 1))
    return scores


def _failed_raw(outcomes: Sequence[CallOutcome[Any]]) -> tuple[str, ...]:
    return tuple(text for o in outcomes if not o.ok for text in o.raw_texts)


def _undefined(
    what: str,
    outcomes: Sequence[CallOutcome[Any]],
    *,
    n_asked: int,
    raw: tuple[str, ...] | None = None,
) -> ConfidenceScore:
    """A score without a value: ``what`` plus each distinct failure cause and its detail."""
    causes = dict.fromkeys(f"{o.cause}: {o.error}" for o in outcomes if not o.ok)
    error = f"{what} ({len(outcomes)} of {len(outcomes)}): {'; '.join(causes)}"
    return ConfidenceScore(None, 0, n_asked, error, _failed_raw(outcomes) if raw is None else raw)
