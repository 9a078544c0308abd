"""The OpenAI-compatible stub server (a load-test double, not a model): replies valid for the
request's schema, injected 429 / 5xx faults (seeded, order independent), the concurrency limit
(queue or reject), the RPM limit, the timeline, and the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from pathlib import Path

import httpx
from pydantic import BaseModel, Field

from ragtrail.llm.stub_server import StubServer, schema_instance, schema_reply


class Verdict(StrEnum):
    YES = "yes"
    NO = "no"
    MAYBE = "maybe"


class Cited(BaseModel):
    text: str
    citations: list[int] = Field(min_length=1)


class Output(BaseModel):
    verdict: Verdict
    rating: int = Field(ge=1, le=5)
    score: float = Field(ge=0.0, le=1.0)
    statements: list[Cited]
    note: str | None = None
    flag: bool


def chat(content: str, *, schema: bool = False, max_tokens: int = 64) -> dict:
    body: dict = {
        "model": "m",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
    }
    if schema:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "Output", "schema": Output.model_json_schema()},
        }
    return body


def post(base_url: str, body: dict, client: httpx.Client | None = None) -> httpx.Response:
    return (client or httpx).post(f"{base_url}/chat/completions", json=body, timeout=10)


def test_json_schema_requests_get_a_valid_instance_and_others_text() -> None:
    with StubServer(latency_s=0.0) as url:
        resp = post(url, chat("rate this", schema=True))
        plain = post(url, chat("say hi"))
        models = httpx.get(f"{url}/models").json()
    text = resp.json()["choices"][0]["message"]["content"]
    assert Output.model_validate_json(text).rating in range(1, 6)
    assert resp.json()["usage"]["completion_tokens"] > 0
    assert not plain.json()["choices"][0]["message"]["content"].startswith("{")
    assert models["data"][0]["id"] == "stub"


def test_schema_choices_are_deterministic_and_vary_with_the_prompt() -> None:
    schema = Output.model_json_schema()
    first = [schema_instance(schema, f"prompt {i}") for i in range(20)]
    assert first == [schema_instance(schema, f"prompt {i}") for i in range(20)]
    assert len({o["verdict"] for o in first}) == 3 and len({o["rating"] for o in first}) >= 3
    for value in first:
        Output.model_validate(value)
    assert schema_reply(chat("x", schema=True)) == schema_reply(chat("x", schema=True))


def test_injected_429_carries_retry_after_and_5xx_is_a_server_error() -> None:
    with StubServer(latency_s=0.0, fault_429=1.0, retry_after_s=0.25) as url:
        limited = post(url, chat("a"))
    with StubServer(latency_s=0.0, fault_5xx=1.0, status_5xx=502) as url:
        failed = post(url, chat("a"))
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "0.25"
    assert failed.status_code == 502


def _faulted(order: list[int], seed: int) -> set[int]:
    stub = StubServer(latency_s=0.0, fault_429=0.2, fault_5xx=0.2, seed=seed)
    with stub as url, httpx.Client() as client:
        codes = {i: post(url, chat(f"q{i}"), client).status_code for i in order}
    assert {r.status for r in stub.records()} <= {200, 429, 503}
    return {i for i, code in codes.items() if code != 200}


def test_faults_are_seeded_and_independent_of_arrival_order() -> None:
    order = list(range(40))
    once = _faulted(order, seed=3)
    assert 4 <= len(once) <= 30
    assert _faulted(order[::-1], seed=3) == once
    assert _faulted(order, seed=4) != once


def test_a_retried_body_draws_again() -> None:
    with StubServer(latency_s=0.0, fault_429=0.5, seed=1) as url, httpx.Client() as client:
        codes = [post(url, chat("same"), client).status_code for _ in range(12)]
    assert 200 in codes and 429 in codes


def _burst(url: str, n: int) -> list[int]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda i: post(url, chat(f"b{i}")).status_code, range(n)))


def test_queued_requests_beyond_the_limit_wait_for_a_slot() -> None:
    stub = StubServer(latency_s=0.05, concurrency=2)
    with stub as url:
        started = time.perf_counter()
        codes = _burst(url, 6)
        elapsed = time.perf_counter() - started
    assert codes == [200] * 6 and stub.max_in_flight() == 2 and elapsed >= 0.15
    records = stub.records()
    assert len(records) == 6
    assert all(r.arrival <= r.start <= r.end for r in records if r.start is not None)
    assert max(r.start - r.arrival for r in records if r.start is not None) >= 0.05


def test_rejecting_server_answers_429_beyond_the_limit() -> None:
    stub = StubServer(latency_s=0.3, concurrency=1, overflow="reject")
    with stub as url:
        codes = _burst(url, 5)
    busy = [r for r in stub.records() if r.fault == "busy"]
    assert codes.count(200) >= 1 and codes.count(429) == len(busy) >= 1
    assert stub.max_in_flight() == 1


def test_rpm_limit_answers_429_with_the_wait_until_a_place_frees() -> None:
    stub = StubServer(latency_s=0.0, rpm=3, rpm_window_s=60.0)
    with stub as url:
        codes = [post(url, chat(f"r{i}")) for i in range(4)]
    assert [c.status_code for c in codes] == [200, 200, 200, 429]
    assert 55.0 < float(codes[3].headers["Retry-After"]) <= 60.0
    assert [r.fault for r in stub.records()] == [None, None, None, "rpm"]


def test_long_replies_are_cut_at_max_tokens() -> None:
    with StubServer(latency_s=0.0) as url:
        data = post(url, chat("x", schema=True, max_tokens=3)).json()
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 3


def test_timeline_records_tags_and_service_time() -> None:
    stub = StubServer(latency_s=0.02, per_token_s=0.001)
    with stub as url:
        post(url, chat("a", schema=True))
        post(url, chat("b"))
    first, second = stub.records()
    assert (first.tag, second.tag) == ("Output", "text")
    assert first.end - first.start >= 0.02 + 0.001 * first.completion_tokens - 1e-3


def test_command_line_serves_until_terminated_and_writes_the_timeline(tmp_path: Path) -> None:
    timeline = tmp_path / "timeline.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "ragtrail.llm.stub_server", "--latency-ms", "1"),
            *("--concurrency", "2", "--timeline", str(timeline)),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert post(url, chat("cli")).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    rows = [json.loads(line) for line in timeline.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["status"] == 200


def test_stop_releases_the_port() -> None:
    stub = StubServer(latency_s=0.0)
    url = stub.start()
    stub.stop()
    done = threading.Event()
    try:
        httpx.get(f"{url}/models", timeout=1)
    except httpx.TransportError:
        done.set()
    assert done.is_set()
