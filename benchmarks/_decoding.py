"""Helpers shared by the local-decoding benchmarks: the sample corpus' questions, timing a
backend's decoding steps, and how often two ways of decoding pick different next tokens (with a
bootstrap interval)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

RESAMPLES = 2000
ROOT = Path(__file__).resolve().parent.parent


def sample_questions(count: int = 12, max_new_tokens: int = 96) -> list[Any]:
    """``count`` generation requests, each asking what one of the sample corpus' Markdown
    documents (its first 2,000 characters, the documents in turn) asks of the reader."""
    from ragtrail.llm.backends.base import GenerationRequest

    paths = sorted((ROOT / "sample" / "corpus").rglob("*.md"))
    texts = [p.read_text(encoding="utf-8") for p in paths]
    return [
        GenerationRequest(
            messages=(
                {"role": "system", "content": "Answer from the document only."},
                {
                    "role": "user",
                    "content": f"{texts[i % len(texts)][:2000]}\n\nWhat does this document ask "
                    "of the reader? Explain.",
                },
            ),
            max_new_tokens=max_new_tokens,
        )
        for i in range(count)
    ]


def timed_generation(
    backend: Any, requests: list[Any], *, alone: bool
) -> tuple[float, float, list[Any]]:
    """Wall seconds, mean decoding-step ms and results of ``requests``: each in a ``generate``
    call of its own (``alone``) or all in one."""
    with timed_decode_steps(backend) as steps:
        start = time.perf_counter()
        if alone:
            results = [backend.generate([r])[0] for r in requests]
        else:
            results = backend.generate(requests)
        wall = time.perf_counter() - start
    return wall, 1000 * statistics.fmean(steps), results


@contextmanager
def timed_decode_steps(backend: Any) -> Iterator[list[float]]:
    """The seconds of every decoding step ``backend`` runs inside the block (a list filled as
    they run); the backend's own method is back in place after."""
    steps: list[float] = []
    decode = backend._decode_step

    def counted(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = decode(*args, **kwargs)
        steps.append(time.perf_counter() - start)
        return out

    backend._decode_step = counted
    try:
        yield steps
    finally:
        del backend._decode_step


def differing_share(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[float, float, float, int]:
    """Share of positions whose picks differ between ``a`` and ``b`` (one array per group, e.g.
    a document), its 95% percentile-bootstrap interval over groups (positions of one group are
    not independent), and the number of positions."""
    differ = np.array([int((x != y).sum()) for x, y in zip(a, b, strict=True)])
    sizes = np.array([len(x) for x in a])
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(a), size=(RESAMPLES, len(a)))
    rates = differ[picks].sum(axis=1) / sizes[picks].sum(axis=1)
    low, high = np.percentile(rates, [2.5, 97.5])
    return float(differ.sum() / sizes.sum()), float(low), float(high), int(sizes.sum())
