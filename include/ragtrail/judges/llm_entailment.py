"""An entailment judge that asks an LLM, through the typed, cached, retried LLM client.

The prompt (:data:`ENTAILMENT_PROMPT`) shows the premise as a fenced document and the hypothesis
as a claim, and the output model admits only ``supported`` or ``not_supported``, with an optional
reason after it. The prompt asks for the verdict alone and guided decoding
enforces just that (:func:`verdict_only_schema`): measured on the bundled SmolLM2-135M with HAGRID
pairs, the model otherwise wrote 30-55-token reasons that restated the document, each decoding
step of a free-text string costing far more than one inside the two-value verdict. A reply that never validates,
after the client's retries, becomes a failed verdict holding every raw reply. An LLM reply
carries no calibrated probability, so ``Verdict.score`` stays None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.contract import JudgeInput, JudgeSpec, Verdict
from ragtrail.judges.entailment import (
    LLM_JUDGE_NAME,
    entailment_spec,
    failed_verdict,
    judge_nonempty,
)
from ragtrail.judges.llm_judge import LLM_BACKEND, llm_judge_version
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS, Prompt

STAGE = "judge.entailment"
DEFAULT_PARAMS = GenerationParams(max_new_tokens=32, temperature=0.0, seed=0)
"""Greedy; 32 tokens hold the verdict JSON with room for a few words of reason from an unguided
backend (a reply cut off by the budget is retried by the client with the budget doubled)."""


_EX_PREMISE = "The harbour ferry leaves every 40 minutes from 6 am and costs 3 euros."


class EntailmentInput(BaseModel):
    """The source text and the claim to check against it."""

    premise: str
    hypothesis: str


class EntailmentOutput(BaseModel):
    """The verdict, and a reason if the model gives one (asked for only the verdict)."""

    verdict: Literal["supported", "not_supported"]
    reason: str = ""


def verdict_only_schema(_inp: EntailmentInput) -> JsonObject:
    """What guided decoding enforces: an object holding only the verdict.

    The output model still accepts a reason (from backends without guided decoding); guided
    backends close the object right after the verdict, so no decoding step goes to prose.
    """
    verdict = EntailmentOutput.model_json_schema()["properties"]["verdict"]
    return {
        "type": "object",
        "properties": {"verdict": verdict},
        "required": ["verdict"],
        "additionalProperties": False,
    }


ENTAILMENT_PROMPT: Prompt[EntailmentInput, EntailmentOutput] = Prompt(
    name="entailment",
    version="1",
    instruction=(
        "Decide whether the document supports the claim. Answer supported only if everything "
        "the claim says is stated in the document or follows directly from it; answer "
        "not_supported if any part is missing from the document or contradicts it. Reply in "
        "JSON with the verdict."
    ),
    input_model=EntailmentInput,
    output_model=EntailmentOutput,
    examples=[
        (
            EntailmentInput(premise=_EX_PREMISE, hypothesis="A ferry ticket costs 3 euros."),
            EntailmentOutput(verdict="supported"),
        ),
        (
            EntailmentInput(premise=_EX_PREMISE, hypothesis="The ferry runs all night."),
            EntailmentOutput(verdict="not_supported"),
        ),
    ],
    document_fields=frozenset({"premise"}),
    decoding_schema=verdict_only_schema,
)
if ENTAILMENT_PROMPT.key not in PROMPTS:  # the process-wide registry, for listing and auditing
    PROMPTS.register(ENTAILMENT_PROMPT)


class LLMEntailmentJudge:
    """Entailment verdicts from an LLM via :meth:`LLMClient.run` (cache, retries, usage).

    The spec's model is the client backend's ``model_id``; its version covers the prompt name
    and version, the model, the decoding parameters and the client's attempt limit.
    """

    def __init__(
        self,
        client: LLMClient,
        *,
        prompt: Prompt[EntailmentInput, EntailmentOutput] = ENTAILMENT_PROMPT,
        params: GenerationParams = DEFAULT_PARAMS,
        stage: str = STAGE,
    ) -> None:
        self._client = client
        self._prompt = prompt
        self._params = params
        self._stage = stage
        model = str(client.backend.model_id)
        version = llm_judge_version(client, prompt, params)
        self._spec = entailment_spec(
            name=LLM_JUDGE_NAME,
            version=version,
            backend=LLM_BACKEND,
            model=model,
            description=f"LLM {model} with prompt {prompt.name} v{prompt.version}",
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        return judge_nonempty(self._spec.ref, items, self._judge_valid)

    def _judge_valid(self, items: list[JudgeInput]) -> list[Verdict]:
        ref = self._spec.ref
        inputs = [EntailmentInput(premise=i.premise, hypothesis=i.hypothesis) for i in items]
        outcomes = self._client.run(self._prompt, inputs, stage=self._stage, params=self._params)
        verdicts = []
        for outcome in outcomes:
            if outcome.ok and outcome.value is not None:
                value = outcome.value
                verdicts.append(
                    Verdict(judge=ref, value=value.verdict, reason=value.reason.strip())
                )
            else:
                verdicts.append(failed_verdict(ref, outcome.failure, outcome.raw_texts))
        return verdicts
