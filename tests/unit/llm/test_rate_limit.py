"""The endpoint limiter: RPM and TPM buckets, the shared 429 pause, the concurrency cap, the
process-wide registry that makes the roles' backends of one endpoint share one limiter."""

from __future__ import annotations

import threading
import time

import pytest

from ragtrail.llm.backends.openai_compat import OpenAICompatBackend
from ragtrail.llm.rate_limit import (
    EndpointLimiter,
    EndpointLimits,
    endpoint_key,
    endpoint_limiter,
    forget_endpoints,
)


class FakeClock:
    """Time that passes only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture(autouse=True)
def _fresh_registry():
    forget_endpoints()
    yield
    forget_endpoints()


def limiter(clock: FakeClock, **limits: float) -> EndpointLimiter:
    return EndpointLimiter(EndpointLimits(**limits), clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]


def test_rpm_never_exceeded_in_any_minute_and_nearly_reached() -> None:
    clock = FakeClock()
    lim = limiter(clock, requests_per_minute=60)
    granted = []
    for _ in range(300):
        lim.release(lim.acquire())
        granted.append(clock.now)
    worst = max(sum(1 for t in granted if s <= t < s + 60.0) for s in granted)
    assert worst <= 60
    assert 300 / granted[-1] * 60 >= 58  # within 2% of the nominal rate over five minutes
    assert granted[1] > 0  # the second request already waited: a burst holds one second's worth


def test_tpm_waits_for_tokens_and_refunds_the_unused_estimate() -> None:
    clock = FakeClock()
    lim = limiter(clock, tokens_per_minute=6000)  # 100 tokens per second
    first = lim.acquire(100)
    assert clock.now == 0.0
    lim.release(first, tokens_used=10)  # the server reported 10: 90 come back
    lim.release(lim.acquire(90))
    assert clock.now == 0.0
    lim.release(lim.acquire(100))  # the bucket is empty now: about a second's wait
    assert 0.9 < clock.now < 1.2


def test_a_request_larger_than_a_second_of_tokens_waits_for_a_full_bucket() -> None:
    clock = FakeClock()
    lim = limiter(clock, tokens_per_minute=600)  # capacity 10
    lim.release(lim.acquire(50))
    lim.release(lim.acquire(50))  # waits until the debt of 40 is paid and the bucket full
    assert clock.now >= 50 / (590 / 60) - 1e-6


def test_a_429_pauses_every_sender_of_the_endpoint() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    lim.back_off(2.5)
    lim.back_off(1.0)  # a shorter pause never shortens the running one
    lim.release(lim.acquire())
    assert clock.now == pytest.approx(2.5) and lim.pauses == 1
    lim.back_off(None)  # no Retry-After: the default pause
    lim.release(lim.acquire())
    assert clock.now == pytest.approx(3.5)


def test_concurrency_cap_holds_under_many_threads() -> None:
    lim = EndpointLimiter(EndpointLimits(max_concurrency=3))
    lock = threading.Lock()
    inside, peak, done = [0], [0], [0]

    def worker() -> None:
        for _ in range(40):
            with lim.slot(5.0):
                with lock:
                    inside[0] += 1
                    peak[0] = max(peak[0], inside[0])
                time.sleep(0.0005)
                with lock:
                    inside[0] -= 1
                    done[0] += 1

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert done[0] == 480 and peak[0] == 3 and lim.in_flight == 0 and lim.peak_in_flight == 3


def test_slot_is_freed_when_the_request_raises() -> None:
    lim = EndpointLimiter(EndpointLimits(max_concurrency=1))
    with pytest.raises(RuntimeError), lim.slot():
        raise RuntimeError("boom")
    assert lim.in_flight == 0


def test_backends_of_one_endpoint_share_a_limiter_others_do_not() -> None:
    url = "http://127.0.0.1:9/v1"
    a = OpenAICompatBackend("generator-model", url, "sk-1", max_concurrency=8)
    b = OpenAICompatBackend("judge-model", url + "/", "sk-1", max_concurrency=8)
    other_url = OpenAICompatBackend("m", "http://127.0.0.1:10/v1", "sk-1", max_concurrency=8)
    other_key = OpenAICompatBackend("m", url, "sk-2", max_concurrency=8)
    assert a.limiter is b.limiter
    assert other_url.limiter is not a.limiter and other_key.limiter is not a.limiter
    assert a.concurrent_requests == 8


def test_the_newest_limits_of_an_endpoint_apply() -> None:
    key = endpoint_key("http://h/v1", None)
    first = endpoint_limiter(key, EndpointLimits(max_concurrency=2))
    again = endpoint_limiter(key, EndpointLimits(max_concurrency=5, requests_per_minute=600))
    assert again is first and first.limits.max_concurrency == 5
    assert first.limits.requests_per_minute == 600


def test_invalid_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        EndpointLimits(max_concurrency=0)
    with pytest.raises(ValueError):
        EndpointLimits(requests_per_minute=0)
