"""A local OpenAI-compatible LOAD-TEST DOUBLE for benchmarks and tests. It is NOT a model.

:class:`StubServer` answers ``POST /v1/chat/completions`` and ``GET /v1/models`` on 127.0.0.1
the way a busy production endpoint would, minus the intelligence:

* each request takes ``latency_s`` plus ``per_token_s`` per completion token;
* at most ``concurrency`` requests are served at once; the rest queue (``overflow="queue"``, as
  vLLM does) or are answered 429 at once (``overflow="reject"``);
* injected faults: a share of requests answered 429 with ``Retry-After`` (at once) or 5xx (after
  ``latency_s``), drawn from a seeded hash of the request body and the number of times that body
  was seen, so the same requests get the same faults in any arrival order, and a retry draws anew;
* an optional requests-per-minute limit (sliding window) answered by 429 + ``Retry-After``.

Replies come from a pluggable ``reply(body) -> text`` function. The default one
(:func:`schema_reply`) answers a request carrying ``response_format`` ``json_schema`` with a small
valid instance of that schema (enum members and bounded numbers picked by a hash of the prompt)
and plain text otherwise. Every request is recorded in :attr:`StubServer.timeline` (arrival,
service start, end, status), from which requests in flight over time can be computed.

    with StubServer(latency_s=0.3, concurrency=8) as base_url:   # http://127.0.0.1:<port>/v1
        ...
    python -m ragtrail.llm.stub_server --port 8011 --latency-ms 300 --concurrency 8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from ragtrail.jsonsafe import JsonObject

ReplyFn = Callable[[JsonObject], str]
"""``reply(request_body) -> completion text``."""

Overflow = Literal["queue", "reject"]


@dataclass
class RequestRecord:
    """One request as the stub saw it; times in seconds since the server started.

    ``start`` is when it got a service slot (None: answered without one, e.g. an injected 429);
    ``fault`` names an injected or limit response (``"429"``, ``"5xx"``, ``"rpm"``, ``"busy"``);
    ``tag`` is the request's ``response_format`` schema name (``"text"`` without one), which tells
    the prompts, hence the pipeline's steps, apart; ``body`` is a digest of the request body, so
    a retry of a refused request can be matched with its success.
    """

    arrival: float
    start: float | None
    end: float
    status: int
    fault: str | None = None
    completion_tokens: int = 0
    tag: str = "text"
    body: str = ""


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()


def _pick(key: str, n: int) -> int:
    """A deterministic index in ``range(n)`` for ``key``."""
    return int.from_bytes(_digest(key)[:8], "big") % max(1, n)


def _prompt_text(body: JsonObject) -> str:
    messages = body.get("messages") or []
    return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))


def schema_instance(schema: JsonObject, key: str, defs: JsonObject | None = None) -> Any:
    """A small instance valid against ``schema`` (the JSON-schema subset pydantic emits).

    ``key`` (e.g. the prompt) picks enum members and numbers within their bounds, so different
    prompts get different, reproducible answers.
    """
    defs = defs if defs is not None else dict(schema.get("$defs") or {})
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return schema_instance(dict(defs.get(name) or {}), key, defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        options = list(schema["enum"])
        return options[_pick(key, len(options))] if options else None
    for combo in ("anyOf", "oneOf"):
        if combo in schema:
            branches = [b for b in schema[combo] if b.get("type") != "null"] or schema[combo]
            return schema_instance(dict(branches[0]), key, defs)
    if "allOf" in schema:
        merged: JsonObject = {}
        for part in schema["allOf"]:
            merged.update(part)
        return schema_instance(merged, key, defs)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = dict(schema.get("properties") or {})
        return {
            name: schema_instance(dict(sub), f"{key}/{name}", defs) for name, sub in props.items()
        }
    if kind == "array":
        low = int(schema.get("minItems", 1))
        high = int(schema.get("maxItems", max(low, 2)))
        count = max(low, min(high, 1 + _pick(key + "#n", 2)))
        item = dict(schema.get("items") or {"type": "string"})
        return [schema_instance(item, f"{key}[{i}]", defs) for i in range(count)]
    if kind in ("integer", "number"):
        return _number(schema, key, integer=kind == "integer")
    if kind == "boolean":
        return bool(_pick(key, 2))
    if kind == "null":
        return None
    return _string(schema, key)


def _number(schema: JsonObject, key: str, *, integer: bool) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    if integer:
        lo = math.ceil(low) + (1 if "exclusiveMinimum" in schema else 0) if low is not None else 0
        hi = (
            math.floor(high) - (1 if "exclusiveMaximum" in schema else 0)
            if high is not None
            else lo + 4
        )
        return lo + _pick(key, hi - lo + 1) if hi >= lo else lo
    lo_f = float(low) if low is not None else 0.0
    hi_f = float(high) if high is not None else lo_f + 1.0
    return round(lo_f + (hi_f - lo_f) * (0.1 + 0.8 * _pick(key, 1000) / 1000), 3)


_WORDS = ("policy", "leave", "request", "manager", "days", "approval", "office", "team", "form")


def _string(schema: JsonObject, key: str) -> str:
    words = [_WORDS[_pick(f"{key}:{i}", len(_WORDS))] for i in range(4)]
    text = f"Stub {' '.join(words)} {_digest(key).hex()[:6]}."
    low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
    text = text.ljust(low, "x")
    return text[: int(high)] if high is not None else text


def request_tag(body: JsonObject) -> str:
    """The schema name of a structured-output request, ``"text"`` for any other."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        return str(fmt["json_schema"].get("name") or "json")
    return "text"


def schema_reply(body: JsonObject) -> str:
    """The default reply: a schema instance as JSON for ``json_schema`` requests, else text."""
    prompt = _prompt_text(body)
    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") if isinstance(fmt, dict) else None
    if isinstance(schema, dict):
        return json.dumps(schema_instance(schema, prompt), ensure_ascii=False)
    return f"This is a stub reply [1]. Reference {_digest(prompt).hex()[:8]}."


def estimate_tokens(text: str) -> int:
    """Roughly four characters per token (what the stub reports as usage)."""
    return max(1, len(text) // 4)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms ACK stall
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw)
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            self._json(400, {"error": {"message": "body is not a JSON object"}})
            return
        status, payload, headers = self.server.stub.serve(body, raw)
        self._json(status, payload, headers)

    def _json(
        self, status: int, payload: JsonObject, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    stub: StubServer


class StubServer:
    """The load-test double (see module docstring). Use as a context manager for its base URL.

    Args:
        port: 0 = an ephemeral port.
        latency_s / per_token_s: service time = ``latency_s + per_token_s * completion tokens``.
        concurrency: requests served at once (None: unlimited); ``overflow`` decides what the
            others get: a place in the queue, or an immediate 429 with ``Retry-After``.
        fault_429 / fault_5xx: shares of requests answered 429 (with ``Retry-After:
            retry_after_s``) or ``status_5xx``; seeded by ``seed``.
        rpm / rpm_window_s: at most ``rpm`` admitted requests per sliding window (60 s).
        reply: ``body -> text`` (default :func:`schema_reply`).
        sleep: how service time passes (tests may pass a no-op).
    """

    def __init__(
        self,
        *,
        port: int = 0,
        latency_s: float = 0.3,
        per_token_s: float = 0.0,
        concurrency: int | None = None,
        overflow: Overflow = "queue",
        fault_429: float = 0.0,
        fault_5xx: float = 0.0,
        status_5xx: int = 503,
        retry_after_s: float = 1.0,
        rpm: int | None = None,
        rpm_window_s: float = 60.0,
        seed: int = 0,
        reply: ReplyFn = schema_reply,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if concurrency is not None and concurrency < 1:
            raise ValueError("concurrency must be >= 1 (or None: unlimited)")
        if not (0.0 <= fault_429 <= 1.0 and 0.0 <= fault_5xx <= 1.0):
            raise ValueError("fault shares must be in [0, 1]")
        self.port = port
        self.latency_s, self.per_token_s = latency_s, per_token_s
        self.concurrency, self.overflow = concurrency, overflow
        self.fault_429, self.fault_5xx, self.status_5xx = fault_429, fault_5xx, status_5xx
        self.retry_after_s = retry_after_s
        self.rpm, self.rpm_window_s = rpm, rpm_window_s
        self.seed = seed
        self.reply = reply
        self._sleep = sleep
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(concurrency) if concurrency else None
        self._seen: Counter[bytes] = Counter()
        self._admitted: deque[float] = deque()
        self.timeline: list[RequestRecord] = []
        self._t0 = time.monotonic()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        """Bind 127.0.0.1, serve in a background thread, and return the base URL."""
        httpd = _HTTPServer(("127.0.0.1", self.port), _Handler)
        httpd.stub = self
        self._httpd, self.port = httpd, httpd.server_address[1]
        self._t0 = time.monotonic()
        self._thread = threading.Thread(
            target=httpd.serve_forever, args=(0.05,), name="stub-llm", daemon=True
        )
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def reset_timeline(self) -> None:
        with self._lock:
            self.timeline = []

    # ------------------------------------------------------------------ serving

    def serve(self, body: JsonObject, raw: bytes) -> tuple[int, JsonObject, dict[str, str]]:
        """Status, JSON payload and extra headers for one chat-completion request."""
        arrival = self.now()
        tag = request_tag(body)
        with self._lock:
            digest = _digest(self.seed, raw)
            self._seen[digest] += 1
            draw = random.Random(_digest(digest.hex(), self._seen[digest])).random()
        body_id = digest.hex()[:16]
        if draw < self.fault_429:
            return self._refuse(arrival, tag, body_id, "429", "injected rate limit")
        wait = self._rpm_wait(arrival)
        if wait is not None:
            return self._refuse(arrival, tag, body_id, "rpm", "requests per minute exceeded", wait)
        if self._slots is not None:
            if self.overflow == "reject" and not self._slots.acquire(blocking=False):
                return self._refuse(
                    arrival, tag, body_id, "busy", "server at its concurrency limit"
                )
            if self.overflow == "queue":
                self._slots.acquire()
        start = self.now()
        try:
            if draw < self.fault_429 + self.fault_5xx:
                self._sleep(self.latency_s)
                self._record(arrival, start, self.status_5xx, tag, body_id, "5xx")
                return self.status_5xx, {"error": {"message": "injected server error"}}, {}
            text = self.reply(body)
            limit = body.get("max_tokens") or body.get("max_completion_tokens")
            tokens = estimate_tokens(text)
            finish = "stop"
            if isinstance(limit, int) and tokens > limit:
                text, tokens, finish = text[: limit * 4], limit, "length"
            self._sleep(self.latency_s + self.per_token_s * tokens)
            self._record(arrival, start, 200, tag, body_id, None, tokens)
        finally:
            if self._slots is not None:
                self._slots.release()
        prompt_tokens = estimate_tokens(_prompt_text(body))
        return 200, _completion(body, text, finish, prompt_tokens, tokens), {}

    def _rpm_wait(self, now: float) -> float | None:
        """Seconds until a place frees up when the RPM window is full (None: admitted now)."""
        if self.rpm is None:
            return None
        with self._lock:
            while self._admitted and self._admitted[0] <= now - self.rpm_window_s:
                self._admitted.popleft()
            if len(self._admitted) >= self.rpm:
                return self._admitted[0] + self.rpm_window_s - now
            self._admitted.append(now)
        return None

    def _refuse(
        self,
        arrival: float,
        tag: str,
        body_id: str,
        fault: str,
        message: str,
        retry_after: float | None = None,
    ) -> tuple[int, JsonObject, dict[str, str]]:
        wait = self.retry_after_s if retry_after is None else retry_after
        self._record(arrival, None, 429, tag, body_id, fault)
        shown = f"{wait:.3f}".rstrip("0").rstrip(".") or "0"
        return 429, {"error": {"message": message, "type": "rate_limit"}}, {"Retry-After": shown}

    def _record(
        self,
        arrival: float,
        start: float | None,
        status: int,
        tag: str,
        body: str,
        fault: str | None,
        tokens: int = 0,
    ) -> None:
        rec = RequestRecord(arrival, start, self.now(), status, fault, tokens, tag, body)
        with self._lock:
            self.timeline.append(rec)

    # ------------------------------------------------------------------ timeline views

    def records(self) -> list[RequestRecord]:
        """A copy of the timeline, in completion order."""
        with self._lock:
            return list(self.timeline)

    def max_in_flight(self) -> int:
        """The most requests ever in service at once (slot holders)."""
        return max_in_flight(self.records())


def in_flight_events(records: list[RequestRecord]) -> Iterator[tuple[float, int]]:
    """``(time, requests in service just after it)`` at every service start and end."""
    events = sorted(
        [(r.start, 1) for r in records if r.start is not None]
        + [(r.end, -1) for r in records if r.start is not None],
        key=lambda e: (e[0], e[1]),  # an end before a start at the same instant
    )
    level = 0
    for t, step in events:
        level += step
        yield t, level


def max_in_flight(records: list[RequestRecord]) -> int:
    return max((level for _, level in in_flight_events(records)), default=0)


def _completion(
    body: JsonObject, text: str, finish: str, prompt_tokens: int, tokens: int
) -> JsonObject:
    return {
        "id": f"stub-{_digest(text).hex()[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or "stub"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": tokens,
            "total_tokens": prompt_tokens + tokens,
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted; with ``--timeline FILE`` write the timeline as JSON lines."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency-ms", type=float, default=300.0)
    p.add_argument("--per-token-ms", type=float, default=0.0)
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--overflow", choices=("queue", "reject"), default="queue")
    p.add_argument("--fault-429", type=float, default=0.0)
    p.add_argument("--fault-5xx", type=float, default=0.0)
    p.add_argument("--retry-after", type=float, default=1.0)
    p.add_argument("--rpm", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeline", default=None)
    args = p.parse_args(argv)
    stub = StubServer(
        port=args.port,
        latency_s=args.latency_ms / 1000,
        per_token_s=args.per_token_ms / 1000,
        concurrency=args.concurrency,
        overflow=args.overflow,
        fault_429=args.fault_429,
        fault_5xx=args.fault_5xx,
        retry_after_s=args.retry_after,
        rpm=args.rpm,
        seed=args.seed,
    )
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    print(stub.start(), flush=True)
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stub.stop()
        if args.timeline:
            with open(args.timeline, "w") as fh:
                for rec in stub.records():
                    fh.write(json.dumps(asdict(rec)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
