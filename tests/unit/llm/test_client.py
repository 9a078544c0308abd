"""LLMClient: caching, batching, bounded retries, failure records, order and usage accounting.

Uses :class:`ScriptedBackend` (a test double returning scripted texts, not a model) and the
:class:`FaultInjectingBackend` wrapped around it.
"""

from __future__ import annotations

import json
import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import BaseModel, Field
from sqlalchemy import create_engine, select
from sqlalchemy.engine import Engine

from ragtrail.llm.backends.base import GenerationRequest, GenerationResult
from ragtrail.llm.backends.fault_injection import (
    REFUSAL_TEXT,
    Fault,
    FaultInjectingBackend,
    FaultPlan,
)
from ragtrail.llm.cache import MemoryLLMCache, SqlLLMCache
from ragtrail.llm.client import (
    IN_FLIGHT,
    FailureCause,
    GenerationParams,
    LLMClient,
    looks_like_refusal,
)
from ragtrail.llm.prompts import Prompt
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.llm.usage import Price, UsageMeter
from ragtrail.storage import tables


class Item(BaseModel):
    text: str


class Judgement(BaseModel):
    label: str
    score: int = Field(ge=1, le=5)


PROMPT: Prompt[Item, Judgement] = Prompt(
    name="test.judge",
    version="1",
    instruction="Judge the item.",
    input_model=Item,
    output_model=Judgement,
    document_fields=frozenset({"text"}),
)


def item_text(req: GenerationRequest) -> str:
    """The item text of the request's input: its last user turn holding a document block."""
    user = next(
        m["content"]
        for m in reversed(req.messages)
        if m["role"] == "user" and "<document" in m["content"]
    )
    match = re.search(r"<document[^>]*>\n(.*?)\n</document>", user, re.S)
    assert match is not None
    return match.group(1)


def good_reply(req: GenerationRequest, number: int) -> str:
    t = item_text(req)
    return json.dumps({"label": t.upper(), "score": 1 + len(t) % 5})


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    eng = create_engine(f"sqlite:///{tmp_path / 'meta.db'}")
    tables.metadata.create_all(eng)
    return eng


ITEMS = [Item(text=t) for t in ["alpha", "be", "gamma", "d", "epsilon", "zeta"]]


def test_all_ok_order_preserved_one_batch() -> None:
    backend = ScriptedBackend(good_reply)
    client = LLMClient(backend, MemoryLLMCache())
    outs = client.run(PROMPT, ITEMS, stage="judge")
    assert [o.index for o in outs] == list(range(len(ITEMS)))
    assert [o.value.label for o in outs if o.value] == [i.text.upper() for i in ITEMS]
    assert all(o.ok and len(o.attempts) == 1 for o in outs)
    assert backend.generate_calls == 1 and len(backend.calls) == len(ITEMS)
    req = backend.calls[0]
    assert req.seed == 0 and req.json_schema == Judgement.model_json_schema()


def test_retry_changes_seed_adds_correction_and_is_bounded() -> None:
    def reply(req: GenerationRequest, number: int) -> str:
        t = item_text(req)
        if t == "alpha" and req.seed == 10:
            return '{"label": "ALPHA", "score": 9}'  # invalid: out of range
        if t == "be":
            return "no json at all"  # never parses
        return good_reply(req, number)

    backend = ScriptedBackend(reply)
    client = LLMClient(backend, MemoryLLMCache(), max_attempts=3)
    outs = client.run(PROMPT, ITEMS, stage="judge", params=GenerationParams(seed=10))
    a, b = outs[0], outs[1]
    assert a.ok and len(a.attempts) == 2
    assert a.attempts[0].cause is FailureCause.VALIDATION_ERROR and a.attempts[1].cause is None
    assert not b.ok and b.status == "failed" and b.value is None
    assert b.cause is FailureCause.PARSE_ERROR
    assert b.raw_texts == ["no json at all"] * 3
    seeds = [r.seed for r in backend.calls if item_text(r) == "be"]
    assert seeds == [10, 11, 12]
    retry = [r for r in backend.calls if item_text(r) == "be"][1]
    assert retry.messages[-2] == {"role": "assistant", "content": "no json at all"}
    assert "could not be used" in retry.messages[-1]["content"]
    assert "parse_error" in retry.messages[-1]["content"]
    assert [o.ok for o in outs] == [True, False, True, True, True, True]


def test_validation_failure_then_success() -> None:
    def reply(req: GenerationRequest, number: int) -> str:
        if req.seed == 0:
            return '{"label": "x", "score": 7}'
        return '{"label": "x", "score": "4"}'

    client = LLMClient(ScriptedBackend(reply), max_attempts=2)
    (out,) = client.run(PROMPT, [Item(text="q")], stage="s")
    assert out.ok and out.value == Judgement(label="x", score=4)
    assert [a.cause for a in out.attempts] == [FailureCause.VALIDATION_ERROR, None]
    assert "score" in (out.attempts[0].detail or "")


def test_failure_causes_are_recorded_with_raw_text() -> None:
    replies = {
        "ref": REFUSAL_TEXT,
        "val": '{"label": "x", "score": 0}',
        "err": GenerationResult.failure("boom"),
        "empty": "",
    }

    def reply(req: GenerationRequest, number: int) -> str | GenerationResult:
        return replies[item_text(req)]

    client = LLMClient(ScriptedBackend(reply), max_attempts=2)
    outs = client.run(PROMPT, [Item(text=k) for k in replies], stage="s")
    causes = [o.cause for o in outs]
    assert causes == [
        FailureCause.REFUSAL,
        FailureCause.VALIDATION_ERROR,
        FailureCause.BACKEND_ERROR,
        FailureCause.PARSE_ERROR,
    ]
    assert outs[0].raw_texts == [REFUSAL_TEXT, REFUSAL_TEXT]
    assert outs[1].raw_texts == ['{"label": "x", "score": 0}'] * 2
    assert outs[2].error == "boom" and outs[2].raw_texts == ["", ""]
    for o in outs:
        assert o.value is None and o.status == "failed"
        assert not any(isinstance(v, float) and math.isnan(v) for v in o.raw_texts)


def test_fault_injection_schedule_and_recovery(engine: Engine) -> None:
    inner = ScriptedBackend(good_reply)
    plan = FaultPlan(
        schedule={
            0: Fault.TRUNCATED_JSON,
            1: Fault.MALFORMED_JSON,
            2: Fault.REFUSAL,
            3: Fault.EMPTY,
            4: Fault.ERROR,
        }
    )
    backend = FaultInjectingBackend(inner, plan)
    usage = UsageMeter()
    client = LLMClient(backend, SqlLLMCache(engine), max_attempts=3, usage=usage)
    outs = client.run(PROMPT, ITEMS, stage="judge")
    # request 0 ("alpha") was truncated: '{"label": "ALP' -> repaired object misses "score"
    assert outs[0].attempts[0].cause is FailureCause.VALIDATION_ERROR
    assert outs[0].attempts[0].finish_reason == "length"
    assert outs[1].attempts[0].cause is FailureCause.PARSE_ERROR
    assert outs[2].attempts[0].cause is FailureCause.REFUSAL
    assert outs[3].attempts[0].cause is FailureCause.PARSE_ERROR
    assert outs[4].attempts[0].cause is FailureCause.BACKEND_ERROR
    assert all(o.ok for o in outs), [o.error for o in outs]
    assert [o.value.label for o in outs if o.value] == [i.text.upper() for i in ITEMS]
    assert [n for n, _ in backend.injected] == [0, 1, 2, 3, 4]

    counters = usage.get("judge", backend.name, backend.model_id)
    assert counters.calls == len(ITEMS) + 5 and counters.cache_hits == 0
    assert counters.failures == 0


def test_backend_exception_is_contained_and_retried() -> None:
    backend = FaultInjectingBackend(
        ScriptedBackend(good_reply), FaultPlan(schedule={0: Fault.EXCEPTION})
    )
    outs = LLMClient(backend, max_attempts=2).run(PROMPT, ITEMS[:3], stage="s")
    assert all(o.ok for o in outs)
    assert all(o.attempts[0].cause is FailureCause.BACKEND_ERROR for o in outs)
    assert "InjectedFaultError" in (outs[0].attempts[0].error or "")


def test_fault_rates_are_deterministic() -> None:
    def run_once() -> list[tuple[int, Fault]]:
        backend = FaultInjectingBackend(
            ScriptedBackend(good_reply),
            FaultPlan(rates={Fault.REFUSAL: 0.3, Fault.TRUNCATED_JSON: 0.3}, seed=7),
        )
        LLMClient(backend, max_attempts=3).run(
            PROMPT, [Item(text=f"t{i}") for i in range(30)], stage="s"
        )
        return backend.injected

    first = run_once()
    assert first == run_once()
    kinds = {f for _, f in first}
    assert kinds == {Fault.REFUSAL, Fault.TRUNCATED_JSON}


def test_rerun_with_same_cache_makes_zero_backend_calls(engine: Engine) -> None:
    def flaky(req: GenerationRequest, number: int) -> str:
        if req.seed == 0 and item_text(req) in {"be", "d"}:
            return "```json\n{oops"  # first attempt unusable -> retried with seed 1
        return good_reply(req, number)

    first_backend = ScriptedBackend(flaky)
    first = LLMClient(first_backend, SqlLLMCache(engine), max_attempts=3).run(
        PROMPT, ITEMS, stage="s"
    )
    assert all(o.ok for o in first) and len(first_backend.calls) == len(ITEMS) + 2

    def must_not_be_called(req: GenerationRequest, number: int) -> str:
        raise AssertionError("backend called on a fully cached rerun")

    second_backend = ScriptedBackend(must_not_be_called)
    usage = UsageMeter()
    second = LLMClient(second_backend, SqlLLMCache(engine), max_attempts=3, usage=usage).run(
        PROMPT, ITEMS, stage="s"
    )
    assert second_backend.calls == [] and second_backend.generate_calls == 0
    assert [o.value for o in second] == [o.value for o in first]
    assert [o.raw_texts for o in second] == [o.raw_texts for o in first]
    assert all(a.cached for o in second for a in o.attempts)
    c = usage.get("s", "scripted", "scripted-v1")
    assert c.calls == 0 and c.cache_hits == len(ITEMS) + 2 and c.prompt_tokens == 0


def test_errors_are_not_cached(engine: Engine) -> None:
    cache = SqlLLMCache(engine)
    LLMClient(
        ScriptedBackend(lambda r, n: GenerationResult.failure("down")), cache, max_attempts=1
    ).run(PROMPT, ITEMS[:2], stage="s")
    assert cache.count() == 0


def test_usage_flush_is_idempotent_and_costed(engine: Engine) -> None:
    usage = UsageMeter(prices={"scripted-v1": Price(prompt_per_1k=1.0, completion_per_1k=2.0)})
    client = LLMClient(ScriptedBackend(good_reply), MemoryLLMCache(), usage=usage)
    client.run(PROMPT, ITEMS, stage="generate")
    client.run(PROMPT, ITEMS[:2], stage="critique")
    assert usage.flush(engine, "run-1") == 2
    assert usage.flush(engine, "run-1") == 2  # same totals again: still one row per key
    with engine.connect() as conn:
        rows = (
            conn.execute(select(tables.llm_usage).order_by(tables.llm_usage.c.stage))
            .mappings()
            .all()
        )
    assert [(r["run_id"], r["stage"]) for r in rows] == [
        ("run-1", "critique"),
        ("run-1", "generate"),
    ]
    gen = rows[1]
    assert gen["calls"] == len(ITEMS) and gen["cache_hits"] == 0 and gen["failures"] == 0
    assert gen["prompt_tokens"] > 0 and gen["completion_tokens"] > 0
    expected = (gen["prompt_tokens"] * 1.0 + gen["completion_tokens"] * 2.0) / 1000
    assert gen["cost_usd"] == pytest.approx(expected)
    crit = rows[0]
    assert crit["calls"] == 0 and crit["cache_hits"] == 2  # same inputs, same prompt: cached

    # more work in the same run: the flush updates the row in place
    client.run(PROMPT, [Item(text="new one")], stage="generate")
    usage.flush(engine, "run-1")
    with engine.connect() as conn:
        calls = conn.execute(
            select(tables.llm_usage.c.calls).where(tables.llm_usage.c.stage == "generate")
        ).scalar_one()
    assert calls == len(ITEMS) + 1


def test_truncated_reply_is_retried_with_a_bigger_budget() -> None:
    def reply(req: GenerationRequest, number: int) -> GenerationResult:
        if req.max_new_tokens < 40:
            return GenerationResult(text='{"label": "abc', finish_reason="length")
        return GenerationResult(text='{"label": "abc", "score": 2}', finish_reason="stop")

    backend = ScriptedBackend(reply)
    (out,) = LLMClient(backend, max_attempts=3).run(
        PROMPT, [Item(text="t")], stage="s", params=GenerationParams(max_new_tokens=10)
    )
    assert out.ok and [r.max_new_tokens for r in backend.calls] == [10, 20, 40]
    assert "max_new_tokens" in (out.attempts[0].detail or "")

    capped = ScriptedBackend(reply)
    params = GenerationParams(max_new_tokens=10, max_growth=2)
    (out,) = LLMClient(capped, max_attempts=3).run(
        PROMPT, [Item(text="t")], stage="s", params=params
    )
    assert not out.ok and [r.max_new_tokens for r in capped.calls] == [10, 20, 20]


def test_chunked_runs_keep_order() -> None:
    backend = ScriptedBackend(good_reply)
    items = [Item(text=f"x{i}") for i in range(7)]
    outs = LLMClient(backend, chunk_size=3).run(PROMPT, items, stage="s")
    assert [o.index for o in outs] == list(range(7)) and backend.generate_calls == 3
    assert [o.value.label for o in outs if o.value] == [f"X{i}" for i in range(7)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I'm sorry, but I can't help with that.", True),
        ("I can\u2019t assist with this request.", True),
        ("Sorry, I cannot comply.", True),
        ("As an AI language model, I cannot do that", True),
        ('{"label": "I cannot", "score": 1}', False),
        ("The document says I can't be late.", False),
    ],
)
def test_refusal_heuristic(text: str, expected: bool) -> None:
    assert looks_like_refusal(text) is expected


def test_per_input_decoding_schema_example_texts_and_retry_temperature() -> None:
    def narrow(inp: Item) -> dict[str, object]:
        schema = Judgement.model_json_schema()
        schema["properties"]["label"] = {"type": "string", "enum": [inp.text.upper()]}
        return schema

    prompt: Prompt[Item, Judgement] = Prompt(
        name="test.narrow",
        version="1",
        instruction="Judge the item.",
        input_model=Item,
        output_model=Judgement,
        examples=[(Item(text="example"), Judgement(label="AN EXAMPLE LABEL", score=2))],
        document_fields=frozenset({"text"}),
        decoding_schema=narrow,
    )
    assert prompt.example_texts() == ("AN EXAMPLE LABEL",)
    short = Prompt(
        name="test.short",
        version="1",
        instruction="Judge.",
        input_model=Item,
        output_model=Judgement,
        examples=[(Item(text="x"), Judgement(label="summary", score=2))],
    )
    assert short.example_texts() == ()  # single words (labels) may be repeated

    def reply(req: GenerationRequest, number: int) -> str:
        if item_text(req) == "be" and req.temperature == 0:
            return "not json"  # the greedy first attempt fails; the sampled retry works
        return good_reply(req, number)

    backend = ScriptedBackend(reply)
    client = LLMClient(backend, MemoryLLMCache(), max_attempts=2)
    outs = client.run(prompt, ITEMS[:2], stage="judge")
    assert all(o.ok for o in outs)
    first = [r for r in backend.calls if r.temperature == 0]
    assert [r.json_schema["properties"]["label"]["enum"] for r in first] == [["ALPHA"], ["BE"]]
    assert all(r.avoid_copying == ("AN EXAMPLE LABEL",) for r in backend.calls)
    # "example" and "label" are words of the example answer that these inputs never use.
    assert all(r.avoid_words == ("example", "label") for r in backend.calls)
    assert prompt.foreign_example_words(Item(text="the label")) == ("example",)
    (retry,) = [r for r in backend.calls if r.temperature > 0]
    assert retry.temperature == GenerationParams().retry_temperature and retry.seed == 1

    # guided_json=False sends no schema; the schema is part of the cache key.
    plain = client.run(prompt, ITEMS[:1], stage="judge", params=GenerationParams(guided_json=False))
    assert plain[0].ok and backend.calls[-1].json_schema is None
    assert client.usage.totals("judge").cache_hits == 0


def test_avoid_copying_is_part_of_the_cache_key_only_when_set() -> None:
    base = GenerationRequest(messages=({"role": "user", "content": "hi"},))
    guarded = GenerationRequest(messages=base.messages, avoid_copying=("an example",))
    assert "avoid_copying" not in base.generation_params()
    assert "avoid_words" not in base.generation_params()
    assert guarded.generation_params()["avoid_copying"] == ["an example"]
    worded = GenerationRequest(messages=base.messages, avoid_words=("elm",))
    assert worded.generation_params()["avoid_words"] == ["elm"]


def test_per_input_seeds_replace_the_run_seed_and_key_the_cache() -> None:
    def reply(req: GenerationRequest, number: int) -> str:
        return "no json" if item_text(req) == "be" and req.seed == 7 else good_reply(req, number)

    backend = ScriptedBackend(reply)
    cache = MemoryLLMCache()
    client = LLMClient(backend, cache, max_attempts=2)
    items = [ITEMS[0], ITEMS[0], ITEMS[1]]
    outs = client.run(
        PROMPT, items, stage="judge", params=GenerationParams(seed=3), seeds=[5, 6, 7]
    )
    assert [o.ok for o in outs] == [True, True, True]
    assert [r.seed for r in backend.calls] == [5, 6, 7, 8]  # the retry adds 1 to its own seed
    again = ScriptedBackend(reply)
    LLMClient(again, cache, max_attempts=2).run(PROMPT, items, stage="judge", seeds=[5, 6, 7])
    assert again.calls == []  # same item twice, two seeds: two cache entries, both replayed
    with pytest.raises(ValueError, match="2 seeds for 3 inputs"):
        client.run(PROMPT, items, stage="judge", seeds=[1, 2])


def test_each_input_gets_the_copy_guards_of_the_examples_it_was_shown() -> None:
    prompt: Prompt[Item, Judgement] = Prompt(
        name="test.languages",
        version="1",
        instruction="Judge the item.",
        input_model=Item,
        output_model=Judgement,
        examples=[(Item(text="example"), Judgement(label="AN EXAMPLE LABEL", score=2))],
        examples_by_language={
            "fr": [(Item(text="exemple"), Judgement(label="UNE ÉTIQUETTE MODÈLE", score=2))]
        },
        document_fields=frozenset({"text"}),
    )
    french = Item(text="La commande apt-get installe des paquets et résout leurs dépendances.")
    backend = ScriptedBackend(lambda req, number: json.dumps({"label": "x", "score": 3}))
    LLMClient(backend, MemoryLLMCache()).run(prompt, [ITEMS[0], french], stage="judge")
    english_call, french_call = backend.calls
    assert english_call.avoid_copying == ("AN EXAMPLE LABEL",)
    assert french_call.avoid_copying == ("UNE ÉTIQUETTE MODÈLE",)
    assert french_call.avoid_words == ("modèle", "étiquette")
    assert "UNE ÉTIQUETTE MODÈLE" in french_call.messages[2]["content"]


def test_identical_requests_share_one_call_in_a_batch_and_across_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within one batch, and between clients running at once on threads (steps side by side on
    an endpoint), a request already being made is not made again: the second asker waits for
    the first call, then reads its cached reply (an attempt marked cached, no tokens)."""
    started, release = threading.Event(), threading.Event()

    def slow_reply(req: GenerationRequest, number: int) -> str:
        started.set()
        assert release.wait(5), "the test never released the first call"
        return good_reply(req, number)

    claims: list[list[str]] = []
    second_claimed = threading.Event()
    claim = IN_FLIGHT.claim

    def counted_claim(keys):
        claims.append(list(keys))
        if len(claims) == 2:
            second_claimed.set()
        return claim(keys)

    monkeypatch.setattr(IN_FLIGHT, "claim", counted_claim)
    backend = ScriptedBackend(slow_reply)
    cache = MemoryLLMCache()
    twice = [*ITEMS[:3], ITEMS[0]]
    first = LLMClient(backend, cache)
    usage = UsageMeter()
    second = LLMClient(backend, cache, usage=usage)
    with ThreadPoolExecutor(2) as pool:
        ahead = pool.submit(first.run, PROMPT, twice, stage="judge")
        assert started.wait(5)
        behind = pool.submit(second.run, PROMPT, ITEMS[:4], stage="judge")
        assert second_claimed.wait(5)  # while the first client's calls are in flight
        release.set()
        outs_ahead, outs_behind = ahead.result(), behind.result()
    sent = [item_text(r) for r in backend.calls]
    assert sorted(sent) == sorted(i.text for i in ITEMS[:4])  # every distinct request once
    assert [o.value for o in outs_ahead] == [o.value for o in (*outs_behind[:3], outs_behind[0])]
    assert [o.attempts[0].cached for o in outs_ahead] == [False, False, False, True]
    assert [o.attempts[0].cached for o in outs_behind] == [True, True, True, False]
    assert len(claims[1]) == 4  # the second asked for all four while three were in flight
    assert usage.totals().calls == 1 and usage.totals().cache_hits == 3
