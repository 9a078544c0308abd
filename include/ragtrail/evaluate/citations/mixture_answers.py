"""Answer relevance mixtures with citations, in batches, through the cached LLM client.

Each mixture becomes one :data:`CITED_ANSWER_PROMPT` input (the question and the passages in
their numbered order). All inputs go to :meth:`LLMClient.run` in one call, so the backend sees them
in batches, every completion is cached by content (a re-run makes no model call) and retries are
the client's. A call that still fails is kept as a failed :class:`MixtureAnswer` with the raw text
of every attempt: the metrics count it and leave it out of their averages.

A reply cut off at ``max_new_tokens`` is a failure (cause :data:`TRUNCATED`) even when the client
parsed it: the client reads the first complete JSON object of a reply, and in a cut-off
``{"sentences": [{...}, {...`` that is an inner sentence (``sentences`` is required, so such a
reply no longer validates; this guard keeps any cut-off answer from counting).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragtrail.evaluate.attribution.cited_answers import (
    CITED_ANSWER_PROMPT,
    CitedAnswerInput,
    Statement,
    all_citations,
    answer_words,
    render_answer,
    statements_of,
)
from ragtrail.evaluate.citations.mixtures import Mixture
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.client import GenerationParams, LLMClient

ANSWER_STAGE = "citations"
TRUNCATED = "truncated"
DEFAULT_ANSWER_PARAMS = GenerationParams(max_new_tokens=256, temperature=0.0, seed=0)
"""Greedy, guided. The schema admits two sentences of up to 160 characters each (about 110 tokens
of JSON); SmolLM2-135M copies passage text into its sentences, so it often uses the most the
schema allows. 256 leaves room for an unguided backend's extra words."""


@dataclass(frozen=True)
class MixtureAnswer:
    """The model's answer to one mixture: statements when ``ok``, else the failure and the raw
    text of every attempt."""

    qid: str
    mixture_type: str
    ok: bool
    statements: tuple[Statement, ...] = ()
    raw_texts: tuple[str, ...] = ()
    error: str | None = None
    cause: str | None = None

    @property
    def text(self) -> str:
        """The answer rendered with ``[k]`` markers (empty for an abstention or a failure)."""
        return render_answer(self.statements)

    @property
    def cited(self) -> tuple[int, ...]:
        return all_citations(self.statements)

    @property
    def abstained(self) -> bool:
        """An answer with no sentence: the prompt's way to say the passages do not answer."""
        return self.ok and not self.statements

    @property
    def words(self) -> int:
        return answer_words(self.statements)

    def as_dict(self) -> JsonObject:
        return {
            "qid": self.qid,
            "mixture": self.mixture_type,
            "status": "ok" if self.ok else "failed",
            "text": self.text,
            "statements": [s.as_dict() for s in self.statements],
            "cited": list(self.cited),
            "raw_texts": list(self.raw_texts),
            "error": self.error,
            "cause": self.cause,
        }


def mixture_input(mixture: Mixture) -> CitedAnswerInput:
    """The prompt input: passage k of the prompt is the mixture's passage number k."""
    return CitedAnswerInput(question=mixture.question, passages=[p.text for p in mixture.passages])


def answer_mixtures(
    client: LLMClient,
    mixtures: Sequence[Mixture],
    *,
    params: GenerationParams = DEFAULT_ANSWER_PARAMS,
    stage: str = ANSWER_STAGE,
) -> list[MixtureAnswer]:
    """One answer per mixture, in order (see the module docstring)."""
    outcomes = client.run(
        CITED_ANSWER_PROMPT, [mixture_input(m) for m in mixtures], stage=stage, params=params
    )
    answers = []
    for mixture, outcome in zip(mixtures, outcomes, strict=True):
        raw = tuple(outcome.raw_texts)
        if outcome.ok and outcome.cut_off:
            answers.append(
                MixtureAnswer(
                    mixture.qid,
                    mixture.mixture_type,
                    False,
                    raw_texts=raw,
                    error="the reply was cut off at the token limit",
                    cause=TRUNCATED,
                )
            )
        elif outcome.ok and outcome.value is not None:
            answers.append(
                MixtureAnswer(
                    mixture.qid,
                    mixture.mixture_type,
                    True,
                    tuple(statements_of(outcome.value)),
                    raw,
                )
            )
        else:
            answers.append(
                MixtureAnswer(
                    mixture.qid,
                    mixture.mixture_type,
                    False,
                    raw_texts=raw,
                    error=outcome.error or "no value",
                    cause=str(outcome.cause) if outcome.cause else None,
                )
            )
    return answers
