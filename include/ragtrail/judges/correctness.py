"""A correctness judge: does a candidate answer say what the gold answers say? (METHODS §9)

Used by the Correct / Abstain / Hallucinate classification for answers that normalised matching
could not settle. Input convention: ``JudgeInput(question=..., answer=<candidate>,
context=<gold answers, one per line>)``. :class:`LlmCorrectnessJudge` asks an LLM through the
cached, retried client with :data:`CORRECTNESS_PROMPT`; the reply is ``{"reason", "correct"}``
and becomes a CATEGORY verdict :data:`CORRECT` / :data:`INCORRECT`. A reply that never validates
is a failed verdict with every raw attempt; an input with an empty question, candidate or gold
is a failed verdict without a model call.

:func:`correctness_examples` builds the judge's calibration references from golden QA items,
with no invented text: an item's own gold answer is a correct candidate, the gold answer of a
different answerable item an incorrect one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import NamedTuple

from pydantic import BaseModel, Field

from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.contract import (
    JudgeInput,
    JudgeRole,
    JudgeSpec,
    Verdict,
    VerdictType,
)
from ragtrail.judges.entailment import judge_nonempty
from ragtrail.judges.llm_judge import LLM_BACKEND, llm_judge_version
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS, Prompt
from ragtrail.records import QAItem, QuestionLabel
from ragtrail.text import contains_word_run, word_tokens

CORRECT = "correct"
INCORRECT = "incorrect"
CORRECTNESS_CATEGORIES: tuple[str, ...] = (CORRECT, INCORRECT)
JUDGE_NAME = "correctness.llm"
STAGE = "judge.correctness"
MAX_REASON_CHARS = 120
DEFAULT_PARAMS = GenerationParams(max_new_tokens=64, temperature=0.0, seed=0)
"""Greedy; 64 new tokens hold a reason of up to 120 characters and the verdict."""


class CorrectnessInput(BaseModel):
    """The question, its gold answers and the candidate answer to check."""

    question: str
    gold_answers: list[str]
    candidate: str


class CorrectnessOutput(BaseModel):
    """A brief reason, then the verdict."""

    reason: str = Field(description="one short sentence comparing the candidate with the gold")
    correct: bool = Field(description="true when the candidate gives the same answer as a gold")


def correctness_schema(_inp: CorrectnessInput) -> JsonObject:
    """What guided decoding enforces: a reason of at most 120 characters, then the verdict."""
    return {
        "type": "object",
        "properties": {
            "reason": {"type": "string", "maxLength": MAX_REASON_CHARS},
            "correct": {"type": "boolean"},
        },
        "required": ["reason", "correct"],
        "additionalProperties": False,
    }


CORRECTNESS_PROMPT: Prompt[CorrectnessInput, CorrectnessOutput] = PROMPTS.register(
    Prompt(
        name="judge.correctness",
        version="1",
        instruction=(
            "You check an answer against reference answers. The candidate is correct when it "
            "gives the same answer as at least one reference, even in other words or with extra "
            "detail that does not contradict it. It is incorrect when it gives a different "
            "answer, contradicts the references, or leaves out what the question asks for. "
            "Give a short reason, then the verdict. Reply in JSON."
        ),
        input_model=CorrectnessInput,
        output_model=CorrectnessOutput,
        examples=[
            (
                CorrectnessInput(
                    question="When does the cafeteria close on weekdays?",
                    gold_answers=["At 3 pm."],
                    candidate="It closes at three in the afternoon.",
                ),
                CorrectnessOutput(reason="Three in the afternoon is 3 pm.", correct=True),
            ),
            (
                CorrectnessInput(
                    question="When does the cafeteria close on weekdays?",
                    gold_answers=["At 3 pm."],
                    candidate="At 5 pm.",
                ),
                CorrectnessOutput(reason="5 pm is not 3 pm.", correct=False),
            ),
        ],
        decoding_schema=correctness_schema,
    )
)
"""The correctness judge's prompt (question, gold answers, candidate -> reason, verdict)."""


def golds_of(item: JudgeInput) -> list[str]:
    """The gold answers of a judge input: the non-empty lines of its ``context``."""
    return [line.strip() for line in item.context.splitlines() if line.strip()]


def input_problem(item: JudgeInput) -> str | None:
    """Why ``item`` cannot be judged for correctness, or None when it can."""
    missing = [
        what
        for what, present in (
            ("question", item.question.strip()),
            ("candidate answer", item.answer.strip()),
            ("gold answer", golds_of(item)),
        )
        if not present
    ]
    return f"empty {' and '.join(missing)}" if missing else None


class LlmCorrectnessJudge:
    """Correct / incorrect verdicts from an LLM via :meth:`LLMClient.run`.

    The version covers the backend, model, prompt name and version, the decoding parameters
    that change verdicts and the client's attempt limit (as the LLM entailment judge's does).
    """

    def __init__(
        self,
        client: LLMClient,
        params: GenerationParams = DEFAULT_PARAMS,
        *,
        prompt: Prompt[CorrectnessInput, CorrectnessOutput] = CORRECTNESS_PROMPT,
        stage: str = STAGE,
    ) -> None:
        self._client = client
        self._params = params
        self._prompt = prompt
        self._stage = stage
        model = str(client.backend.model_id)
        version = llm_judge_version(client, prompt, params)
        self._spec = JudgeSpec(
            name=JUDGE_NAME,
            version=version,
            role=JudgeRole.CORRECTNESS,
            backend=LLM_BACKEND,
            model=model,
            verdict_type=VerdictType.CATEGORY,
            categories=CORRECTNESS_CATEGORIES,
            description=f"LLM {model} with prompt {prompt.name} v{prompt.version}",
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        return judge_nonempty(self._spec.ref, items, self._judge_valid, problem=input_problem)

    def _judge_valid(self, items: list[JudgeInput]) -> list[Verdict]:
        ref = self._spec.ref
        inputs = [
            CorrectnessInput(question=i.question, gold_answers=golds_of(i), candidate=i.answer)
            for i in items
        ]
        outcomes = self._client.run(self._prompt, inputs, stage=self._stage, params=self._params)
        verdicts = []
        for outcome in outcomes:
            raw = tuple(outcome.raw_texts)
            if outcome.ok and outcome.value is not None:
                value = CORRECT if outcome.value.correct else INCORRECT
                verdicts.append(Verdict(ref, value, reason=outcome.value.reason.strip(), raw=raw))
            else:
                verdicts.append(Verdict(judge=ref, value=None, error=outcome.failure, raw=raw))
        return verdicts


# ------------------------------------------------------------------------------- references


class CorrectnessExample(NamedTuple):
    """A calibration reference: a candidate answer to ``question``, its golds and the label."""

    id: str
    question: str
    candidate: str
    golds: tuple[str, ...]
    label: str

    def judge_input(self) -> JudgeInput:
        return JudgeInput(
            question=self.question, answer=self.candidate, context="\n".join(self.golds)
        )


def _overlapping(a: str, b: str) -> bool:
    """True when the words of one text occur in the other's as a run (the same answer, reworded
    at most by case, punctuation or extra words)."""
    x, y = word_tokens(a), word_tokens(b)
    return contains_word_run(x, y) or contains_word_run(y, x)


def correctness_examples(items: Sequence[QAItem], *, n: int, seed: int) -> list[CorrectnessExample]:
    """Up to ``n`` correct and ``n`` incorrect references from answerable golden items.

    ``n`` items with a gold answer are drawn (seeded). Each gives a correct reference (its own
    gold answer as the candidate) and, when one exists, an incorrect one: the gold answer of
    another answerable item, drawn with the same generator among those whose words neither
    contain nor are contained in this item's answer (so an incorrect candidate is really a
    different answer). Ids are ``"<qid>:correct"`` / ``"<qid>:incorrect"``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    pool = [
        i
        for i in items
        if i.label != QuestionLabel.UNANSWERABLE and word_tokens(i.answer) and i.question.strip()
    ]
    rng = random.Random(seed)
    chosen = rng.sample(pool, min(n, len(pool)))
    out: list[CorrectnessExample] = []
    for item in chosen:
        gold = item.answer.strip()
        out.append(CorrectnessExample(f"{item.qid}:correct", item.question, gold, (gold,), CORRECT))
        others = sorted(
            {
                o.answer.strip()
                for o in pool
                if o.qid != item.qid and not _overlapping(o.answer, gold)
            }
        )
        if others:
            out.append(
                CorrectnessExample(
                    f"{item.qid}:incorrect", item.question, rng.choice(others), (gold,), INCORRECT
                )
            )
    return out


__all__ = [
    "CORRECT",
    "CORRECTNESS_CATEGORIES",
    "CORRECTNESS_PROMPT",
    "INCORRECT",
    "JUDGE_NAME",
    "CorrectnessExample",
    "CorrectnessInput",
    "CorrectnessOutput",
    "LlmCorrectnessJudge",
    "correctness_examples",
    "correctness_schema",
    "golds_of",
]
