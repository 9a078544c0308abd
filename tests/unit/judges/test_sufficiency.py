"""Sufficiency raters on hand-built cases, with a whitespace token counter and scripted judges
and LLM backends (test doubles, not models)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence

import pytest

from ragtrail.judges.contract import (
    NOT_SUPPORTED,
    SUPPORTED,
    JudgeInput,
    JudgeRole,
    JudgeSpec,
    Verdict,
    judge_version,
)
from ragtrail.judges.entailment import entailment_spec
from ragtrail.judges.sufficiency_raters import (
    INSUFFICIENT,
    NO_GOLD_ANSWER,
    SUFFICIENCY_1SHOT_PROMPT,
    SUFFICIENCY_CATEGORIES,
    SUFFICIENCY_PROMPT,
    SUFFICIENT,
    ChunkedSufficiencyJudge,
    ContainsAnswerJudge,
    EntailmentSufficiencyJudge,
    LlmSufficiencyJudge,
    SufficiencyOutput,
    contains_phrase,
    entailment_hypothesis,
    split_token_chunks,
    truncate_to_tokens,
)
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.client import LLMClient
from ragtrail.llm.prompts import PROMPTS
from ragtrail.llm.testing import ScriptedBackend
from tests.unit.judges._scripted_judges import FAIL, ScriptedJudge


class WordCounter:
    """A token counter test double: a token is a run of non-space characters."""

    def encode(self, text: str) -> list[int]:
        return [len(m.group()) for m in re.finditer(r"\S+", text)]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in re.finditer(r"\S+", text)]

    def count(self, text: str) -> int:
        return len(self.offsets(text))

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]


WORDS = WordCounter()


# ------------------------------------------------------------------------- token budgets


def test_truncation_keeps_a_token_prefix_and_says_so() -> None:
    cut = truncate_to_tokens("alpha beta  gamma delta epsilon", 3, WORDS)
    assert (cut.text, cut.truncated, cut.tokens) == ("alpha beta  gamma", True, 5)
    assert cut.note == "context truncated from 5 to 3 tokens"
    whole = truncate_to_tokens("alpha beta", 2, WORDS)
    assert (whole.text, whole.truncated, whole.tokens, whole.note) == ("alpha beta", False, 2, "")
    with pytest.raises(ValueError, match=">= 1 token"):
        truncate_to_tokens("alpha", 0, WORDS)


def test_token_chunks_are_consecutive_windows() -> None:
    assert split_token_chunks("one two  three four five", 2, WORDS) == [
        "one two  ",
        "three four ",
        "five",
    ]
    assert split_token_chunks("  x y z", 2, WORDS) == ["  x y ", "z"]
    assert split_token_chunks("x y", 5, WORDS) == ["x y"]
    assert split_token_chunks("   ", 5, WORDS) == ["   "]
    assert split_token_chunks("", 5, WORDS) == []


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50])
def test_token_chunks_lose_no_text(size: int) -> None:
    rng = random.Random(size)
    text = "".join(rng.choice(["ab", "c", " ", "\n", "  ", "d."]) for _ in range(200))
    chunks = split_token_chunks(text, size, WORDS)
    assert "".join(chunks) == text
    assert all(WORDS.count(c) <= size for c in chunks)
    assert sum(WORDS.count(c) for c in chunks) == WORDS.count(text)


# ------------------------------------------------------------------------ contains answer


def test_contains_answer_normalises_case_punctuation_and_space() -> None:
    assert contains_phrase("Staff get 27   DAYS, of leave.", "27 days.")
    assert contains_phrase("The X-ray room", "x ray")
    assert not contains_phrase("Staff get 270 days", "27 days")  # whole words only
    assert not contains_phrase("anything", " ... ")  # no words: nothing to find


def test_contains_answer_rater() -> None:
    judge = ContainsAnswerJudge()
    context = "Full-time staff receive 27 days of annual leave."
    verdicts = judge.judge(
        [
            JudgeInput(question="How much leave?", context=context, answer="27 Days"),
            JudgeInput(question="How much leave?", context=context, answer="30 days"),
            JudgeInput(question="How much leave?", context=context, answer="thirty\n27 days"),
            JudgeInput(question="Who is the CEO?", context=context, answer=""),
            JudgeInput(question="How much leave?", context="  ", answer="27 days"),
        ]
    )
    assert [v.value for v in verdicts] == [
        SUFFICIENT,
        INSUFFICIENT,
        SUFFICIENT,
        INSUFFICIENT,
        None,
    ]
    assert verdicts[2].reason == "contains '27 days'"
    assert verdicts[3].reason == NO_GOLD_ANSWER and verdicts[3].ok
    assert verdicts[4].error == "empty context"
    spec = judge.spec
    assert (spec.name, spec.backend, spec.role, spec.categories) == (
        "sufficiency.contains_answer",
        "string-match",
        JudgeRole.SUFFICIENCY,
        SUFFICIENCY_CATEGORIES,
    )


def test_contains_answer_reads_only_the_token_budget() -> None:
    judge = ContainsAnswerJudge(max_context_tokens=4, counter=WORDS)
    (verdict,) = judge.judge(
        [JudgeInput(question="q?", context="a b c d staff get 27 days", answer="27 days")]
    )
    assert verdict.value == INSUFFICIENT
    assert verdict.reason.startswith("context truncated from 8 to 4 tokens; ")
    assert judge.spec.version != ContainsAnswerJudge().spec.version


# ------------------------------------------------------------------------------ LLM rater


def _field(request: GenerationRequest, name: str) -> str:
    """An input field of the request (from the last user message holding the input: a retry
    appends a repair message after it)."""
    user = [m["content"] for m in request.messages if m["content"].startswith("<input>")][-1]
    match = re.search(rf"<{name}>(.*?)</{name}>|field=\"{name}\">\n(.*?)\n</document>", user, re.S)
    assert match is not None, user
    return match.group(1) if match.group(1) is not None else match.group(2)


def responder(request: GenerationRequest, _number: int) -> str:
    """Sufficient for questions about cats, insufficient for dogs, garbage otherwise."""
    question = _field(request, "question")
    if "cat" in question:
        return json.dumps({"reason": " The cat is named. ", "sufficient": True})
    if "dog" in question:
        return json.dumps({"reason": "No dog here.", "sufficient": False})
    return "I think so!"


def _llm(shots: int = 0, budget: int = 6000, model_id: str = "m-1") -> LlmSufficiencyJudge:
    backend = ScriptedBackend(responder, model_id=model_id)
    return LlmSufficiencyJudge(
        LLMClient(backend, max_attempts=2), shots=shots, max_context_tokens=budget, counter=WORDS
    )


def test_llm_rater_verdicts_failures_and_order() -> None:
    judge = _llm()
    verdicts = judge.judge(
        [
            JudgeInput(question="Which cat?", context="Tom is the cat."),
            JudgeInput(question="Which dog?", context="Tom is the cat."),
            JudgeInput(question="Which bird?", context="Tom is the cat."),
            JudgeInput(question="", context="Tom is the cat."),
        ]
    )
    assert [v.value for v in verdicts] == [SUFFICIENT, INSUFFICIENT, None, None]
    assert verdicts[0].reason == "The cat is named."
    assert verdicts[2].raw == ("I think so!", "I think so!")  # both attempts kept
    assert verdicts[2].error
    assert verdicts[3].error == "empty question" and verdicts[3].raw == ()
    assert all(v.judge == judge.spec.ref for v in verdicts)
    assert len(judge._client.backend.calls) == 1 + 1 + 2  # the empty question is never asked


def test_llm_rater_cuts_the_context_and_records_it() -> None:
    judge = _llm(budget=3)
    (verdict,) = judge.judge([JudgeInput(question="Which cat?", context="Tom is the cat here.")])
    assert verdict.value == SUFFICIENT
    assert verdict.reason == "context truncated from 5 to 3 tokens; The cat is named."
    (request,) = judge._client.backend.calls
    assert _field(request, "context") == "Tom is the"


def test_llm_rater_prompts_names_and_versions() -> None:
    zero, one = _llm(0), _llm(1)
    assert (zero.spec.name, one.spec.name) == ("sufficiency.llm", "sufficiency.llm_1shot")
    assert zero.spec.role is JudgeRole.SUFFICIENCY and zero.spec.categories == (
        SUFFICIENT,
        INSUFFICIENT,
    )
    assert len({zero.spec.version, one.spec.version, _llm(0, budget=100).spec.version}) == 3
    assert _llm(0, model_id="m-2").spec.version != zero.spec.version
    assert _llm(0).spec.version == zero.spec.version  # deterministic
    assert SUFFICIENCY_PROMPT.key in PROMPTS and SUFFICIENCY_1SHOT_PROMPT.key in PROMPTS
    # the reason comes before the decision, and the one-shot variant adds one example turn
    assert list(SufficiencyOutput.model_json_schema()["properties"]) == ["reason", "sufficient"]
    item = SUFFICIENCY_PROMPT.input_model(question="q", context="c")
    assert len(SUFFICIENCY_1SHOT_PROMPT.render(item)) == len(SUFFICIENCY_PROMPT.render(item)) + 2
    with pytest.raises(ValueError, match="shots"):
        _llm(2)


# -------------------------------------------------------------------------- chunked rater


def _sufficiency_script(script: Mapping[str, object]) -> ScriptedJudge:
    return ScriptedJudge(
        script,
        name="sufficiency.scripted",
        role=JudgeRole.SUFFICIENCY,
        categories=SUFFICIENCY_CATEGORIES,
        key=lambda item: item.context,
    )


def test_chunked_rater_any_chunk_rule_in_one_batch() -> None:
    inner = _sufficiency_script(
        {
            "a b ": INSUFFICIENT,
            "c d ": SUFFICIENT,
            "e": INSUFFICIENT,
            "f g ": INSUFFICIENT,
            "h": INSUFFICIENT,
        }
    )
    judge = ChunkedSufficiencyJudge(inner, chunk_tokens=2, counter=WORDS)
    verdicts = judge.judge(
        [
            JudgeInput(question="q1", context="a b c d e"),
            JudgeInput(question="q2", context="f g h"),
            JudgeInput(question="q3", context=""),
        ]
    )
    assert [v.value for v in verdicts] == [SUFFICIENT, INSUFFICIENT, None]
    assert verdicts[0].reason == "chunk 2 of 3 is sufficient"
    assert verdicts[1].reason == "none of the 2 chunks is sufficient"
    assert verdicts[2].error == "empty context"
    assert inner.batches == [5]  # every window of every item in one call
    assert judge.spec.name == "sufficiency.chunked" and judge.spec.model == inner.spec.ref


def test_chunked_rater_failure_rule() -> None:
    inner = _sufficiency_script({"a b ": FAIL, "c d": INSUFFICIENT, "x y ": FAIL, "z": SUFFICIENT})
    judge = ChunkedSufficiencyJudge(inner, chunk_tokens=2, counter=WORDS)
    failed, decided = judge.judge(
        [JudgeInput(question="q1", context="a b c d"), JudgeInput(question="q2", context="x y z")]
    )
    assert failed.value is None and failed.raw == ("{oops",)
    assert failed.error == (
        "1 of 2 chunks failed and no other chunk is sufficient (chunk 1: unparseable)"
    )
    assert decided.value == SUFFICIENT and decided.reason == "chunk 2 of 2 is sufficient"


def test_chunked_rater_truncates_first_and_versions() -> None:
    inner = _sufficiency_script({"a b ": INSUFFICIENT, "c d": INSUFFICIENT})
    judge = ChunkedSufficiencyJudge(inner, chunk_tokens=2, max_context_tokens=4, counter=WORDS)
    (verdict,) = judge.judge([JudgeInput(question="q", context="a b c d e f")])
    assert verdict.value == INSUFFICIENT
    assert verdict.reason == (
        "context truncated from 6 to 4 tokens; none of the 2 chunks is sufficient"
    )
    other = ChunkedSufficiencyJudge(inner, chunk_tokens=3, max_context_tokens=4, counter=WORDS)
    assert other.spec.version != judge.spec.version
    with pytest.raises(ValueError, match="not a sufficiency rater"):
        ChunkedSufficiencyJudge(ScriptedJudge({}, categories=SUFFICIENCY_CATEGORIES), counter=WORDS)


# ------------------------------------------------------------------------ entailment rater


class ScriptedEntailment:
    """An entailment judge double: verdicts looked up by premise (stripped), given backend."""

    def __init__(self, script: Mapping[str, object], *, backend: str = "nli-classifier") -> None:
        self.script = dict(script)
        self.threshold = 0.5
        self.pairs: list[JudgeInput] = []
        self._spec: JudgeSpec = entailment_spec(
            name="entailment.scripted",
            version=judge_version(backend=backend, script=sorted(map(str, self.script.items()))),
            backend=backend,
            model="test",
            approximate=backend == "embedding-similarity",
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        self.pairs += items
        out = []
        for item in items:
            answer = self.script[item.premise.strip()]
            if answer is FAIL:
                out.append(Verdict(self.spec.ref, None, error="unparseable", raw=("{oops",)))
            elif isinstance(answer, tuple):  # (category, score): a non-probability judge
                out.append(Verdict(self.spec.ref, answer[0], score=answer[1]))
            else:
                score = float(answer)  # type: ignore[arg-type]
                value = SUPPORTED if score >= self.threshold else NOT_SUPPORTED
                out.append(Verdict(self.spec.ref, value, score=score))
        return out


def _entailment_rater(inner: ScriptedEntailment, threshold: float = 0.05, **kw: int):
    return EntailmentSufficiencyJudge(
        inner, threshold=threshold, chunk_tokens=2, counter=WORDS, **kw
    )


def test_entailment_rater_max_probability_over_chunks() -> None:
    inner = ScriptedEntailment(
        {"a b": 0.01, "c d": 0.07, "e f": 0.01, "g h": 0.04, "i j": FAIL, "k l": 0.30, "m": 0.02}
    )
    judge = _entailment_rater(inner)
    verdicts = judge.judge(
        [
            JudgeInput(question="How many?", context="a b c d", answer="27 days"),
            JudgeInput(question="How many?", context="e f g h", answer="27 days"),
            JudgeInput(question="How many?", context="i j k l", answer="27 days"),
            JudgeInput(question="How many?", context="i j m", answer="27 days"),
            JudgeInput(question="Who?", context="a b c d", answer=""),
        ]
    )
    assert [v.value for v in verdicts] == [SUFFICIENT, INSUFFICIENT, SUFFICIENT, None, INSUFFICIENT]
    assert [v.score for v in verdicts[:4]] == [0.07, 0.04, 0.30, 0.02]
    assert verdicts[0].reason == "max P(entailment) 0.0700 over 2 pair(s), threshold 0.05"
    assert verdicts[3].raw == ("{oops",) and "1 of 2 entailment verdicts failed" in str(
        verdicts[3].error
    )
    assert verdicts[4].reason == NO_GOLD_ANSWER and verdicts[4].score is None
    assert len(inner.pairs) == 8  # the item without a gold answer is never sent
    assert inner.pairs[0].hypothesis == entailment_hypothesis("How many?", "27 days")
    assert inner.pairs[0].hypothesis == "How many? 27 days"
    spec = judge.spec
    assert not spec.approximate and spec.model == inner.spec.ref
    assert spec.name == "sufficiency.entailment" and spec.role is JudgeRole.SUFFICIENCY


def test_entailment_rater_threshold_and_every_gold_answer() -> None:
    inner = ScriptedEntailment({"a b": 0.04, "c": 0.06})
    item = JudgeInput(question="q", context="a b c", answer="one\ntwo")
    (low,) = _entailment_rater(inner, threshold=0.05).judge([item])
    (high,) = _entailment_rater(inner, threshold=0.1).judge([item])
    assert (low.value, low.score, high.value) == (SUFFICIENT, 0.06, INSUFFICIENT)
    assert [p.hypothesis for p in inner.pairs[:4]] == ["q one", "q one", "q two", "q two"]
    versions = {
        _entailment_rater(inner, threshold=0.05).spec.version,
        _entailment_rater(inner, threshold=0.1).spec.version,
        _entailment_rater(inner, threshold=0.05, max_context_tokens=10).spec.version,
    }
    assert len(versions) == 3


def test_entailment_rater_without_probabilities_uses_the_judges_own_verdicts() -> None:
    inner = ScriptedEntailment(
        {"a b": (SUPPORTED, 0.80), "c d": (NOT_SUPPORTED, 0.95), "e": (NOT_SUPPORTED, 0.01)},
        backend="embedding-similarity",
    )
    judge = _entailment_rater(inner)
    supported, cosine_only = judge.judge(
        [
            JudgeInput(question="q", context="c d a b", answer="x"),
            JudgeInput(question="q", context="c d e", answer="x"),
        ]
    )
    # 0.95 is a cosine: far above 0.05, yet the judge said not_supported for every window
    assert (supported.value, cosine_only.value) == (SUFFICIENT, INSUFFICIENT)
    assert cosine_only.score == 0.95
    assert "own verdicts (no probability)" in cosine_only.reason
    spec = judge.spec
    assert spec.approximate and spec.description.startswith("APPROXIMATE")
    assert spec.backend == "entailment:embedding-similarity"
    # the threshold plays no part, so it does not change the version
    assert _entailment_rater(inner, threshold=0.5).spec.version == spec.version


def test_entailment_rater_needs_an_entailment_judge() -> None:
    with pytest.raises(ValueError, match="not an entailment judge"):
        EntailmentSufficiencyJudge(
            ScriptedJudge({}, categories=SUFFICIENCY_CATEGORIES), counter=WORDS
        )
