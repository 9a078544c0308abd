"""Deterministic fault injection around any backend, for tests and chaos runs.

``FaultInjectingBackend(inner, plan)`` passes requests to ``inner`` and corrupts some results the
way real models and servers fail: error results, a raised exception (a crashing backend), JSON
cut off mid-way, malformed JSON, refusals and empty output. Faults are chosen either by an explicit
schedule (request number -> fault, counted over the backend's lifetime) or by rates; rate draws are
seeded from the plan seed and the request's content, so the same request meets the same fault in
every run regardless of batch order, while a retry (whose seed differs) draws afresh.

The wrapper reports ``name = inner.name + "+faults"`` so its corrupted outputs never share cache
entries with the clean backend.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from ragtrail.llm.backends.base import GenerationRequest, GenerationResult, LLMBackend

REFUSAL_TEXT = "I'm sorry, but I can't help with that."


class Fault(StrEnum):
    ERROR = "error"  # a result with ``error`` set
    EXCEPTION = "exception"  # generate() raises for the whole batch
    TRUNCATED_JSON = "truncated_json"  # inner text cut at a deterministic point
    MALFORMED_JSON = "malformed_json"  # unrepairable JSON-looking text
    REFUSAL = "refusal"
    EMPTY = "empty"


class InjectedFaultError(RuntimeError):
    """Raised by :class:`FaultInjectingBackend` for :attr:`Fault.EXCEPTION`."""


@dataclass(frozen=True)
class FaultPlan:
    """Which requests get which fault.

    ``schedule`` maps a 0-based request number (over the wrapper's lifetime) to a fault and takes
    precedence; ``rates`` gives per-fault probabilities (summing to at most 1) for the rest.
    """

    rates: Mapping[Fault, float] = field(default_factory=dict)
    schedule: Mapping[int, Fault] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        total = sum(self.rates.values())
        if any(r < 0 for r in self.rates.values()) or total > 1.0 + 1e-9:
            raise ValueError("fault rates must be >= 0 and sum to at most 1")


class FaultInjectingBackend:
    """Wraps ``inner`` and injects the faults of ``plan``; ``injected`` logs (number, fault)."""

    def __init__(self, inner: LLMBackend, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan
        self.name = f"{inner.name}+faults"
        self.model_id = inner.model_id
        self.injected: list[tuple[int, Fault]] = []
        self._counter = 0
        self._lock = threading.Lock()

    def _choose(self, number: int, request: GenerationRequest) -> Fault | None:
        if number in self.plan.schedule:
            return Fault(self.plan.schedule[number])
        if not self.plan.rates:
            return None
        blob = json.dumps(
            [self.plan.seed, list(request.messages), request.generation_params()], sort_keys=True
        )
        draw = random.Random(hashlib.sha256(blob.encode("utf-8")).digest()).random()
        acc = 0.0
        for fault, rate in sorted(self.plan.rates.items(), key=lambda kv: str(kv[0])):
            acc += rate
            if draw < acc:
                return Fault(fault)
        return None

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        with self._lock:
            first = self._counter
            self._counter += len(requests)
        faults = [self._choose(first + i, r) for i, r in enumerate(requests)]
        for i, f in enumerate(faults):
            if f is not None:
                self.injected.append((first + i, f))
        if Fault.EXCEPTION in faults:
            raise InjectedFaultError(f"injected backend crash at request {first}")

        # Only requests whose fault needs the real output (or that have none) reach the inner backend.
        needs_inner = [
            i
            for i, f in enumerate(faults)
            if f in (None, Fault.TRUNCATED_JSON, Fault.MALFORMED_JSON)
        ]
        inner_results = (
            self.inner.generate([requests[i] for i in needs_inner]) if needs_inner else []
        )
        by_pos = dict(zip(needs_inner, inner_results, strict=True))

        out: list[GenerationResult] = []
        for i, fault in enumerate(faults):
            base = by_pos.get(i)
            out.append(self._apply(fault, base, first + i))
        return out

    @staticmethod
    def _apply(fault: Fault | None, base: GenerationResult | None, number: int) -> GenerationResult:
        if fault is None:
            assert base is not None
            return base
        if fault is Fault.ERROR:
            return GenerationResult.failure(f"injected error at request {number}")
        if fault is Fault.REFUSAL:
            return GenerationResult(text=REFUSAL_TEXT, completion_tokens=10, finish_reason="stop")
        if fault is Fault.EMPTY:
            return GenerationResult(text="", finish_reason="stop")
        assert base is not None
        if base.error is not None:
            return base
        if fault is Fault.TRUNCATED_JSON:
            text = base.text
            cut = max(1, (len(text) * 2) // 3) if len(text) > 1 else 0
            # Cut inside the object, never on its last character, so the result really is cut off.
            return replace(base, text=text[:cut], finish_reason="length")
        # MALFORMED_JSON: keys unquoted, separators doubled: looks like JSON, cannot be repaired.
        return replace(base, text='{answer: "unterminated, , rating:: }}', finish_reason="stop")
