"""The "full-length answer" of SEER's conciseness expert: one declarative sentence that restates
a question together with its gold answer (METHODS §10).

Conciseness is the cosine between the embedding of this sentence and of the evidence: evidence
that says what the full answer says and little else scores high. The sentence is written once
per (question, answer) by an LLM through the cached client, so every later night and every
training run reuses it. A failed reply is kept as a failure with its raw text; the caller leaves
that item's conciseness undefined with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS, Prompt

FULL_ANSWER_STAGE = "evidence.full_answers"


class FullAnswerInput(BaseModel):
    question: str
    answer: str


class FullAnswerOutput(BaseModel):
    sentence: str = Field(description="one declarative sentence stating the answer in full")


FULL_ANSWER_PROMPT: Prompt[FullAnswerInput, FullAnswerOutput] = PROMPTS.register(
    Prompt(
        name="evidence.full_answer",
        version="1",
        instruction=(
            "Rewrite the question and its short answer as one complete declarative sentence "
            "that states the answer, as a person would say it without being asked. Use no "
            "facts other than the question's and the answer's. Reply in JSON."
        ),
        input_model=FullAnswerInput,
        output_model=FullAnswerOutput,
        examples=[
            (
                FullAnswerInput(question="Where do visitors park?", answer="lot C"),
                FullAnswerOutput(sentence="Visitors park in lot C."),
            ),
            (
                FullAnswerInput(question="How long is the badge valid?", answer="one working day"),
                FullAnswerOutput(sentence="The badge is valid for one working day."),
            ),
        ],
    )
)


@dataclass(frozen=True)
class FullAnswer:
    """The sentence, or ``None`` with the error and raw replies of a failed call."""

    sentence: str | None
    error: str | None = None
    raw: tuple[str, ...] = ()


def full_length_answers(
    client: LLMClient, pairs: Sequence[tuple[str, str]], *, seed: int, max_new_tokens: int = 64
) -> list[FullAnswer]:
    """One :class:`FullAnswer` per ``(question, gold answer)``, greedy and cached."""
    if not pairs:
        return []
    params = GenerationParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    outcomes = client.run(
        FULL_ANSWER_PROMPT,
        [FullAnswerInput(question=q, answer=a) for q, a in pairs],
        stage=FULL_ANSWER_STAGE,
        params=params,
    )
    out = []
    for outcome in outcomes:
        raw = tuple(outcome.raw_texts)
        sentence = outcome.value.sentence.strip() if outcome.ok and outcome.value else ""
        if outcome.ok and sentence and not outcome.cut_off:
            out.append(FullAnswer(sentence, raw=raw))
        elif not outcome.ok:
            out.append(FullAnswer(None, outcome.failure, raw))
        else:
            why = "cut off at the token limit" if outcome.cut_off else "an empty sentence"
            out.append(FullAnswer(None, why, raw))
    return out
