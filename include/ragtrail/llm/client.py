"""Run a typed prompt over many inputs: cache, batch, parse, retry, and account for every call.

:meth:`LLMClient.run` renders each input, serves what it can from the cache, sends the misses to
the backend as one batch (several calls at once for a backend that serves requests
concurrently, such as an HTTP endpoint), and parses each completion into the prompt's output model. An output
that cannot be used (backend error, refusal, unparsable or invalid JSON) is retried up to
``max_attempts`` times in total; each retry changes the seed deterministically (``seed + attempt``)
and appends the unusable reply plus a short corrective message naming the problem (a reply cut
off by the token limit is also retried with a doubled ``max_new_tokens``). Retries are
cached like first attempts, so a re-run with the same cache replays the whole sequence without a
single model call and reaches the same outcomes.

Every input gets exactly one :class:`CallOutcome`, in input order: ``ok`` with the value, or
``failed`` with the cause and the raw text of every attempt. Nothing is dropped or replaced by a
default value; what to do with failures is the caller's decision, made with full information.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.backends.base import GenerationRequest, GenerationResult, LLMBackend, Message
from ragtrail.llm.budget import BudgetExhausted, BudgetGate
from ragtrail.llm.cache import CacheEntry, LLMCache, NullLLMCache, cache_key, cache_key_material
from ragtrail.llm.cache import is_cacheable as _is_cacheable
from ragtrail.llm.prompts import Prompt
from ragtrail.llm.structured import parse_output
from ragtrail.llm.usage import Price, UsageCounters, UsageMeter
from ragtrail.progress import ProgressSink, ProgressUpdate
from ragtrail.redact import redact

__all__ = [
    "Attempt",
    "CallOutcome",
    "FailureCause",
    "GenerationParams",
    "LLMClient",
    "Price",
    "UsageCounters",
    "UsageMeter",
    "looks_like_refusal",
]

log = logging.getLogger(__name__)

InT = TypeVar("InT", bound=BaseModel)
OutT = TypeVar("OutT", bound=BaseModel)


class InFlight:
    """The cache keys whose calls some thread of this process is making now.

    Steps that run side by side (on an endpoint) often ask the same thing: two raters that
    share a prompt, two branches that answer the same question in the same context. The cache
    is content-addressed, so the second asker only has to wait for the first call and read its
    reply back instead of paying for the same call again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, threading.Event] = {}

    def claim(self, keys: Sequence[str]) -> tuple[list[str], dict[str, threading.Event]]:
        """The keys the caller now calls for (release them after caching the replies), and the
        events of those another thread is already calling for (set once it has cached them)."""
        owned: list[str] = []
        joined: dict[str, threading.Event] = {}
        with self._lock:
            for key in keys:
                if key in self._calls:
                    joined[key] = self._calls[key]
                else:
                    self._calls[key] = threading.Event()
                    owned.append(key)
        return owned, joined

    def release(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self._calls.pop(key).set()


IN_FLIGHT = InFlight()
"""The process's calls in flight, across every client (runtimes of one process share it)."""

_MAX_ECHO_CHARS = 1500
_MAX_DETAIL_CHARS = 300

_REFUSAL_RE = re.compile(
    r"^\W*(?:(?:i'?m|i am)\s+(?:so\s+|very\s+)?sorry|sorry|unfortunately|apologies)?[\s,.!:-]*"
    r"(?:but\s+)?(?:as an ai[^,.]*,\s*)?"
    r"i\s*(?:can\s*not|cannot|can'?t|won'?t|will not|am unable to|'?m unable to|am not able to|"
    r"'?m not able to|must decline|do not feel comfortable)",
    re.IGNORECASE,
)


_BUDGET_ERROR = "not sent, budget reached: "


def _unsent(result: GenerationResult) -> bool:
    """Whether ``result`` stands for a request the budget gate kept from the model."""
    return bool(result.error) and str(result.error).startswith(_BUDGET_ERROR)


def looks_like_refusal(text: str) -> bool:
    """Heuristic: the reply starts like a refusal ("I'm sorry, but I can't help with that")."""
    return bool(_REFUSAL_RE.match(text.replace("\u2019", "'")))


class FailureCause(StrEnum):
    BACKEND_ERROR = "backend_error"
    PARSE_ERROR = "parse_error"
    VALIDATION_ERROR = "validation_error"
    REFUSAL = "refusal"


@dataclass(frozen=True)
class GenerationParams:
    """Decoding parameters for one :meth:`LLMClient.run` (shared by all its inputs).

    ``guided_json`` asks backends that support it to constrain decoding to the output schema.
    ``grow_on_truncation`` doubles ``max_new_tokens`` for the retry of an unusable reply that hit
    the token limit (at most ``max_growth`` times the original), since retrying a cut-off answer
    with the same budget usually cuts it off again. Retries of a greedy call (``temperature``
    0) sample at ``retry_temperature`` (seeded per attempt): greedy decoding of nearly the same
    prompt tends to repeat the same unusable reply.
    """

    max_new_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    stop: tuple[str, ...] = ()
    guided_json: bool = True
    grow_on_truncation: bool = True
    max_growth: int = 4
    retry_temperature: float = 0.7


@dataclass
class Attempt:
    """One model call made (or replayed from the cache) for one input."""

    number: int
    text: str
    finish_reason: str
    cached: bool
    error: str | None = None
    cause: FailureCause | None = None
    detail: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class CallOutcome(Generic[OutT]):
    """The final outcome for one input (``index`` = its position in the inputs)."""

    index: int
    status: Literal["ok", "failed"]
    value: OutT | None
    cause: FailureCause | None = None
    error: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    repaired: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def raw_texts(self) -> list[str]:
        """The raw text of every attempt, first to last (empty string where none came back)."""
        return [a.text for a in self.attempts]

    @property
    def failure(self) -> str:
        """``"<cause>: <error>"`` (or the cause alone) of a failed outcome, for a failed verdict."""
        cause = str(self.cause) if self.cause is not None else "failed"
        return f"{cause}: {self.error}" if self.error else cause

    @property
    def cut_off(self) -> bool:
        """Whether the last attempt stopped at the token limit (a parsed value may be partial)."""
        return bool(self.attempts) and self.attempts[-1].finish_reason == "length"


@dataclass
class _State:
    index: int
    base_messages: list[Message]
    schema: JsonObject | None = None
    avoid_copying: tuple[str, ...] = ()
    avoid_words: tuple[str, ...] = ()
    attempts: list[Attempt] = field(default_factory=list)
    outcome: CallOutcome[Any] | None = None
    max_new_tokens: int = 0
    seed: int = 0


@dataclass
class _Tally:
    """Counts of one :meth:`LLMClient.run` call, handed to its progress sink as they change."""

    task: str
    total: int
    sink: ProgressSink | None
    done: int = 0
    cache_hits: int = 0

    def grow(self, n: int) -> None:
        self.total += n

    def advance(self, n: int, *, cached: bool = False) -> None:
        if n <= 0:
            return
        self.done += n
        self.cache_hits += n if cached else 0
        if self.sink is not None:
            self.sink(ProgressUpdate(self.task, self.done, self.total, self.cache_hits))


class LLMClient:
    """Typed, cached, retried LLM calls on top of any :class:`LLMBackend`.

    Args:
        backend: where completions come from.
        cache: completion cache (default: none).
        max_attempts: total attempts per input, first one included (>= 1).
        usage: meter to record calls, cache hits, failures and tokens per stage.
        chunk_size: inputs processed (and cached) per round, so a crash loses little work.
        progress: told ``model calls <stage>`` counts (requests answered, of those planned, and
            the cache hits among them) as they complete; retries add to the total.
        report_every: requests per backend call, so progress moves in steps of this size.
        gate: budget checks asked before each backend call (:mod:`ragtrail.llm.budget`); when
            one says stop, the unsent requests fail with its reason, what came back is cached,
            and :meth:`run` raises :class:`~ragtrail.llm.budget.BudgetExhausted`.
    """

    def __init__(
        self,
        backend: LLMBackend,
        cache: LLMCache | None = None,
        *,
        max_attempts: int = 3,
        usage: UsageMeter | None = None,
        chunk_size: int = 256,
        progress: ProgressSink | None = None,
        report_every: int = 16,
        gate: BudgetGate | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.backend = backend
        self.cache: LLMCache = cache if cache is not None else NullLLMCache()
        self.max_attempts = max_attempts
        self.usage = usage if usage is not None else UsageMeter()
        self.chunk_size = max(1, chunk_size)
        self.progress = progress
        self.report_every = max(1, report_every)
        self.gate = gate

    @property
    def concurrent(self) -> bool:
        """Whether the backend serves requests concurrently (an HTTP endpoint), so that
        independent :meth:`run` calls gain from running at once (:mod:`ragtrail.llm.together`)."""
        return int(getattr(self.backend, "concurrent_requests", 1) or 1) > 1

    def run(
        self,
        prompt: Prompt[InT, OutT],
        inputs: Sequence[InT],
        *,
        stage: str,
        params: GenerationParams | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[CallOutcome[OutT]]:
        """One outcome per input, in order (see module docstring).

        ``seeds`` (one per input) replaces ``params.seed`` input by input, so one batch can hold
        several sampled draws of the same prompt, each with its own seed and cache entry.
        """
        params = params or GenerationParams()
        if seeds is not None and len(seeds) != len(inputs):
            raise ValueError(f"{len(seeds)} seeds for {len(inputs)} inputs")
        outcomes: list[CallOutcome[OutT]] = []
        tally = _Tally(f"model calls {stage}", len(inputs), self.progress)
        for start in range(0, len(inputs), self.chunk_size):
            chunk = inputs[start : start + self.chunk_size]
            states = []
            for i, inp in enumerate(chunk):
                language = prompt.input_language(inp)
                states.append(
                    _State(
                        start + i,
                        prompt.render(inp, language),
                        prompt.guided_schema(inp) if params.guided_json else None,
                        prompt.example_texts(language),
                        prompt.foreign_example_words(inp, language),
                        seed=params.seed if seeds is None else int(seeds[start + i]),
                    )
                )
            self._run_states(prompt, states, stage, params, tally)
            for s in states:
                assert s.outcome is not None
                outcomes.append(s.outcome)
        return outcomes

    # ------------------------------------------------------------------ internals

    def _run_states(
        self,
        prompt: Prompt[Any, Any],
        states: list[_State],
        stage: str,
        params: GenerationParams,
        tally: _Tally,
    ) -> None:
        backend_name, model_id = self.backend.name, self.backend.model_id
        for attempt in range(self.max_attempts):
            active = [s for s in states if s.outcome is None]
            if not active:
                break
            if attempt > 0:
                tally.grow(len(active))
            requests = [self._request(s, attempt, params) for s in active]
            keys = [
                cache_key(backend_name, model_id, prompt.name, prompt.version, r) for r in requests
            ]
            first: dict[str, int] = {}  # each key's first request: identical ones share a call
            for i, key in enumerate(keys):
                first.setdefault(key, i)
            served = {k: e.to_result() for k, e in self.cache.get_many(list(first)).items()}
            owned, joined = IN_FLIGHT.claim([k for k in first if k not in served])
            try:
                fresh = self._fresh(prompt, owned, first, requests, tally, stage)
            finally:
                IN_FLIGHT.release(owned)
            if joined:  # another thread was making these calls: read its replies back
                for event in joined.values():
                    event.wait()
                served |= {k: e.to_result() for k, e in self.cache.get_many(list(joined)).items()}
                fresh |= self._fresh(
                    prompt, [k for k in joined if k not in served], first, requests, tally, stage
                )
            hits, unsent = 0, []
            for i, state in enumerate(active):
                called = keys[i] in fresh and first[keys[i]] == i
                result = fresh[keys[i]] if keys[i] in fresh else served[keys[i]]
                hits += not called
                if _unsent(result):
                    unsent.append(result.error)
                self._absorb(prompt, state, attempt, result, not called)
            tally.advance(hits, cached=True)

            failures_now = sum(
                1 for s in active if s.outcome is not None and s.outcome.status == "failed"
            )
            # calls and tokens were recorded as each backend call returned (_call_backend)
            self.usage.record(
                stage,
                backend_name,
                model_id,
                cache_hits=hits,
                failures=max(0, failures_now - len(unsent)),
            )
            if unsent:
                raise BudgetExhausted(str(unsent[0]).removeprefix(_BUDGET_ERROR))

    def _fresh(
        self,
        prompt: Prompt[Any, Any],
        keys: Sequence[str],
        first: dict[str, int],
        requests: Sequence[GenerationRequest],
        tally: _Tally,
        stage: str,
    ) -> dict[str, GenerationResult]:
        """The backend's replies to the requests of ``keys`` (by key), the usable ones cached."""
        if not keys:
            return {}
        backend_name, model_id = self.backend.name, self.backend.model_id
        sent = [requests[first[k]] for k in keys]
        results = dict(zip(keys, self._call_backend(sent, tally, stage), strict=True))
        self.cache.put_many(
            [
                CacheEntry(
                    key=key,
                    backend=backend_name,
                    model_id=model_id,
                    prompt_name=prompt.name,
                    prompt_version=prompt.version,
                    material=cache_key_material(
                        backend_name, model_id, prompt.name, prompt.version, request
                    ),
                    text=result.text,
                    prompt_tokens=result.prompt_tokens,
                    completion_tokens=result.completion_tokens,
                    finish_reason=result.finish_reason,
                )
                for (key, result), request in zip(results.items(), sent, strict=True)
                if _is_cacheable(result)
            ]
        )
        return results

    def _request(self, state: _State, attempt: int, params: GenerationParams) -> GenerationRequest:
        messages = list(state.base_messages)
        if not state.max_new_tokens:
            state.max_new_tokens = params.max_new_tokens
        if attempt > 0 and state.attempts:
            last = state.attempts[-1]
            if params.grow_on_truncation and last.finish_reason == "length":
                state.max_new_tokens = min(
                    state.max_new_tokens * 2, params.max_new_tokens * max(1, params.max_growth)
                )
            if last.text:
                messages.append({"role": "assistant", "content": last.text[:_MAX_ECHO_CHARS]})
                detail = (last.detail or str(last.cause))[:_MAX_DETAIL_CHARS]
                messages.append(
                    {
                        "role": "user",
                        "content": (
                            f"That reply could not be used ({last.cause}: {detail}). Reply again "
                            "with exactly one JSON object that matches the schema, and nothing else."
                        ),
                    }
                )
        return GenerationRequest(
            messages=messages,
            max_new_tokens=state.max_new_tokens,
            temperature=(
                params.retry_temperature
                if attempt > 0 and params.temperature == 0
                else params.temperature
            ),
            top_p=params.top_p,
            top_k=params.top_k,
            seed=state.seed + attempt,
            json_schema=state.schema,
            stop=params.stop,
            avoid_copying=state.avoid_copying,
            avoid_words=state.avoid_words,
        )

    def _call_backend(
        self, requests: list[GenerationRequest], tally: _Tally, stage: str
    ) -> list[GenerationResult]:
        """The backend's results, :attr:`report_every` requests per call (progress is told after
        each), with a crashing or misbehaving backend turned into errors for that call's requests.

        A backend that serves requests concurrently (``concurrent_requests`` > 1: an HTTP
        endpoint) gets several calls at once (:meth:`_lanes`), so that the end of one call never
        leaves its slots idle while requests wait; the budget gate is still asked before each.
        """
        parts = [
            requests[i : i + self.report_every] for i in range(0, len(requests), self.report_every)
        ]
        lanes = min(self._lanes(), len(parts))
        if lanes <= 1:
            return self._call_in_turn(parts, tally, stage)
        got: dict[int, list[GenerationResult]] = {}
        why: str | None = None
        sent = 0
        with ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="llm-call") as pool:
            running: dict[Future[list[GenerationResult]], int] = {}
            while sent < len(parts) or running:
                while why is None and sent < len(parts) and len(running) < lanes:
                    why = self.gate.reason() if self.gate is not None else None
                    if why is None:
                        running[pool.submit(self._generate, parts[sent])] = sent
                        sent += 1
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    i = running.pop(future)
                    got[i] = future.result()
                    self._record_call(stage, parts[i], got[i], tally)
        results = [r for i in range(sent) for r in got[i]]
        unsent = sum(len(p) for p in parts[sent:])
        return results + [GenerationResult.failure(_BUDGET_ERROR + str(why))] * unsent

    def _lanes(self) -> int:
        """Backend calls in flight at once: 1, or for a concurrent backend enough calls of
        :attr:`report_every` requests to fill its ``concurrent_requests`` slots, plus one."""
        slots = int(getattr(self.backend, "concurrent_requests", 1) or 1)
        return 1 if slots <= 1 else 1 + -(-slots // self.report_every)

    def _call_in_turn(
        self, parts: list[list[GenerationRequest]], tally: _Tally, stage: str
    ) -> list[GenerationResult]:
        results: list[GenerationResult] = []
        for i, part in enumerate(parts):
            why = self.gate.reason() if self.gate is not None else None
            if why:
                rest = sum(len(p) for p in parts[i:])
                results += [GenerationResult.failure(_BUDGET_ERROR + why)] * rest
                break
            got = self._generate(part)
            results += got
            self._record_call(stage, part, got, tally)
        return results

    def _record_call(
        self,
        stage: str,
        part: list[GenerationRequest],
        got: list[GenerationResult],
        tally: _Tally,
    ) -> None:
        # recorded at once, so that the budget gate sees every call made so far
        self.usage.record(
            stage,
            self.backend.name,
            self.backend.model_id,
            calls=len(part),
            prompt_tokens=sum(r.prompt_tokens for r in got),
            completion_tokens=sum(r.completion_tokens for r in got),
        )
        tally.advance(len(part))

    def _generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        try:
            results = list(self.backend.generate(requests))
        except Exception as exc:
            message = redact(str(exc))  # it may name the endpoint's URL
            log.warning("backend %s raised: %s", self.backend.name, message)
            error = f"backend raised {type(exc).__name__}: {message}"
            return [GenerationResult.failure(error)] * len(requests)
        if len(results) != len(requests):
            msg = f"backend returned {len(results)} results for {len(requests)} requests"
            return [GenerationResult.failure(msg)] * len(requests)
        return results

    def _absorb(
        self,
        prompt: Prompt[Any, Any],
        state: _State,
        attempt: int,
        result: GenerationResult,
        cached: bool,
    ) -> None:
        rec = Attempt(
            number=attempt + 1,
            text=result.text,
            finish_reason=result.finish_reason,
            cached=cached,
            error=result.error,
            prompt_tokens=0 if cached else result.prompt_tokens,
            completion_tokens=0 if cached else result.completion_tokens,
        )
        state.attempts.append(rec)
        value: Any = None
        repaired = False
        if result.error is not None:
            rec.cause, rec.detail = FailureCause.BACKEND_ERROR, result.error
        else:
            parsed = parse_output(result.text, prompt.output_model)
            if parsed.ok:
                value, repaired = parsed.value, parsed.repaired
            elif result.refusal or (result.text and looks_like_refusal(result.text)):
                rec.cause = FailureCause.REFUSAL
                rec.detail = result.refusal or "the model declined the task"
            elif not result.text:
                rec.cause = FailureCause.PARSE_ERROR
                rec.detail = f"empty output (finish_reason={result.finish_reason})"
            else:
                rec.cause = (
                    FailureCause.VALIDATION_ERROR
                    if parsed.error_kind == "validation_error"
                    else FailureCause.PARSE_ERROR
                )
                rec.detail = parsed.error
                if result.finish_reason == "length":
                    rec.detail = f"{parsed.error} (output hit max_new_tokens)"
        if rec.cause is None:
            state.outcome = CallOutcome(
                state.index, "ok", value, attempts=state.attempts, repaired=repaired
            )
        elif attempt + 1 >= self.max_attempts:
            state.outcome = CallOutcome(
                state.index, "failed", None, rec.cause, rec.detail, attempts=state.attempts
            )
