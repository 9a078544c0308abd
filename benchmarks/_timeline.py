"""Reading a stub server's timeline: LLM-pending time, requests in flight, faults and retries.

"Pending" time is the union of every request's ``[arrival, end]``: the wall time during which the
pipeline waited on the endpoint. "In flight" counts requests holding a service slot. A *phase* is a
stretch of pending time whose requests are less than ``gap_s`` apart (the nightly's steps do other
work, e.g. embedding, between them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ragtrail.llm.stub_server import RequestRecord, in_flight_events

BARS = "▁▂▃▄▅▆▇█"


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


@dataclass
class Profile:
    """What one run's timeline says, against a server of ``concurrency`` slots."""

    concurrency: int
    requests: int
    served: int
    pending_s: float
    service_s: float
    mean_in_flight: float
    p95_in_flight: float
    faults: Counter[str]
    retried_ok: int
    lost: int
    levels: list[tuple[float, float, int]]  # (start, end, in flight) over pending time only

    @property
    def mean_service_s(self) -> float:
        return self.service_s / self.served if self.served else 0.0

    @property
    def ideal_s(self) -> float:
        return self.service_s / self.concurrency

    @property
    def ratio(self) -> float:
        return self.ideal_s / self.pending_s if self.pending_s else 0.0


def profile(records: list[RequestRecord], concurrency: int) -> Profile:
    served = [r for r in records if r.start is not None]
    pending = _union([(r.arrival, r.end) for r in records])
    levels = _levels(records, pending)
    durations = np.array([b - a for a, b, _ in levels]) if levels else np.zeros(1)
    counts = np.array([n for _, _, n in levels]) if levels else np.zeros(1)
    faults = Counter(r.fault for r in records if r.fault)
    ok_at: dict[str, float] = {}
    for r in records:
        if r.status == 200:
            ok_at[r.body] = max(ok_at.get(r.body, r.end), r.end)
    faulted = [r for r in records if r.fault]
    retried_ok = sum(1 for r in faulted if ok_at.get(r.body, -1.0) >= r.end)
    return Profile(
        concurrency=concurrency,
        requests=len(records),
        served=len(served),
        pending_s=sum(b - a for a, b in pending),
        service_s=sum(r.end - r.start for r in served if r.start is not None),
        mean_in_flight=float(np.average(counts, weights=durations)) if durations.sum() else 0.0,
        p95_in_flight=_weighted_quantile(counts, durations, 0.95),
        faults=faults,
        retried_ok=retried_ok,
        lost=len(faulted) - retried_ok,
        levels=levels,
    )


def _levels(
    records: list[RequestRecord], pending: list[tuple[float, float]]
) -> list[tuple[float, float, int]]:
    """Constant-level pieces ``(start, end, in flight)`` clipped to the pending intervals."""
    steps = list(in_flight_events(records))
    out: list[tuple[float, float, int]] = []
    for a, b in pending:
        level = 0
        for t, n in steps:
            if t > a:
                break
            level = n
        cursor = a
        for t, n in steps:
            if t <= a:
                continue
            if t >= b:
                break
            if t > cursor:
                out.append((cursor, t, level))
            cursor, level = t, n
        if b > cursor:
            out.append((cursor, b, level))
    return out


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    if not weights.sum():
        return 0.0
    order = np.argsort(values)
    cum = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][min(len(values) - 1, int(np.searchsorted(cum, q)))])


def phases(records: list[RequestRecord], gap_s: float = 1.0) -> list[list[RequestRecord]]:
    """The records grouped into phases: runs of requests less than ``gap_s`` apart."""
    out: list[list[RequestRecord]] = []
    end = -1e9
    for r in sorted(records, key=lambda r: r.arrival):
        if out and r.arrival <= end + gap_s:
            out[-1].append(r)
            end = max(end, r.end)
        else:
            out.append([r])
            end = r.end
    return out


def sparkline(prof: Profile, width: int = 60) -> str:
    """Mean requests in flight per slice of pending time, relative to the concurrency."""
    total = sum(b - a for a, b, _ in prof.levels)
    if not total:
        return ""
    step = total / width
    cells = np.zeros(width)
    offset = 0.0
    for a, b, n in prof.levels:
        left, right = offset, offset + (b - a)
        offset = right
        first, last = int(left // step), min(width - 1, int(right // step))
        for i in range(first, last + 1):
            overlap = min(right, (i + 1) * step) - max(left, i * step)
            if overlap > 0:
                cells[i] += n * overlap
    means = cells / step
    return "".join(BARS[min(7, int(8 * m / (prof.concurrency + 1e-9)))] for m in means)


def dominant_tags(records: list[RequestRecord], n: int = 2) -> str:
    counts = Counter(r.tag for r in records)
    return ", ".join(f"{tag} ×{k}" for tag, k in counts.most_common(n))
