"""What the funnel's LLM judges share: their identity and how a failed call becomes a verdict.

The labeller (:mod:`.labeller`) and the critique judges (:mod:`.critiques`) wrap an
:class:`~ragtrail.llm.client.LLMClient` (cached, retried, typed) behind the judge contract, so the
labels and ratings they produce name the judge (``name@version``) that made them and can be
calibrated against human references like any other judge. The version covers the backend, the
model, the prompt (name and version) and the decoding settings that change verdicts; the seed does
not (decoding is greedy by default), so a manual run with another seed keeps its calibration.
"""

from __future__ import annotations

from typing import Any

from ragtrail.generate.steps import failure_from_outcome
from ragtrail.judges.contract import (
    JudgeRole,
    JudgeSpec,
    Verdict,
    VerdictType,
    judge_version,
)
from ragtrail.llm.client import CallOutcome, GenerationParams, LLMClient
from ragtrail.llm.prompts import Prompt

LABELLER = "labeller"
CRITIQUE_PREFIX = "critique."


def critique_judge_name(criterion: str) -> str:
    return f"{CRITIQUE_PREFIX}{criterion}"


def criterion_of(judge_name: str) -> str | None:
    """The criterion of a ``critique.<criterion>`` judge name; None for other judges."""
    return (
        judge_name.removeprefix(CRITIQUE_PREFIX) if judge_name.startswith(CRITIQUE_PREFIX) else None
    )


def llm_judge_spec(
    name: str,
    role: JudgeRole,
    client: LLMClient,
    prompt: Prompt[Any, Any],
    params: GenerationParams,
    verdict_type: VerdictType,
    categories: tuple[str, ...] = (),
    description: str = "",
) -> JudgeSpec:
    model = client.backend.model_id
    version = judge_version(
        backend=client.backend.name,
        model=model,
        prompt=list(prompt.key),
        temperature=params.temperature,
        max_new_tokens=params.max_new_tokens,
        guided_json=params.guided_json,
    )
    return JudgeSpec(
        name=name,
        version=version,
        role=role,
        backend="llm",
        model=f"{client.backend.name}:{model}",
        verdict_type=verdict_type,
        categories=categories,
        description=description,
    )


def failed_verdict(judge: str, outcome: CallOutcome[Any]) -> Verdict:
    fail = failure_from_outcome(outcome)
    return Verdict(judge=judge, value=None, error=fail.cause, raw=tuple(fail.raw))
