"""Short answers through the real LLMClient with scripted backends (test doubles, not models)."""

from __future__ import annotations

import json

from ragtrail.evaluate.sufficiency.short_answers import (
    DEFAULT_SHORT_ANSWER_PARAMS,
    SHORT_ANSWER_PROMPT,
    ShortAnswer,
    ShortAnswerInput,
    ShortAnswerOutput,
    answer_questions,
    short_answer_params,
)
from ragtrail.llm.backends.base import GenerationRequest, GenerationResult
from ragtrail.llm.client import LLMClient
from ragtrail.llm.prompts import PROMPTS
from ragtrail.llm.testing import ScriptedBackend
from tests.unit.generate import routed_backend

LEAVE = "Full-time staff receive 27 days of annual leave. Leave is requested in PeopleHub."
OTHER = "Merge requests need one approval."


def test_scripted_answers_abstention_and_one_batch() -> None:
    backend = routed_backend()
    inputs = [
        ShortAnswerInput(question="How much leave?", passages=[LEAVE, OTHER]),
        ShortAnswerInput(question="How much leave?", passages=[]),
        ShortAnswerInput(question="Approvals?", passages=[OTHER]),
    ]
    answers = answer_questions(LLMClient(backend), inputs)
    assert answers == [
        ShortAnswer("Full-time staff receive 27 days of annual leave.", False, raw=answers[0].raw),
        ShortAnswer("", True, raw=answers[1].raw),
        ShortAnswer("Merge requests need one approval.", False, raw=answers[2].raw),
    ]
    assert [a.abstained for a in answers] == [False, True, False]
    assert json.loads(answers[1].raw[0]) == {"answer": "", "abstain": True}
    assert backend.generate_calls == 1 and len(backend.calls) == 3  # one batch
    request = backend.calls[0]
    assert request.max_new_tokens == DEFAULT_SHORT_ANSWER_PARAMS.max_new_tokens == 128
    assert request.temperature == 0.0
    schema = request.json_schema
    assert schema is not None and schema["required"] == ["answer", "abstain"]
    assert schema["properties"]["answer"]["maxLength"] == 160


def test_text_abstention_counts_even_with_flag_false() -> None:
    reply = json.dumps({"answer": "I don't know.", "abstain": False})
    (answer,) = answer_questions(
        LLMClient(ScriptedBackend([reply])), [ShortAnswerInput(question="q", passages=[LEAVE])]
    )
    assert not answer.failed and answer.abstain_flag is False and answer.abstained


def test_a_cut_off_reply_is_a_failure_with_its_raw_text() -> None:
    complete_but_cut = GenerationResult(
        text=json.dumps({"answer": "27 days", "abstain": False}), finish_reason="length"
    )
    (answer,) = answer_questions(
        LLMClient(ScriptedBackend([complete_but_cut])),
        [ShortAnswerInput(question="q", passages=[LEAVE])],
    )
    assert answer.failed and not answer.abstained
    assert answer.error is not None and answer.error.startswith("truncated")
    assert answer.raw == ('{"answer": "27 days", "abstain": false}',)


def test_malformed_replies_fail_with_every_attempt_kept() -> None:
    cut = GenerationResult(text='{"answer": "27 da', finish_reason="length")
    backend = ScriptedBackend([cut, "Sure! 27 days.", cut])
    (answer,) = answer_questions(
        LLMClient(backend, max_attempts=3), [ShortAnswerInput(question="q", passages=[LEAVE])]
    )
    assert answer.failed and answer.text == "" and answer.abstain_flag is None
    assert answer.raw == ('{"answer": "27 da', "Sure! 27 days.", '{"answer": "27 da')
    # the client repairs the cut-off JSON, but both fields are required: it never validates
    assert answer.error is not None and answer.error.startswith("validation_error")
    assert "abstain: Field required" in answer.error and "max_new_tokens" in answer.error
    assert [r.max_new_tokens for r in backend.calls] == [128, 256, 256]  # the client grows it
    assert answer.as_dict()["raw"] == list(answer.raw) and answer.as_dict()["status"] == "failed"


def test_no_passages_prompt_variant() -> None:
    assert SHORT_ANSWER_PROMPT.key in PROMPTS and SHORT_ANSWER_PROMPT.name == "answer.short"
    system = SHORT_ANSWER_PROMPT.system_message()
    assert "no passage is given, answer from your own knowledge" in system
    assert '"abstain" to true' in system
    closed = SHORT_ANSWER_PROMPT.render(ShortAnswerInput(question="How many moons?", passages=[]))
    assert "<document" not in closed[-1]["content"]
    assert "<question>How many moons?</question>" in closed[-1]["content"]
    # the worked examples show all three cases: answer, abstain, answer without passages
    outputs = [out for _, out in SHORT_ANSWER_PROMPT.examples]
    assert [o.abstain for o in outputs] == [False, True, False]
    assert [len(inp.passages) > 0 for inp, _ in SHORT_ANSWER_PROMPT.examples] == [True, True, False]
    with_passages = SHORT_ANSWER_PROMPT.render(ShortAnswerInput(question="q", passages=[LEAVE]))
    assert '<document field="passages" index="1">' in with_passages[-1]["content"]


def test_output_requires_both_fields_and_params_follow_settings() -> None:
    assert set(ShortAnswerOutput.model_json_schema()["required"]) == {"answer", "abstain"}
    params = short_answer_params(32, 7)
    assert (params.max_new_tokens, params.temperature, params.seed) == (32, 0.0, 7)


def test_backend_error_is_a_failure() -> None:
    def broken(_request: GenerationRequest, _n: int) -> GenerationResult:
        return GenerationResult.failure("boom")

    (answer,) = answer_questions(
        LLMClient(ScriptedBackend(broken), max_attempts=2), [ShortAnswerInput(question="q")]
    )
    assert answer.failed and answer.error == "backend_error: boom" and answer.raw == ("", "")
    assert answer_questions(LLMClient(ScriptedBackend([])), []) == []
