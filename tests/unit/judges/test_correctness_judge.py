"""The LLM correctness judge through the real LLMClient with scripted backends (not models), and
its calibration references built from golden items."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ragtrail.judges.contract import JudgeInput, JudgeRole, VerdictType
from ragtrail.judges.correctness import (
    CORRECT,
    CORRECTNESS_CATEGORIES,
    CORRECTNESS_PROMPT,
    INCORRECT,
    CorrectnessExample,
    LlmCorrectnessJudge,
    correctness_examples,
)
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import PROMPTS
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.records import QAItem
from tests.unit.generate import calls_by_prompt, routed_backend

Q = "How many days of annual leave do full-time staff get?"


def _item(answer: str, gold: str = "27 days") -> JudgeInput:
    return JudgeInput(question=Q, answer=answer, context=gold)


def test_verdicts_from_the_scripted_overlap_judge() -> None:
    backend = routed_backend()
    judge = LlmCorrectnessJudge(LLMClient(backend))
    verdicts = judge.judge(
        [
            _item("They get 27 days a year."),
            _item("20 days."),
            _item("27 days", gold="twenty-seven days\n27 days"),  # any gold, one per line
        ]
    )
    assert [v.value for v in verdicts] == [CORRECT, INCORRECT, CORRECT]
    assert all(v.ok and v.reason == "scripted word overlap" for v in verdicts)
    assert all(v.judge == judge.spec.ref for v in verdicts)
    assert calls_by_prompt(backend) == {"judge.correctness": 3}
    request = backend.calls[2]
    assert "<gold_answers>" in request.messages[-1]["content"]
    assert '["twenty-seven days", "27 days"]' in request.messages[-1]["content"]
    schema = request.json_schema
    assert schema is not None and schema["required"] == ["reason", "correct"]
    assert schema["properties"]["reason"]["maxLength"] == 120


def test_failures_keep_raw_and_empty_inputs_never_reach_the_model() -> None:
    backend = ScriptedBackend(["Yes, it is right.", "Still prose."])
    judge = LlmCorrectnessJudge(LLMClient(backend, max_attempts=2))
    verdicts = judge.judge(
        [
            _item(""),
            JudgeInput(question=Q, answer="27 days", context=" \n "),
            _item("27 days"),
        ]
    )
    assert [v.value for v in verdicts] == [None, None, None]
    assert verdicts[0].error == "empty candidate answer" and verdicts[0].raw == ()
    assert verdicts[1].error == "empty gold answer"
    failed = verdicts[2]
    assert failed.error is not None and failed.error.startswith("parse_error")
    assert failed.raw == ("Yes, it is right.", "Still prose.")  # both attempts
    assert len(backend.calls) == 2  # only the third item was sent (twice)
    assert judge.judge([]) == []


def test_reply_parsing() -> None:
    reply = json.dumps({"reason": "  Same number of days. ", "correct": True})
    judge = LlmCorrectnessJudge(LLMClient(ScriptedBackend([reply])))
    (verdict,) = judge.judge([_item("twenty-seven days")])
    assert verdict.value == CORRECT and verdict.reason == "Same number of days."
    assert verdict.raw == (reply,)


def test_spec_and_version() -> None:
    def make(model: str = "m-1", params: GenerationParams | None = None) -> LlmCorrectnessJudge:
        client = LLMClient(ScriptedBackend([], model_id=model))
        return LlmCorrectnessJudge(client, params) if params else LlmCorrectnessJudge(client)

    spec = make().spec
    assert (spec.name, spec.role, spec.backend, spec.model) == (
        "correctness.llm",
        JudgeRole.CORRECTNESS,
        "llm",
        "m-1",
    )
    assert spec.verdict_type is VerdictType.CATEGORY and spec.categories == CORRECTNESS_CATEGORIES
    assert CORRECTNESS_PROMPT.key in PROMPTS and CORRECTNESS_PROMPT.name == "judge.correctness"
    assert make().spec.version == spec.version
    assert make("m-2").spec.version != spec.version
    assert make(params=GenerationParams(max_new_tokens=32)).spec.version != spec.version
    other_prompt = dataclasses.replace(CORRECTNESS_PROMPT, version="2")
    client = LLMClient(ScriptedBackend([], model_id="m-1"))
    assert LlmCorrectnessJudge(client, prompt=other_prompt).spec.version != spec.version


ITEMS = [
    QAItem("q1", "How much leave?", "fact_single", "27 days"),
    QAItem("q2", "Admin password length?", "fact_single", "20 characters"),
    QAItem("q3", "Summarise leave.", "summary", "27 Days of leave"),  # overlaps q1's answer
    QAItem("q4", "Who won in 1902?", "unanswerable", ""),
    QAItem("q5", "Why?", "reasoning", "  "),  # no gold answer
]


def test_correctness_examples_pair_each_item_with_another_items_answer() -> None:
    examples = correctness_examples(ITEMS, n=10, seed=3)
    by_id = {e.id: e for e in examples}
    assert set(by_id) == {
        "q1:correct",
        "q1:incorrect",
        "q2:correct",
        "q2:incorrect",
        "q3:correct",
        "q3:incorrect",
    }
    assert by_id["q1:correct"] == CorrectnessExample(
        "q1:correct", "How much leave?", "27 days", ("27 days",), CORRECT
    )
    # "27 Days of leave" contains q1's words, so only q2's answer is a different answer
    assert by_id["q1:incorrect"].candidate == "20 characters"
    assert by_id["q3:incorrect"].candidate == "20 characters"
    assert by_id["q2:incorrect"].candidate in {"27 days", "27 Days of leave"}
    assert by_id["q2:incorrect"].label == INCORRECT and by_id["q2:incorrect"].golds == (
        "20 characters",
    )
    assert correctness_examples(ITEMS, n=10, seed=3) == examples  # seeded
    assert by_id["q2:incorrect"].judge_input() == JudgeInput(
        question="Admin password length?", answer=by_id["q2:incorrect"].candidate,
        context="20 characters",
    )  # fmt: skip


def test_correctness_examples_sample_n_items_and_need_a_different_answer() -> None:
    one = correctness_examples(ITEMS, n=1, seed=3)
    assert len(one) == 2 and [e.label for e in one] == [CORRECT, INCORRECT]
    alone = correctness_examples([ITEMS[0], ITEMS[2]], n=5, seed=0)  # overlapping answers only
    assert [e.label for e in alone] == [CORRECT, CORRECT]
    with pytest.raises(ValueError, match="n must be"):
        correctness_examples(ITEMS, n=0, seed=0)
