"""Backend for any OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM server, hosted APIs).

Robustness rules, per request:

* a per-request timeout; timeouts, connection errors, HTTP 408/429/5xx and unreadable response
  bodies are retried with exponential backoff and full jitter, at most ``max_retries`` times;
* ``Retry-After`` (seconds) on 429/503 is honoured, capped at ``retry_after_cap_s``;
* other 4xx responses are not retried (the request itself is wrong);
* a refusal or empty content is a normal result with ``text=""`` and the server's finish_reason,
  not an error; deciding what a refusal means is the client's job.

Requests of a batch run concurrently on a thread pool; results keep the input order. The limits
are the endpoint's, not the backend's: every backend of the process with the same base URL and key
shares one :class:`~ragtrail.llm.rate_limit.EndpointLimiter` (``max_concurrency`` requests in
flight, optional requests and tokens per minute), and a 429 pauses all of them for its
``Retry-After`` (:mod:`ragtrail.llm.rate_limit`). With ``supports_json_schema=True`` a request's ``json_schema`` is sent as
``response_format={"type": "json_schema", ...}`` (vLLM and OpenAI structured outputs); otherwise
the schema is only in the prompt.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.backends.base import GenerationRequest, GenerationResult
from ragtrail.llm.rate_limit import EndpointLimiter, EndpointLimits, endpoint_key, endpoint_limiter
from ragtrail.redact import redact

log = logging.getLogger(__name__)

ENV_BASE_URL = "RAGTRAIL_LLM_BASE_URL"
ENV_API_KEY = "RAGTRAIL_LLM_API_KEY"
ENV_MODEL = "RAGTRAIL_LLM_MODEL"

_RETRY_STATUSES = frozenset({408, 429})
_SCHEMA_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")


class _Retryable(Exception):
    def __init__(
        self, message: str, retry_after: float | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class _Fatal(Exception):
    pass


class OpenAICompatBackend:
    """Chat completions over HTTP with bounded, jittered retries (see module docstring).

    Args:
        model: model name sent in each request (also the cache ``model_id``).
        base_url: e.g. ``http://vllm:8000/v1`` (``/chat/completions`` is appended); credentials
            in it (``http://user:password@host/v1``) are sent as HTTP basic auth, and never shown:
            errors are redacted (:mod:`ragtrail.redact`).
        api_key: bearer token; None sends no Authorization header.
        timeout_s: per-request timeout (connect + read).
        max_retries: retries after the first attempt (so at most ``max_retries + 1`` attempts).
        backoff_base_s / backoff_max_s: backoff ``uniform(0, min(max, base * 2**retry))``.
        retry_after_cap_s: upper bound on a server-requested ``Retry-After`` wait.
        max_concurrency: requests in flight at once against this endpoint, all backends of the
            process with the same base URL and key together.
        requests_per_minute / tokens_per_minute: the endpoint's rate limits (None: none).
        limiter: the endpoint limiter to use (default: the process-wide one of this endpoint).
        supports_json_schema: send ``response_format`` for requests that carry a schema.
        max_tokens_field: ``"max_tokens"`` (vLLM, most servers) or ``"max_completion_tokens"``.
        extra_body: extra JSON fields merged into every request (e.g. vLLM's ``top_k``).
        sleep / rng: injectable for tests.
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        retry_after_cap_s: float = 60.0,
        max_concurrency: int = 4,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        limiter: EndpointLimiter | None = None,
        supports_json_schema: bool = False,
        max_tokens_field: str = "max_tokens",
        extra_body: JsonObject | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if not base_url:
            raise ValueError(f"no base_url for the OpenAI-compatible backend (set {ENV_BASE_URL})")
        if max_retries < 0 or max_concurrency < 1:
            raise ValueError("max_retries must be >= 0 and max_concurrency >= 1")
        self.model_id = model
        self.base_url, auth = _split_credentials(base_url.rstrip("/"))
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.retry_after_cap_s = retry_after_cap_s
        self.max_concurrency = max_concurrency
        self.supports_json_schema = supports_json_schema
        self.max_tokens_field = max_tokens_field
        self.extra_body = dict(extra_body or {})
        self.limiter = limiter or endpoint_limiter(
            endpoint_key(self.base_url, api_key),
            EndpointLimits(max_concurrency, requests_per_minute, tokens_per_minute),
        )
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(
            headers=headers,
            auth=auth,
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
            limits=httpx.Limits(max_connections=max_concurrency),
            verify=_tls_context(),
        )

    @classmethod
    def from_env(cls, model: str | None = None, **kwargs: Any) -> OpenAICompatBackend:
        """Build from ``RAGTRAIL_LLM_BASE_URL`` / ``RAGTRAIL_LLM_API_KEY`` / ``RAGTRAIL_LLM_MODEL``."""
        model = model or os.environ.get(ENV_MODEL)
        if not model:
            raise ValueError(f"no model given and {ENV_MODEL} is not set")
        base_url = kwargs.pop("base_url", None) or os.environ.get(ENV_BASE_URL, "")
        api_key = kwargs.pop("api_key", None) or os.environ.get(ENV_API_KEY)
        return cls(model, base_url, api_key, **kwargs)

    @property
    def concurrent_requests(self) -> int:
        """Requests this endpoint serves at once (the client keeps that many in its hands)."""
        return self.limiter.limits.max_concurrency

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAICompatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ generation

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if not requests:
            return []
        workers = min(self.limiter.limits.max_concurrency, len(requests))
        if workers == 1:
            return [self._one(r) for r in requests]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-http") as pool:
            return list(pool.map(self._one, requests))

    def payload(self, req: GenerationRequest) -> JsonObject:
        """The JSON body sent for one request."""
        body: JsonObject = {
            "model": self.model_id,
            "messages": [dict(m) for m in req.messages],
            self.max_tokens_field: req.max_new_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
        }
        if req.seed is not None:
            body["seed"] = req.seed
        if req.top_k:  # not in OpenAI's API; vLLM and most compatible servers accept it
            body["top_k"] = req.top_k
        if req.stop:
            body["stop"] = list(req.stop)
        if req.json_schema is not None and self.supports_json_schema:
            title = str(req.json_schema.get("title") or "output")
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": _SCHEMA_NAME_RE.sub("_", title)[:64] or "output",
                    "schema": req.json_schema,
                    "strict": False,
                },
            }
        body.update(self.extra_body)
        return body

    def _one(self, req: GenerationRequest) -> GenerationResult:
        body = self.payload(req)
        estimate = _token_estimate(req)
        started = time.perf_counter()
        last_error = "no attempt made"
        for attempt in range(self.max_retries + 1):
            try:
                with self.limiter.slot(estimate) as report_tokens:
                    result = self._post(body)
                    report_tokens(result.prompt_tokens + result.completion_tokens)
                result.attempts = attempt + 1
                result.latency_s = time.perf_counter() - started
                return result
            except _Fatal as exc:
                return GenerationResult.failure(
                    redact(str(exc)), attempts=attempt + 1, latency_s=time.perf_counter() - started
                )
            except _Retryable as exc:
                last_error = redact(str(exc))  # an HTTP error may name the URL, credentials too
                delay = self._delay(attempt, exc.retry_after)
                if exc.status == 429:  # the endpoint is saturated: every sender pauses
                    self.limiter.back_off(delay if exc.retry_after is not None else None)
                if attempt == self.max_retries:
                    break
                log.info(
                    "retrying after %s (attempt %d, wait %.2fs)", last_error, attempt + 1, delay
                )
                self._sleep(delay)
        return GenerationResult.failure(
            f"gave up after {self.max_retries + 1} attempts: {last_error}",
            attempts=self.max_retries + 1,
            latency_s=time.perf_counter() - started,
        )

    def _delay(self, retry: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self.retry_after_cap_s))
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2**retry))
        with self._rng_lock:
            return self._rng.uniform(0.0, ceiling)

    def _post(self, body: JsonObject) -> GenerationResult:
        url = f"{self.base_url}/chat/completions"
        try:
            resp = self._http.post(url, json=body)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timeout after {self.timeout_s}s ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise _Retryable(f"connection error: {type(exc).__name__}: {exc}") from exc

        status = resp.status_code
        if status in _RETRY_STATUSES or status >= 500:
            raise _Retryable(
                f"HTTP {status}: {_snippet(resp)}",
                _retry_after(resp.headers.get("Retry-After")),
                status,
            )
        if status >= 400:
            raise _Fatal(f"HTTP {status} (not retried): {_snippet(resp)}")
        try:
            data = resp.json()
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _Retryable(f"unreadable response body: {_snippet(resp)}") from exc
        usage = data.get("usage") or {}
        content = message.get("content")
        refusal = message.get("refusal")
        return GenerationResult(
            text=content if isinstance(content, str) else "",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=str(choice.get("finish_reason") or "stop"),
            refusal=refusal if isinstance(refusal, str) and refusal else None,
        )


def _token_estimate(req: GenerationRequest) -> float:
    """Tokens a request may use, before it is sent: prompt characters / 4 plus ``max_tokens``."""
    return sum(len(m["content"]) for m in req.messages) / 4 + req.max_new_tokens


def _split_credentials(url: str) -> tuple[str, httpx.BasicAuth | None]:
    """``url`` without its userinfo, and that userinfo as HTTP basic auth (None without one).

    The credentials then travel in the Authorization header only: httpx logs every request's URL
    (at INFO, which Airflow task logs keep), so a URL holding them would write them there. A URL
    httpx cannot parse is kept as it is: the first request reports it.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return url, None
    if not parsed.userinfo:
        return url, None
    bare = str(parsed.copy_with(username=None, password=None))
    return bare, httpx.BasicAuth(parsed.username, parsed.password)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The TLS settings every client of the process verifies servers with: httpx's defaults (its
    CA bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), built once. Building them reads the
    whole CA bundle, tens of milliseconds of one core, and a night builds a client per role of
    every side-by-side step."""
    return httpx.create_ssl_context()


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (HTTP dates are ignored: use normal backoff)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _snippet(resp: httpx.Response, limit: int = 300) -> str:
    try:
        text = resp.text
    except Exception:
        return "<unreadable body>"
    return text[:limit].replace("\n", " ")
