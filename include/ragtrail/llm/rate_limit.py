"""One limiter per LLM endpoint, shared by every backend of the process that talks to it.

The roles' clients (generator, labeller, critic, judge, answerer...) each hold their own
:class:`~ragtrail.llm.backends.openai_compat.OpenAICompatBackend`; when they point at the same
base URL, the endpoint's limits are the endpoint's, not each role's: 4 roles x 8 threads must not
become 32 requests in flight against a server that allows 8. :func:`endpoint_limiter` therefore
hands every backend of one endpoint (base URL + API key) the same :class:`EndpointLimiter`, which
enforces, for all of them together:

* ``max_concurrency``: requests in flight;
* ``requests_per_minute`` / ``tokens_per_minute``: token buckets holding at most one second's
  allowance, refilled slightly below the nominal rate so that no 60-second window ever exceeds it
  (a server counting per sliding minute never sees more). A request's tokens are estimated before
  it is sent (prompt characters / 4 + ``max_tokens``) and corrected with the server's reported
  usage afterwards;
* a global pause: a 429 (with its ``Retry-After``) stops every backend of the endpoint from
  sending until it has passed, so one overloaded moment does not become a 429 storm.

Thread safe. ``clock`` and ``sleep`` are injectable so tests need no real waiting.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger(__name__)

DEFAULT_BACKOFF_S = 1.0
"""The global pause after a 429 that named no ``Retry-After``."""
_EPSILON = 1e-9
"""Shortfalls below this are rounding, not a reason to wait (a wait that short may not advance
the clock at all)."""


@dataclass(frozen=True)
class EndpointLimits:
    """What one endpoint allows (None = unlimited)."""

    max_concurrency: int = 8
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 (or None: unlimited)")


class _Bucket:
    """A token bucket of one second's allowance, refilled at ``(per_minute - capacity) / 60``
    per second, so any 60 s window holds at most ``per_minute``. It may go into debt (a request
    larger than the capacity waits for a full bucket, then takes what it needs)."""

    def __init__(self, per_minute: float, now: float) -> None:
        self.capacity = max(1.0, per_minute / 60.0)
        self.rate = max(per_minute - self.capacity, per_minute / 120.0) / 60.0
        self.level = self.capacity
        self.updated = now

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now

    def wait_for(self, cost: float, now: float) -> float:
        """Seconds until ``cost`` may be taken (0: now)."""
        self._refill(now)
        short = min(cost, self.capacity) - self.level
        return 0.0 if short <= _EPSILON else short / self.rate

    def take(self, cost: float, now: float) -> None:
        self._refill(now)
        self.level -= cost

    def give_back(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


@dataclass
class Permit:
    """One admitted request; tell :meth:`EndpointLimiter.release` its real token count."""

    tokens_estimate: float
    granted_at: float


class EndpointLimiter:
    """Concurrency cap, RPM and TPM buckets and a shared 429 pause for one endpoint."""

    def __init__(
        self,
        limits: EndpointLimits,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self._cond = threading.Condition()
        self._in_flight = 0
        self._paused_until = 0.0
        self.limits = limits
        self._rpm: _Bucket | None = None
        self._tpm: _Bucket | None = None
        self._configure(limits)
        self.peak_in_flight = 0
        self.pauses = 0
        self.waited_s = 0.0

    def _configure(self, limits: EndpointLimits) -> None:
        now = self._clock()
        self.limits = limits
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        self._rpm = _Bucket(rpm, now) if rpm else None
        self._tpm = _Bucket(tpm, now) if tpm else None

    def update(self, limits: EndpointLimits) -> None:
        """Apply new limits (the newest configuration of the endpoint wins)."""
        with self._cond:
            if limits != self.limits:
                self._configure(limits)
                self._cond.notify_all()

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    def acquire(self, tokens_estimate: float = 0.0) -> Permit:
        """Block until a request of about ``tokens_estimate`` tokens may be sent; take a slot."""
        waited = 0.0
        with self._cond:
            while self._in_flight >= self.limits.max_concurrency:
                self._cond.wait()
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            while True:
                with self._cond:
                    now = self._clock()
                    delay = max(
                        self._paused_until - now,
                        self._rpm.wait_for(1.0, now) if self._rpm else 0.0,
                        self._tpm.wait_for(tokens_estimate, now) if self._tpm else 0.0,
                    )
                    if delay <= _EPSILON:
                        if self._rpm:
                            self._rpm.take(1.0, now)
                        if self._tpm:
                            self._tpm.take(tokens_estimate, now)
                        self.waited_s += waited
                        return Permit(tokens_estimate, now)
                self._sleep(delay)
                waited += delay
        except BaseException:
            self._free_slot()
            raise

    def release(self, permit: Permit, tokens_used: float | None = None) -> None:
        """Free the slot; correct the TPM bucket with the tokens the server reported."""
        with self._cond:
            if self._tpm and tokens_used is not None and tokens_used > 0:
                self._tpm.give_back(permit.tokens_estimate - tokens_used)
        self._free_slot()

    def _free_slot(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify()

    def back_off(self, seconds: float | None) -> None:
        """Pause every sender of this endpoint for ``seconds`` (a 429's ``Retry-After``)."""
        wait = DEFAULT_BACKOFF_S if seconds is None else max(0.0, seconds)
        with self._cond:
            until = self._clock() + wait
            if until > self._paused_until:
                self._paused_until = until
                self.pauses += 1

    @contextmanager
    def slot(self, tokens_estimate: float = 0.0) -> Iterator[Callable[[float], None]]:
        """``with limiter.slot(est) as report: ...; report(tokens_used)`` (acquire + release)."""
        permit = self.acquire(tokens_estimate)
        used: list[float] = []
        try:
            yield used.append
        finally:
            self.release(permit, used[-1] if used else None)


_REGISTRY: dict[str, EndpointLimiter] = {}
_REGISTRY_LOCK = threading.Lock()


def endpoint_key(base_url: str, api_key: str | None = None) -> str:
    """The identity of an endpoint: its base URL (no credentials) and a digest of its key."""
    key = hashlib.sha256(api_key.encode()).hexdigest()[:12] if api_key else "-"
    return f"{base_url.rstrip('/')}#{key}"


def endpoint_limiter(key: str, limits: EndpointLimits) -> EndpointLimiter:
    """The process-wide limiter of endpoint ``key``, created or updated to ``limits``."""
    with _REGISTRY_LOCK:
        limiter = _REGISTRY.get(key)
        if limiter is None:
            limiter = _REGISTRY[key] = EndpointLimiter(limits)
            return limiter
    if limiter.limits != limits:
        log.info("endpoint limits changed to %s", limits)
        limiter.update(limits)
    return limiter


def forget_endpoints() -> None:
    """Drop every registered limiter (tests)."""
    with _REGISTRY_LOCK:
        _REGISTRY.clear()
