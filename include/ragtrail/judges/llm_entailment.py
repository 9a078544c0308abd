"""An entailment judge that asks an LLM, through the typed, cached, retried LLM client.

The prompt (:data:`ENTAILMENT_PROMPT`) shows the premise as a fenced document and the hypothesis
as a claim, and the output model admits only ``supported`` or ``not_supported`` (reason optional,
after the verdict so a cut-off reason never costs the verdict). A reply that never validates,
after the client's retries, becomes a failed verdict holding every raw reply. An LLM reply
carries no calibrated probability, so ``Verdict.score`` stays None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from ragtrail.judges.contract import JudgeInput, JudgeSpec, Verdict, judge_version
from ragtrail.judges.entailment import (
    LLM_JUDGE_NAME,
    entailment_spec,
    failed_verdict,
    input_problem,
)
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS, Prompt

BACKEND = "llm"
STAGE = "judge.entailment"
DEFAULT_PARAMS = GenerationParams(max_new_tokens=64, temperature=0.0, seed=0)
"""Greedy; 64 tokens hold the verdict and a short reason (the client doubles it on a cut-off)."""


class EntailmentInput(BaseModel):
    """The source text and the claim to check against it."""

    premise: str
    hypothesis: str


class EntailmentOutput(BaseModel):
    """The verdict first, then an optional one-sentence reason."""

    verdict: Literal["supported", "not_supported"]
    reason: str = ""


ENTAILMENT_PROMPT: Prompt[EntailmentInput, EntailmentOutput] = Prompt(
    name="entailment",
    version="1",
    instruction=(
        "Decide whether the document supports the claim. Answer supported only if everything "
        "the claim says is stated in the document or follows directly from it; answer "
        "not_supported if any part is missing from the document or contradicts it. Reply in "
        "JSON with the verdict and a one-sentence reason."
    ),
    input_model=EntailmentInput,
    output_model=EntailmentOutput,
    examples=[
        (
            EntailmentInput(
                premise="The harbour ferry leaves every 40 minutes from 6 am and costs 3 euros.",
                hypothesis="A ferry ticket costs 3 euros.",
            ),
            EntailmentOutput(verdict="supported", reason="The document gives the 3 euro fare."),
        ),
        (
            EntailmentInput(
                premise="The harbour ferry leaves every 40 minutes from 6 am and costs 3 euros.",
                hypothesis="The ferry runs all night.",
            ),
            EntailmentOutput(
                verdict="not_supported", reason="Only the first departure time is given."
            ),
        ),
    ],
    document_fields=frozenset({"premise"}),
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
        version = judge_version(
            backend=BACKEND,
            model=model,
            prompt=prompt.name,
            prompt_version=prompt.version,
            max_new_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            seed=params.seed,
            guided_json=params.guided_json,
            max_attempts=client.max_attempts,
        )
        self._spec = entailment_spec(
            name=LLM_JUDGE_NAME,
            version=version,
            backend=BACKEND,
            model=model,
            description=f"LLM {model} with prompt {prompt.name} v{prompt.version}",
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        ref = self._spec.ref
        verdicts: dict[int, Verdict] = {}
        valid: list[int] = []
        for i, item in enumerate(items):
            problem = input_problem(item)
            if problem is None:
                valid.append(i)
            else:
                verdicts[i] = failed_verdict(ref, problem)
        inputs = [
            EntailmentInput(premise=items[i].premise, hypothesis=items[i].hypothesis) for i in valid
        ]
        outcomes = self._client.run(self._prompt, inputs, stage=self._stage, params=self._params)
        for i, outcome in zip(valid, outcomes, strict=True):
            if outcome.ok and outcome.value is not None:
                value = outcome.value
                verdicts[i] = Verdict(judge=ref, value=value.verdict, reason=value.reason.strip())
            else:
                cause = str(outcome.cause) if outcome.cause is not None else "failed"
                error = f"{cause}: {outcome.error}" if outcome.error else cause
                verdicts[i] = failed_verdict(ref, error, outcome.raw_texts)
        return [verdicts[i] for i in range(len(items))]
