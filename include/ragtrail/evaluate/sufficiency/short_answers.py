"""Short answers, or an explicit abstention, from the answering model (METHODS §9).

:data:`SHORT_ANSWER_PROMPT` asks for ``{"answer": <a phrase or one sentence>, "abstain": <bool>}``
given a question and numbered passages; with no passages (the "without retrieval" setting) it
asks the model to answer from what it knows, or to abstain. Abstaining is a legitimate reply
here: the Correct / Abstain / Hallucinate tables (:mod:`ragtrail.evaluate.sufficiency.cah`) need the model to
be able to say "I don't know".

:func:`answer_questions` sends every input to :meth:`LLMClient.run` in one call (batched, cached,
retried by the client). A call that still fails is kept as a failed :class:`ShortAnswer` with the
raw text of every attempt, and so is a reply cut off at the token budget even if it parsed
(as in :mod:`ragtrail.evaluate.citations.mixture_answers`): nothing is dropped or guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ragtrail.config import SufficiencySettings
from ragtrail.evaluate.sufficiency.abstention import is_abstention
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS, Prompt

ANSWER_STAGE = "sufficiency.answers"
TRUNCATED = "truncated"
MAX_SHORT_ANSWER_CHARS = 160
"""Guided decoding caps the answer at one sentence's worth of characters."""

DEFAULT_SHORT_ANSWER_PARAMS = GenerationParams(
    max_new_tokens=SufficiencySettings.model_fields["max_new_tokens"].default,
    temperature=0.0,
    seed=0,
)
"""Greedy; 64 new tokens hold the JSON around a 160-character answer."""


def short_answer_params(max_new_tokens: int, seed: int) -> GenerationParams:
    """Greedy decoding with the configured budget (``settings.sufficiency.max_new_tokens``)."""
    return GenerationParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)


class ShortAnswerInput(BaseModel):
    """A question and the numbered passages to answer from; no passages = answer from memory."""

    question: str
    passages: list[str] = Field(default_factory=list)


class ShortAnswerOutput(BaseModel):
    """A short answer, or ``abstain`` true with an empty answer."""

    answer: str = Field(description='a short phrase or one sentence; "" when abstaining')
    abstain: bool = Field(description="true when the passages (or what you know) do not answer")
    # Both required: a reply cut off before the flag must not validate with a default.


def short_answer_schema(_inp: ShortAnswerInput) -> JsonObject:
    """What guided decoding enforces: the two fields, the answer at most 160 characters."""
    return {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "maxLength": MAX_SHORT_ANSWER_CHARS},
            "abstain": {"type": "boolean"},
        },
        "required": ["answer", "abstain"],
        "additionalProperties": False,
    }


_EX_PASSAGES = [
    "Bike racks are in the basement car park. Showers are on the second floor.",
    "The cafeteria opens at 8 am and closes at 3 pm on weekdays.",
]

SHORT_ANSWER_PROMPT: Prompt[ShortAnswerInput, ShortAnswerOutput] = PROMPTS.register(
    Prompt(
        name="answer.short",
        version="1",
        instruction=(
            "Answer the question with a short phrase or a single sentence. When numbered "
            "passages are given, use only what they say. When no passage is given, answer from "
            "your own knowledge. If the passages (or, without passages, your knowledge) do not "
            'give the answer, do not guess: set "abstain" to true and leave "answer" empty. '
            "Reply in JSON."
        ),
        input_model=ShortAnswerInput,
        output_model=ShortAnswerOutput,
        examples=[
            (
                ShortAnswerInput(
                    question="Where can staff park their bikes?", passages=_EX_PASSAGES
                ),
                ShortAnswerOutput(answer="In the basement car park.", abstain=False),
            ),
            (
                ShortAnswerInput(question="Is there a gym for staff?", passages=_EX_PASSAGES),
                ShortAnswerOutput(answer="", abstain=True),
            ),
            (
                ShortAnswerInput(question="How many days are in a leap year?", passages=[]),
                ShortAnswerOutput(answer="366 days.", abstain=False),
            ),
        ],
        document_fields=frozenset({"passages"}),
        decoding_schema=short_answer_schema,
    )
)
"""The answering prompt of the Correct / Abstain / Hallucinate evaluation (all three settings)."""


@dataclass(frozen=True)
class ShortAnswer:
    """The model's reply to one question: ``text`` and ``abstain_flag`` when it parsed, else
    ``failed`` with the error and the raw text of every attempt."""

    text: str
    abstain_flag: bool | None
    failed: bool = False
    error: str | None = None
    raw: tuple[str, ...] = ()

    @property
    def abstained(self) -> bool:
        """A parsed reply that abstains (flag, empty or "I don't know"; see
        :func:`~ragtrail.evaluate.sufficiency.abstention.is_abstention`); a failure never does."""
        return not self.failed and is_abstention(self.text, self.abstain_flag)

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            "status": "failed" if self.failed else "ok",
            "text": self.text,
            "abstain_flag": self.abstain_flag,
            "abstained": self.abstained,
        }
        if self.failed:
            out["error"] = self.error
            out["raw"] = list(self.raw)
        return out


def failed_answer(error: str, raw: Sequence[str] = ()) -> ShortAnswer:
    return ShortAnswer(text="", abstain_flag=None, failed=True, error=error, raw=tuple(raw))


def answer_questions(
    client: LLMClient,
    inputs: Sequence[ShortAnswerInput],
    params: GenerationParams = DEFAULT_SHORT_ANSWER_PARAMS,
    *,
    stage: str = ANSWER_STAGE,
) -> list[ShortAnswer]:
    """One :class:`ShortAnswer` per input, in order, from one batched client call."""
    if not inputs:
        return []
    outcomes = client.run(SHORT_ANSWER_PROMPT, list(inputs), stage=stage, params=params)
    answers = []
    for outcome in outcomes:
        raw = tuple(outcome.raw_texts)
        if outcome.ok and outcome.cut_off:
            answers.append(
                failed_answer(f"{TRUNCATED}: the reply was cut off at the token limit", raw)
            )
        elif outcome.ok and outcome.value is not None:
            value = outcome.value
            answers.append(ShortAnswer(value.answer.strip(), value.abstain, raw=raw))
        else:
            cause = str(outcome.cause) if outcome.cause is not None else "failed"
            answers.append(failed_answer(f"{cause}: {outcome.error or 'no value'}", raw))
    return answers


__all__ = [
    "ANSWER_STAGE",
    "DEFAULT_SHORT_ANSWER_PARAMS",
    "SHORT_ANSWER_PROMPT",
    "ShortAnswer",
    "ShortAnswerInput",
    "ShortAnswerOutput",
    "answer_questions",
    "failed_answer",
    "short_answer_params",
    "short_answer_schema",
]
