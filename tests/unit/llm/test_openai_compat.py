"""OpenAI-compatible backend against a real HTTP server on 127.0.0.1 (stdlib http.server).

The stub serves ``/v1/chat/completions``; the first user message names a scenario ("case:...")
that scripts its behaviour per hit: 5xx, timeouts, 429 with Retry-After, truncated bodies,
malformed JSON content, refusals, 4xx.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import BaseModel

from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.openai_compat import OpenAICompatBackend
from ragtrail.llm.client import FailureCause, LLMClient
from ragtrail.llm.factory import load_llm_backend
from ragtrail.llm.prompts import Prompt

OK_CONTENT = '{"answer": "fine"}'


class StubState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.hits: dict[str, int] = defaultdict(int)
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0


def completion(content: str | None, *, refusal: str | None = None, finish: str = "stop") -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        message["refusal"] = refusal
    body = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    }
    return json.dumps(body).encode()


def make_handler(state: StubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def do_POST(self) -> None:
            if self.path != "/v1/chat/completions":
                self.send(404, b'{"error": "not found"}')
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            first_user = next(m["content"] for m in body["messages"] if m["role"] == "user")
            case = first_user.split("case:", 1)[-1].strip()
            with state.lock:
                state.hits[case] += 1
                hit = state.hits[case]
                state.bodies.append(body)
                state.headers.append(dict(self.headers))
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                self.respond(case, hit)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def respond(self, case: str, hit: int) -> None:
            if case == "ok":
                self.send(200, completion(OK_CONTENT))
            elif case == "slow-ok":
                time.sleep(0.2)
                self.send(200, completion(OK_CONTENT))
            elif case == "500-twice":
                self.send(500, b'{"error": "boom"}') if hit <= 2 else self.send(
                    200, completion(OK_CONTENT)
                )
            elif case == "always-503":
                self.send(503, b'{"error": "overloaded"}')
            elif case == "timeout-once":
                if hit == 1:
                    time.sleep(1.0)
                self.send(200, completion(OK_CONTENT))
            elif case == "429-once":
                if hit == 1:
                    self.send(429, b'{"error": "slow down"}', {"Retry-After": "1"})
                else:
                    self.send(200, completion(OK_CONTENT))
            elif case == "408-once":
                self.send(408, b"{}") if hit == 1 else self.send(200, completion(OK_CONTENT))
            elif case == "truncated-body-once":
                body = completion(OK_CONTENT) if hit > 1 else completion(OK_CONTENT)[:40]
                self.send(200, body)
            elif case == "always-truncated-body":
                self.send(200, completion(OK_CONTENT)[:40])
            elif case == "malformed-content":
                self.send(200, completion('{"answer": "x",, oops'))
            elif case == "refusal":
                self.send(200, completion(None, refusal="I can't help with that."))
            elif case == "empty":
                self.send(200, completion("", finish="content_filter"))
            elif case == "bad-request":
                self.send(400, b'{"error": "bad model"}')
            else:
                self.send(500, b'{"error": "unknown case"}')

    return Handler


@pytest.fixture
def stub() -> Iterator[tuple[str, StubState]]:
    state = StubState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", state
    finally:
        server.shutdown()
        server.server_close()


def req(case: str, **kw: Any) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": f"case:{case}"}], **kw)


def make_backend(base_url: str, **kw: Any) -> tuple[OpenAICompatBackend, list[float]]:
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        time.sleep(s)

    kw.setdefault("backoff_base_s", 0.02)
    kw.setdefault("timeout_s", 2.0)
    kw.setdefault("max_retries", 3)
    return OpenAICompatBackend("stub-model", base_url, "sk-test", sleep=sleep, **kw), sleeps


def test_ok_payload_usage_and_auth(stub: tuple[str, StubState]) -> None:
    url, state = stub
    backend, _ = make_backend(url, supports_json_schema=True)
    schema = {"title": "Answer Model", "type": "object"}
    (res,) = backend.generate(
        [req("ok", seed=5, stop=("\n\n",), json_schema=schema, max_new_tokens=9)]
    )
    assert res.ok and res.text == OK_CONTENT and res.attempts == 1
    assert (res.prompt_tokens, res.completion_tokens, res.finish_reason) == (11, 5, "stop")
    body = state.bodies[0]
    assert body["model"] == "stub-model" and body["max_tokens"] == 9 and body["seed"] == 5
    assert body["stop"] == ["\n\n"] and body["temperature"] == 0.0
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Answer_Model", "schema": schema, "strict": False},
    }
    assert state.headers[0]["Authorization"] == "Bearer sk-test"


def test_schema_not_sent_when_unsupported(stub: tuple[str, StubState]) -> None:
    url, state = stub
    backend, _ = make_backend(url)
    backend.generate([req("ok", json_schema={"type": "object"})])
    assert "response_format" not in state.bodies[0]


def test_5xx_retried_with_bounded_jittered_backoff(stub: tuple[str, StubState]) -> None:
    url, state = stub
    backend, sleeps = make_backend(url)
    (res,) = backend.generate([req("500-twice")])
    assert res.ok and res.attempts == 3 and state.hits["500-twice"] == 3
    assert len(sleeps) == 2 and 0 <= sleeps[0] <= 0.02 and 0 <= sleeps[1] <= 0.04


def test_retries_are_bounded(stub: tuple[str, StubState]) -> None:
    url, state = stub
    backend, sleeps = make_backend(url, max_retries=2)
    (res,) = backend.generate([req("always-503")])
    assert not res.ok and res.text == "" and res.finish_reason == "error"
    assert state.hits["always-503"] == 3 and len(sleeps) == 2 and res.attempts == 3
    assert "503" in (res.error or "") and "3 attempts" in (res.error or "")


def test_timeout_is_retried(stub: tuple[str, StubState]) -> None:
    url, state = stub
    backend, _ = make_backend(url, timeout_s=0.3)
    started = time.perf_counter()
    (res,) = backend.generate([req("timeout-once")])
    assert res.ok and res.attempts == 2 and state.hits["timeout-once"] == 2
    assert time.perf_counter() - started < 1.5


def test_429_honours_retry_after(stub: tuple[str, StubState]) -> None:
    url, _state = stub
    backend, sleeps = make_backend(url)
    started = time.perf_counter()
    (res,) = backend.generate([req("429-once")])
    assert res.ok and sleeps == [1.0] and time.perf_counter() - started >= 1.0


def test_retry_after_is_capped(stub: tuple[str, StubState]) -> None:
    url, _ = stub
    backend, sleeps = make_backend(url, retry_after_cap_s=0.1)
    (res,) = backend.generate([req("429-once")])
    assert res.ok and sleeps == [0.1]


def test_408_is_retried_but_400_is_not(stub: tuple[str, StubState]) -> None:
    url, state = stub
    backend, _sleeps = make_backend(url)
    ok, bad = backend.generate([req("408-once"), req("bad-request")])
    assert ok.ok and state.hits["408-once"] == 2
    assert not bad.ok and state.hits["bad-request"] == 1 and "400" in (bad.error or "")


def test_truncated_body_is_retried_then_given_up(stub: tuple[str, StubState]) -> None:
    url, state = stub
    backend, _ = make_backend(url, max_retries=2)
    once, always = backend.generate([req("truncated-body-once"), req("always-truncated-body")])
    assert once.ok and once.text == OK_CONTENT and once.attempts == 2
    assert not always.ok and state.hits["always-truncated-body"] == 3
    assert "unreadable response body" in (always.error or "")


def test_refusal_and_empty_content_are_results_not_errors(stub: tuple[str, StubState]) -> None:
    url, _ = stub
    backend, _ = make_backend(url)
    refusal, empty, malformed = backend.generate(
        [req("refusal"), req("empty"), req("malformed-content")]
    )
    assert refusal.ok and refusal.text == "" and refusal.refusal == "I can't help with that."
    assert refusal.finish_reason == "stop"
    assert empty.ok and empty.text == "" and empty.finish_reason == "content_filter"
    assert malformed.ok and malformed.text == '{"answer": "x",, oops'


def test_connection_refused_is_retried_and_reported() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend, sleeps = make_backend(f"http://127.0.0.1:{port}/v1", max_retries=2)
    (res,) = backend.generate([req("ok")])
    assert not res.ok and "connection error" in (res.error or "") and len(sleeps) == 2


def test_concurrency_limit_and_order(stub: tuple[str, StubState]) -> None:
    url, state = stub
    backend, _ = make_backend(url, max_concurrency=3)
    cases = ["slow-ok", "bad-request"] * 4
    started = time.perf_counter()
    results = backend.generate([req(c) for c in cases])
    elapsed = time.perf_counter() - started
    assert [r.ok for r in results] == [True, False] * 4
    assert 2 <= state.max_in_flight <= 3
    assert elapsed < 4 * 0.2 + 0.5  # really concurrent (4 slow calls, 3 at a time)


class Answer(BaseModel):
    answer: str


class Question(BaseModel):
    case: str


def test_client_over_http_classifies_failures(stub: tuple[str, StubState]) -> None:
    url, _state = stub
    backend, _ = make_backend(url, max_retries=1)

    class CaseLast(Prompt[Question, Answer]):  # the stub reads "case:<name>" from the user turn
        def render_input(self, inp: Question) -> str:  # type: ignore[override]
            return f"case:{inp.case}"

    prompt = CaseLast("test.http", "1", "Answer.", Question, Answer)
    outs = LLMClient(backend, max_attempts=2).run(
        prompt,
        [Question(case=c) for c in ["ok", "refusal", "malformed-content", "always-503"]],
        stage="http",
    )
    assert outs[0].ok and outs[0].value == Answer(answer="fine")
    assert outs[1].cause is FailureCause.REFUSAL and outs[1].raw_texts == ["", ""]
    assert outs[2].cause is FailureCause.PARSE_ERROR
    assert outs[2].raw_texts == ['{"answer": "x",, oops'] * 2
    assert outs[3].cause is FailureCause.BACKEND_ERROR


def test_factory_and_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    b = load_llm_backend("openai:meta/llama@http://host:8000/v1", api_key="k")
    assert isinstance(b, OpenAICompatBackend)
    assert (b.model_id, b.base_url, b.name) == ("meta/llama", "http://host:8000/v1", "openai")
    monkeypatch.setenv("RAGTRAIL_LLM_BASE_URL", "http://env:1/v1")
    monkeypatch.setenv("RAGTRAIL_LLM_API_KEY", "secret")
    e = load_llm_backend("openai:gpt-x")
    assert isinstance(e, OpenAICompatBackend) and e.base_url == "http://env:1/v1"
    assert e._http.headers["Authorization"] == "Bearer secret"
    monkeypatch.delenv("RAGTRAIL_LLM_BASE_URL")
    with pytest.raises(ValueError, match="RAGTRAIL_LLM_BASE_URL"):
        load_llm_backend("openai:gpt-x")


def test_clients_share_one_tls_context() -> None:
    """Every client of the process verifies servers with one TLS context (httpx's defaults,
    built once): building one reads the whole CA bundle, and a night builds a client per role
    of every side-by-side step."""
    from ragtrail.llm.backends import openai_compat

    openai_compat._tls_context.cache_clear()
    one, two = (
        OpenAICompatBackend("m", f"https://llm{i}.example.invalid/v1", None) for i in (1, 2)
    )
    try:
        contexts = [b._http._transport._pool._ssl_context for b in (one, two)]  # type: ignore[attr-defined]
        assert contexts[0] is contexts[1] is openai_compat._tls_context()
        assert contexts[0].verify_mode.name == "CERT_REQUIRED"
    finally:
        one.close()
        two.close()
