"""The OpenAI-compatible backend and the client against the stub server, end to end: injected
429s and 5xx are retried to success, nothing is lost, order is kept, and two backends sharing an
endpoint never have more requests in flight than its cap together."""

from __future__ import annotations

import threading

import pytest
from pydantic import BaseModel

from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.openai_compat import OpenAICompatBackend
from ragtrail.llm.client import LLMClient
from ragtrail.llm.prompts import Prompt
from ragtrail.llm.rate_limit import forget_endpoints
from ragtrail.llm.stub_server import StubServer
from ragtrail.llm.together import together


@pytest.fixture(autouse=True)
def _fresh_registry():
    forget_endpoints()
    yield
    forget_endpoints()


def echo(body: dict) -> str:
    """The stub's reply: the last user message, so each result can be matched to its request."""
    return f"echo: {body['messages'][-1]['content']}"


def requests(tag: str, n: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(messages=({"role": "user", "content": f"{tag}-{i}"},), max_new_tokens=8)
        for i in range(n)
    ]


def backend(url: str, model: str, cap: int, **kw: object) -> OpenAICompatBackend:
    options: dict = {"backoff_base_s": 0.01, "max_retries": 6, **kw}
    return OpenAICompatBackend(model, url, "sk-test", max_concurrency=cap, **options)


def test_faults_are_retried_and_results_keep_their_order() -> None:
    stub = StubServer(
        latency_s=0.01,
        concurrency=4,
        fault_429=0.15,
        fault_5xx=0.15,
        retry_after_s=0.02,
        reply=echo,
    )
    with stub as url:
        results = backend(url, "m", 4).generate(requests("r", 40))
    assert [r.text for r in results] == [f"echo: r-{i}" for i in range(40)]
    assert all(r.ok for r in results)
    faults = [r for r in stub.records() if r.fault]
    assert faults and sum(r.attempts - 1 for r in results) == len(faults)


def test_two_backends_of_one_endpoint_share_its_cap() -> None:
    """The server rejects (429 "busy") whatever exceeds 3 in flight: a per-backend cap of 3
    would let 6 through and be rejected; the shared cap never is."""
    stub = StubServer(latency_s=0.03, concurrency=3, overflow="reject", reply=echo)
    with stub as url:
        generator, judge = backend(url, "generator", 3), backend(url, "judge", 3)
        got = together(
            [
                lambda: generator.generate(requests("g", 12)),
                lambda: judge.generate(requests("j", 12)),
            ],
            concurrent=True,
        )
    assert [r.text for r in got[0]] == [f"echo: g-{i}" for i in range(12)]
    assert [r.text for r in got[1]] == [f"echo: j-{i}" for i in range(12)]
    assert not [r for r in stub.records() if r.fault == "busy"]
    assert stub.max_in_flight() == 3 and generator.limiter.peak_in_flight == 3


def test_a_429_pauses_the_other_backend_of_the_endpoint_too() -> None:
    stub = StubServer(latency_s=0.0, fault_429=1.0, retry_after_s=0.3, reply=echo)
    with stub as url:
        first, second = backend(url, "a", 2, max_retries=0), backend(url, "b", 2)
        first.generate(requests("x", 1))  # 429: the endpoint pauses for 0.3 s
        stub.fault_429 = 0.0
        started = stub.now()
        (result,) = second.generate(requests("y", 1))
    assert result.ok and stub.records()[-1].arrival - started >= 0.25


class Rating(BaseModel):
    rating: int
    reason: str


class Question(BaseModel):
    question: str


PROMPT = Prompt(
    name="rate",
    version="1",
    instruction="Rate the question from 1 to 5.",
    input_model=Question,
    output_model=Rating,
)


def test_client_gets_schema_valid_replies_through_retries_with_all_requests_at_once() -> None:
    stub = StubServer(
        latency_s=0.02, concurrency=8, fault_429=0.1, fault_5xx=0.1, retry_after_s=0.01
    )
    with stub as url:
        client = LLMClient(
            backend(url, "m", 8, supports_json_schema=True), max_attempts=1, report_every=4
        )
        inputs = [Question(question=f"q{i}?") for i in range(48)]
        outcomes = client.run(PROMPT, inputs, stage="rate")
    assert [o.index for o in outcomes] == list(range(48)) and all(o.ok for o in outcomes)
    # calls of 4 requests, several at once: the 8 slots were all used
    assert stub.max_in_flight() == 8


def test_together_runs_steps_at_once_only_when_concurrent() -> None:
    seen: list[str] = []
    barrier = threading.Barrier(2, timeout=5)

    def step(name: str) -> str:
        barrier.wait()  # both steps must be running at the same time to pass
        seen.append(name)
        return name

    assert together([lambda: step("a"), lambda: step("b")], concurrent=True) == ["a", "b"]
    calls: list[int] = []
    assert together([lambda: calls.append(1), lambda: calls.append(2)], concurrent=False)
    assert calls == [1, 2]
