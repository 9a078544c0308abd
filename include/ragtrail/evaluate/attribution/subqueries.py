"""Sub-queries for the query-generation scenario (RTG-query-gen, METHODS §8).

The model rewrites a question as up to m short search queries, each aimed at one piece of the
information the answer needs. Retrieval then runs the original question and every sub-query, and
the ranked lists are fused (:mod:`ragtrail.index.rank_fusion`). A failed generation, or one that
leaves no usable query (empty, blank, or the question repeated), falls back to the original
question alone; the fallback and the model's raw text are kept for the drill-down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.client import CallOutcome, GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS, Prompt
from ragtrail.text import text_key

DEFAULT_SUBQUERIES = 3
MAX_SUBQUERY_CHARS = 160
SUBQUERY_STAGE = "scenario.subqueries"
NO_USABLE_QUERY = "no usable sub-query: every one was blank or repeated the question"


class SubqueryInput(BaseModel):
    """A question to split into at most ``count`` search queries."""

    question: str
    count: int = Field(ge=1)


class SubqueryOutput(BaseModel):
    """Short search queries, one per piece of information the answer needs."""

    queries: list[str] = Field(
        default_factory=list, description="short keyword-style search queries"
    )


def subquery_schema(inp: SubqueryInput) -> JsonObject:
    """What guided decoding enforces: one to ``count`` queries of bounded length."""
    return {
        "type": "object",
        "properties": {
            "queries": {
                "type": "array",
                "minItems": 1,
                "maxItems": inp.count,
                "items": {"type": "string", "minLength": 3, "maxLength": MAX_SUBQUERY_CHARS},
            }
        },
        "required": ["queries"],
        "additionalProperties": False,
    }


SUBQUERY_PROMPT: Prompt[SubqueryInput, SubqueryOutput] = PROMPTS.register(
    Prompt(
        name="retrieval.subqueries",
        version="1",
        instruction=(
            "Write search queries that together find everything needed to answer the question. "
            "Write at most as many queries as the count given. Each query is a few keywords "
            "about one part of the question; do not repeat the question word for word and do "
            "not answer it. Reply in JSON."
        ),
        input_model=SubqueryInput,
        output_model=SubqueryOutput,
        examples=[
            (
                SubqueryInput(
                    question="Which museum in the old town opens on Mondays and what does it cost?",
                    count=2,
                ),
                SubqueryOutput(
                    queries=["old town museum Monday opening", "old town museum ticket price"]
                ),
            )
        ],
        decoding_schema=subquery_schema,
    )
)


@dataclass(frozen=True)
class Subqueries:
    """The sub-queries written for one question; ``fallback`` says why none is used (then
    retrieval uses the question alone), ``raw`` holds the model's texts, one per attempt."""

    question: str
    queries: tuple[str, ...]
    fallback: str | None = None
    raw: tuple[str, ...] = ()

    @property
    def retrieval_queries(self) -> tuple[str, ...]:
        """The original question first, then the sub-queries."""
        return (self.question, *self.queries)

    def as_dict(self) -> JsonObject:
        return {
            "question": self.question,
            "queries": list(self.queries),
            "fallback": self.fallback,
            "raw": list(self.raw),
        }


def usable_queries(question: str, written: Sequence[str], limit: int) -> tuple[str, ...]:
    """``written`` stripped, without blanks, repeats of the question or duplicates (by
    normalised text), at most ``limit`` of them, in order."""
    seen = {text_key(question)}
    out: list[str] = []
    for query in written:
        query = " ".join(query.split())
        key = text_key(query)
        if not key or key in seen:
            continue
        seen.add(key)
        out.append(query)
    return tuple(out[:limit])


def subqueries_from(question: str, outcome: CallOutcome[SubqueryOutput], limit: int) -> Subqueries:
    """Read one generation outcome; failures and empty results fall back to the question."""
    raw = tuple(outcome.raw_texts)
    if not outcome.ok or outcome.value is None:
        reason = f"sub-query generation failed ({outcome.cause}): {outcome.error}"
        return Subqueries(question, (), reason, raw)
    queries = usable_queries(question, outcome.value.queries, limit)
    return Subqueries(question, queries, None if queries else NO_USABLE_QUERY, raw)


def write_subqueries(
    client: LLMClient,
    questions: Sequence[str],
    count: int = DEFAULT_SUBQUERIES,
    params: GenerationParams | None = None,
) -> list[Subqueries]:
    """At most ``count`` sub-queries per question, in one batched (cached) run."""
    if count < 1:
        raise ValueError(f"the number of sub-queries must be >= 1, got {count}")
    inputs = [SubqueryInput(question=q, count=count) for q in questions]
    outcomes = client.run(SUBQUERY_PROMPT, inputs, stage=SUBQUERY_STAGE, params=params)
    return [subqueries_from(q, o, count) for q, o in zip(questions, outcomes, strict=True)]
