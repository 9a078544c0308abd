"""The version of a judge that asks an LLM: everything that can change its verdicts."""

from __future__ import annotations

from typing import Any

from ragtrail.judges.contract import judge_version
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import Prompt

LLM_BACKEND = "llm"


def llm_judge_version(
    client: LLMClient, prompt: Prompt[Any, Any], params: GenerationParams, **extra: Any
) -> str:
    """:func:`~ragtrail.judges.contract.judge_version` over the model, the prompt's name and
    version, the decoding parameters, the client's attempt limit and the judge's own ``extra``
    settings (shots, context budget...)."""
    return judge_version(
        backend=LLM_BACKEND,
        model=str(client.backend.model_id),
        prompt=prompt.name,
        prompt_version=prompt.version,
        max_new_tokens=params.max_new_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        seed=params.seed,
        guided_json=params.guided_json,
        max_attempts=client.max_attempts,
        **extra,
    )
