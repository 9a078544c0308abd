"""The LLM entailment judge through the real LLMClient, with a scripted backend (not a model)."""

from __future__ import annotations

import json

import pytest

from ragtrail.judges.contract import ENTAILMENT_CATEGORIES, NOT_SUPPORTED, SUPPORTED, JudgeInput
from ragtrail.judges.llm_entailment import (
    DEFAULT_PARAMS,
    ENTAILMENT_PROMPT,
    EntailmentOutput,
    LLMEntailmentJudge,
)
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS
from ragtrail.llm.testing import ScriptedBackend


def _claim(request: GenerationRequest) -> str:
    """The hypothesis of the input (the last message holding one; retries append messages)."""
    text = [m["content"] for m in request.messages if "<hypothesis>" in m["content"]][-1]
    return text.split("<hypothesis>")[1].split("</hypothesis>")[0]


def responder(request: GenerationRequest, _number: int) -> str:
    """ "supported" for claims about cats, "not_supported" for dogs, garbage otherwise."""
    claim = _claim(request)
    if "cat" in claim:
        return json.dumps({"verdict": "supported", "reason": "  The cat is named. "})
    if "dog" in claim:
        return json.dumps({"verdict": "not_supported"})
    return "Sure! The claim is probably true."


def test_output_model_admits_only_the_two_categories() -> None:
    schema = EntailmentOutput.model_json_schema()
    assert tuple(schema["properties"]["verdict"]["enum"]) == ENTAILMENT_CATEGORIES
    assert schema["required"] == ["verdict"]
    with pytest.raises(ValueError):
        EntailmentOutput.model_validate({"verdict": "maybe"})
    assert ENTAILMENT_PROMPT.key in PROMPTS


def test_verdicts_failures_and_order() -> None:
    backend = ScriptedBackend(responder, model_id="scripted-judge-v1")
    judge = LLMEntailmentJudge(LLMClient(backend, max_attempts=2))
    items = [
        JudgeInput(premise="A cat sat on the mat.", hypothesis="A cat sat."),
        JudgeInput(premise="", hypothesis="A cat."),
        JudgeInput(premise="A cat sat on the mat.", hypothesis="A dog sat."),
        JudgeInput(premise="A cat sat on the mat.", hypothesis="It rained."),
    ]
    verdicts = judge.judge(items)
    assert [v.value for v in verdicts] == [SUPPORTED, None, NOT_SUPPORTED, None]
    assert verdicts[0].reason == "The cat is named." and verdicts[0].score is None
    assert verdicts[1].error == "empty premise" and verdicts[1].raw == ()
    malformed = verdicts[3]
    assert not malformed.ok and malformed.error and malformed.error.startswith("parse_error")
    assert malformed.raw == ("Sure! The claim is probably true.",) * 2  # both attempts kept
    assert len(backend.calls) == 4  # the empty input never reached the model; one retry
    first = backend.calls[0].messages
    assert "<document" in first[-1]["content"] and "A cat sat on the mat." in first[-1]["content"]
    assert "A cat sat." in first[-1]["content"]
    assert backend.calls[0].max_new_tokens == DEFAULT_PARAMS.max_new_tokens
    guided = backend.calls[0].json_schema  # guided decoding may produce the verdict only
    assert guided is not None and list(guided["properties"]) == ["verdict"]
    assert guided["additionalProperties"] is False and guided["required"] == ["verdict"]


def test_spec_and_version() -> None:
    judge = LLMEntailmentJudge(LLMClient(ScriptedBackend(responder, model_id="m-1")))
    spec = judge.spec
    assert (spec.name, spec.backend, spec.model) == ("entailment.llm", "llm", "m-1")
    assert spec.categories == ENTAILMENT_CATEGORIES and not spec.approximate
    same = LLMEntailmentJudge(LLMClient(ScriptedBackend(responder, model_id="m-1")))
    other_model = LLMEntailmentJudge(LLMClient(ScriptedBackend(responder, model_id="m-2")))
    other_params = LLMEntailmentJudge(
        LLMClient(ScriptedBackend(responder, model_id="m-1")),
        params=GenerationParams(max_new_tokens=DEFAULT_PARAMS.max_new_tokens * 2),
    )
    assert same.spec.version == spec.version
    assert len({spec.version, other_model.spec.version, other_params.spec.version}) == 3
