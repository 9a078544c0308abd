"""The extractor role: a question and numbered passages in, the evidence that answers it out.

:data:`EVIDENCE_PROMPT` asks for ``{"evidence": "..."}``: the part of the passages that answers
the question, as short as possible and in the passages' own words (SEER's extractor, METHODS
§10). An empty string says the passages hold nothing that answers it. :func:`extract_evidence`
sends every input in one batched, cached client call. Like every model call of the project, a
reply that fails or is cut off at the token budget stays a failed :class:`Evidence` with the raw
text of each attempt; it is never replaced by a guess.

Self-sampling for training uses the same prompt with :func:`sampling_params` (SEER's defaults:
temperature 1.0, top-p 1.0, top-k 80) and one seed per sample, so every sample has its own cache
entry and a rerun draws the same ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS, Prompt

EXTRACT_STAGE = "evidence.extract"
TRUNCATED = "truncated"


class EvidenceInput(BaseModel):
    """A question and the numbered passages to take its evidence from."""

    question: str
    passages: list[str] = Field(default_factory=list)


class EvidenceOutput(BaseModel):
    """The evidence: sentences or phrases of the passages, "" when none answers."""

    evidence: str = Field(
        description="the words of the passages that answer the question, as few as possible"
    )


def evidence_schema(_inp: EvidenceInput) -> JsonObject:
    """What guided decoding enforces: one string field."""
    return {
        "type": "object",
        "properties": {"evidence": {"type": "string"}},
        "required": ["evidence"],
        "additionalProperties": False,
    }


_EX_PASSAGES = [
    "Visitors sign in at the front desk. Badges are printed there and must be worn at all "
    "times. The desk is staffed from 7 am to 7 pm.",
    "Parking for visitors is in lot C, next to the loading dock. Lot A is for staff.",
]

EVIDENCE_PROMPT: Prompt[EvidenceInput, EvidenceOutput] = PROMPTS.register(
    Prompt(
        name="evidence.extract",
        version="1",
        instruction=(
            "Copy from the numbered passages only the words that answer the question: the one "
            "sentence or phrase a reader needs, nothing around it. Do not add facts, do not "
            "explain, do not answer from your own knowledge. If no passage answers the "
            'question, reply with an empty "evidence". Reply in JSON.'
        ),
        input_model=EvidenceInput,
        output_model=EvidenceOutput,
        examples=[
            (
                EvidenceInput(question="Where do visitors park?", passages=_EX_PASSAGES),
                EvidenceOutput(evidence="Parking for visitors is in lot C."),
            ),
            (
                EvidenceInput(question="Is there a canteen for visitors?", passages=_EX_PASSAGES),
                EvidenceOutput(evidence=""),
            ),
        ],
        document_fields=frozenset({"passages"}),
        decoding_schema=evidence_schema,
    )
)


@dataclass(frozen=True)
class Evidence:
    """One extraction: ``text`` when the reply parsed, else ``failed`` with the error and the
    raw text of every attempt."""

    text: str
    failed: bool = False
    error: str | None = None
    raw: tuple[str, ...] = ()

    def as_dict(self) -> JsonObject:
        out: JsonObject = {"status": "failed" if self.failed else "ok", "text": self.text}
        if self.failed:
            out["error"] = self.error
            out["raw"] = list(self.raw)
        return out


def extraction_params(max_new_tokens: int, seed: int) -> GenerationParams:
    """Greedy extraction with the configured budget (the nightly evaluation)."""
    return GenerationParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)


def sampling_params(
    max_new_tokens: int, *, temperature: float, top_p: float, top_k: int
) -> GenerationParams:
    """Sampled extraction for self-alignment; the per-sample seeds are passed to the call."""
    return GenerationParams(
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k
    )


def extract_evidence(
    client: LLMClient,
    inputs: Sequence[EvidenceInput],
    params: GenerationParams,
    *,
    stage: str = EXTRACT_STAGE,
    seeds: Sequence[int] | None = None,
) -> list[Evidence]:
    """One :class:`Evidence` per input, in order, from one batched client call."""
    if not inputs:
        return []
    outcomes = client.run(EVIDENCE_PROMPT, list(inputs), stage=stage, params=params, seeds=seeds)
    out = []
    for outcome in outcomes:
        raw = tuple(outcome.raw_texts)
        if outcome.ok and outcome.cut_off:
            out.append(Evidence("", True, f"{TRUNCATED}: cut off at the token limit", raw))
        elif outcome.ok and outcome.value is not None:
            out.append(Evidence(outcome.value.evidence.strip(), raw=raw))
        else:
            out.append(Evidence("", True, outcome.failure, raw))
    return out


def completion_of(evidence: str) -> str:
    """The reply the extractor writes for ``evidence`` (what preference training scores)."""
    return EvidenceOutput(evidence=evidence).model_dump_json()
