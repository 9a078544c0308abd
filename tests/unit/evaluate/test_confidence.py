"""P(True) and P(Correct) through the cached client, with a scripted backend (a test double).

The scripted P(True) asker says "true" when the proposed answer shares a content word with the
first passage (``tests.unit.generate.shares_first_passage_word``); tests that need replies to
differ from draw to draw read the draw number back from the request's seed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ragtrail.evaluate.sufficiency.confidence import (
    ConfidenceRow,
    ConfidenceScore,
    draw_seeds,
    p_correct,
    p_true,
)
from ragtrail.llm.backends.base import GenerationRequest, GenerationResult
from ragtrail.llm.cache import MemoryLLMCache
from ragtrail.llm.client import LLMClient
from ragtrail.llm.testing import ScriptedBackend
from tests.unit.generate import (
    DEFAULT_HANDLERS,
    calls_by_prompt,
    input_fields,
    prompt_name,
    routed_backend,
)

SEED = 5
LEAVE = "Full-time staff receive 27 days of annual leave per year."
ROWS = [
    ConfidenceRow("How much annual leave do staff get?", (LEAVE, "Unrelated text."), "27 days"),
    ConfidenceRow("Who approves merges?", ("Every merge needs one approval.",), "The CEO"),
    ConfidenceRow("What colour is the sky?", (), "Blue"),
]

Reply = Callable[[dict[str, Any], int], "str | GenerationResult"]


def draw_of(request: GenerationRequest, what: str) -> int:
    """Which draw (0, 1, ...) a sampled request is, from its seed (retries add 1, 2 to it)."""
    base = draw_seeds(SEED, what, 1)[0]
    return (int(request.seed or 0) - base) // 1000


def seeded_backend(overrides: dict[str, Reply]) -> ScriptedBackend:
    """Routed replies, except the prompts in ``overrides``, which also see the draw number."""

    def responder(request: GenerationRequest, number: int) -> str | GenerationResult:
        name = prompt_name(request)
        fields = input_fields(request)
        if name in overrides:
            kind = "sample" if name == "confidence.sample_answer" else "ask"
            return overrides[name](fields, draw_of(request, kind))
        return DEFAULT_HANDLERS[name](fields)

    return ScriptedBackend(responder)


def client(backend: ScriptedBackend, cache: MemoryLLMCache | None = None, **kw: Any) -> LLMClient:
    return LLMClient(backend, cache, report_every=64, **kw)


def run_p_true(c: LLMClient, *, samples: int = 2, asks: int = 3) -> list[ConfidenceScore]:
    return p_true(c, ROWS, samples=samples, asks=asks, temperature=0.7, seed=SEED)


def test_p_true_is_the_share_of_true_asks_by_hand() -> None:
    # the asker says true for a shared word, except on draw 2, which always says false:
    # row 1 ("27 days" shares "days" with LEAVE) -> 2 of 3; rows 2 and 3 share nothing -> 0.
    def ask(fields: dict[str, Any], draw: int) -> str:
        return json.dumps({"correct": draw != 2 and "days" in fields["proposed_answer"]})

    backend = seeded_backend({"confidence.p_true": ask})
    scores = run_p_true(client(backend))
    assert [s.value for s in scores] == [pytest.approx(2 / 3), 0.0, 0.0]
    assert [(s.n_valid, s.n_asked, s.error, s.raw) for s in scores] == [(3, 3, None, ())] * 3
    # one batch of 3 rows x 2 samples, one batch of 3 rows x 3 asks
    assert backend.generate_calls == 2
    assert calls_by_prompt(backend) == {"confidence.sample_answer": 6, "confidence.p_true": 9}


def test_p_true_shows_the_brainstormed_answers_and_the_proposed_one() -> None:
    backend = routed_backend()
    run_p_true(client(backend), samples=2, asks=1)
    asks = [input_fields(r) for r in backend.calls if prompt_name(r) == "confidence.p_true"]
    assert asks[0]["brainstormed"] == ["Full-time staff receive 27"] * 2
    assert asks[0]["proposed_answer"] == "27 days"
    assert asks[2]["brainstormed"] == ["unknown", "unknown"]


def test_every_sample_and_ask_has_its_own_seed_shared_across_rows() -> None:
    backend = routed_backend()
    run_p_true(client(backend), samples=3, asks=2)
    seeds: dict[str, list[int]] = {}
    for r in backend.calls:
        seeds.setdefault(prompt_name(r), []).append(int(r.seed or 0))
    sample_seeds, ask_seeds = draw_seeds(SEED, "sample", 3), draw_seeds(SEED, "ask", 2)
    assert len(set(sample_seeds)) == 3 and len(set(ask_seeds)) == 2
    assert not set(sample_seeds) & set(ask_seeds)
    assert seeds["confidence.sample_answer"] == sample_seeds * 3
    assert seeds["confidence.p_true"] == ask_seeds * 3
    assert all(r.temperature == 0.7 for r in backend.calls)


def test_partial_ask_failures_score_over_the_valid_asks_and_keep_the_raw_text() -> None:
    # draw 1 of every ask is not JSON (retries keep the draw number, so all attempts fail)
    def ask(fields: dict[str, Any], draw: int) -> str:
        return "I think so" if draw == 1 else DEFAULT_HANDLERS["confidence.p_true"](fields)

    backend = seeded_backend({"confidence.p_true": ask})
    scores = run_p_true(client(backend, max_attempts=2))
    assert [s.value for s in scores] == [1.0, 0.0, 0.0]
    assert [(s.n_valid, s.n_asked) for s in scores] == [(2, 3)] * 3
    assert all(s.error is None for s in scores)
    # two attempts of the failed ask; the retry echoes the first reply, so both texts are kept
    assert scores[0].raw == ("I think so", "I think so")


def test_all_asks_failed_gives_no_value_with_the_error_and_raw_texts() -> None:
    backend = seeded_backend({"confidence.p_true": lambda fields, draw: '{"correct": "maybe"}'})
    scores = run_p_true(client(backend, max_attempts=1), asks=2)
    for score in scores:
        assert score.value is None and (score.n_valid, score.n_asked) == (0, 2)
        assert score.error is not None and score.error.startswith("every ask failed (2 of 2)")
        assert "validation_error" in score.error
        assert score.raw == ('{"correct": "maybe"}',) * 2
        assert score.as_dict()["value"] is None
        assert score.as_dict()["undefined"] == {"value": score.error}


def test_a_row_whose_samples_all_failed_is_not_asked() -> None:
    failure = GenerationResult.failure("server down")

    def sample(fields: dict[str, Any], draw: int) -> str | GenerationResult:
        if not fields.get("passages"):
            return failure
        return DEFAULT_HANDLERS["confidence.sample_answer"](fields)

    backend = seeded_backend({"confidence.sample_answer": sample})
    scores = run_p_true(client(backend, max_attempts=1), samples=2, asks=2)
    assert scores[2].value is None and scores[2].n_valid == 0
    assert scores[2].error == ("every sampled answer failed (2 of 2): backend_error: server down")
    assert scores[2].raw == ("", "")
    assert calls_by_prompt(backend)["confidence.p_true"] == 4  # rows 1 and 2 only
    assert [s.value for s in scores[:2]] == [1.0, 0.0]


def test_a_rerun_through_the_cache_makes_no_model_call_and_gives_the_same_scores() -> None:
    cache = MemoryLLMCache()
    first = run_p_true(client(routed_backend(), cache)) + p_correct(
        client(routed_backend(), cache), ROWS, seed=SEED
    )
    again_backend = routed_backend()
    again = run_p_true(client(again_backend, cache)) + p_correct(
        client(again_backend, cache), ROWS, seed=SEED
    )
    assert again == first
    assert again_backend.calls == []


def p_correct_with(reply: str, **kw: Any) -> ConfidenceScore:
    backend = routed_backend({"confidence.p_correct": lambda fields: reply})
    return p_correct(client(backend, **kw), ROWS[:1], seed=SEED)[0]


def answers(*probabilities: float) -> str:
    return json.dumps(
        {"answers": [{"answer": f"a{i}", "probability": p} for i, p in enumerate(probabilities)]}
    )


def test_p_correct_keeps_the_top_probability() -> None:
    backend = routed_backend()
    scores = p_correct(client(backend), ROWS, seed=SEED)
    assert [s.value for s in scores] == [0.8, 0.8, 0.3]
    assert [(s.n_valid, s.n_asked) for s in scores] == [(1, 1)] * 3
    assert all(r.temperature == 0.0 and r.seed == SEED for r in backend.calls)
    assert p_correct_with(answers(0.2, 0.6)).value == 0.6  # the highest, not the first


def test_p_correct_clips_and_does_not_renormalise() -> None:
    assert p_correct_with(answers(0.9, 0.7)).value == 0.9  # sums to 1.6: top kept as given
    assert p_correct_with(answers(80, 10)).value == 1.0  # a percentage clips to 1
    assert p_correct_with(answers(-0.2)).value == 0.0


def test_p_correct_without_a_valid_answer_list_is_undefined() -> None:
    score = p_correct_with('{"answers": []}', max_attempts=1)
    assert score.value is None and (score.n_valid, score.n_asked) == (0, 1)
    assert score.error is not None and "validation_error" in score.error
    assert score.raw == ('{"answers": []}',)


def test_no_rows_make_no_call_and_bad_counts_are_refused() -> None:
    backend = routed_backend()
    assert p_true(client(backend), [], samples=2, asks=2, temperature=0.7, seed=1) == []
    assert p_correct(client(backend), [], seed=1) == []
    assert backend.calls == []
    with pytest.raises(ValueError, match="samples and asks"):
        p_true(client(backend), ROWS, samples=0, asks=2, temperature=0.7, seed=1)
