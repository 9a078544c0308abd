"""Run independent LLM steps at the same time when their backend serves requests concurrently.

A step that makes several independent :meth:`~ragtrail.llm.client.LLMClient.run` calls (eight
critiques, each with its own prompt) would otherwise leave an HTTP endpoint mostly idle: each call
holds only a few requests, and the next waits for the slowest of them. :func:`together` runs such
calls on threads when ``concurrent`` (:attr:`LLMClient.concurrent`), and one after the other
otherwise (a local model gains nothing from threads and batches on its own). Results come back in
the given order either way; the first exception, in that order, is raised after all have ended.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

MAX_THREADS = 16
"""At most this many steps run at once (requests beyond the endpoint's cap wait in its limiter)."""


def together(steps: Sequence[Callable[[], T]], *, concurrent: bool) -> list[T]:
    """``[step() for step in steps]``, on threads when ``concurrent`` (see module docstring)."""
    if not concurrent or len(steps) < 2:
        return [step() for step in steps]
    with ThreadPoolExecutor(min(MAX_THREADS, len(steps)), thread_name_prefix="llm-step") as pool:
        futures = [pool.submit(step) for step in steps]
        errors = [f.exception() for f in futures]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]
