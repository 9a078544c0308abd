"""The contract every LLM backend fulfils: batched chat generation that never loses a request.

A backend turns a batch of :class:`GenerationRequest` into exactly one :class:`GenerationResult` per
request, in the same order. A failure of one request (an HTTP error, a prompt too long for the model)
is reported in that request's ``error`` field; it must never raise and take the rest of the batch
down with it. Everything above the backends (caching, parsing, retries) relies on this.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ragtrail.jsonsafe import JsonObject

Message = dict[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

_ROLES = frozenset({"system", "user", "assistant"})


def _freeze_messages(messages: Sequence[Mapping[str, str]]) -> tuple[Message, ...]:
    out: list[Message] = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in _ROLES:
            raise ValueError(f"message {i}: role must be one of {sorted(_ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"message {i}: content must be a string")
        out.append({"role": role, "content": content})
    if not out:
        raise ValueError("a generation request needs at least one message")
    return tuple(out)


@dataclass(frozen=True)
class GenerationRequest:
    """One chat completion to produce.

    ``temperature == 0`` means greedy decoding; sampling keeps the ``top_k`` most likely tokens
    (0: all) and then the ``top_p`` nucleus. ``seed`` makes sampling reproducible on backends
    that support it. ``json_schema`` asks for guided JSON decoding where the backend can do it
    (other backends ignore it; the prompt itself carries the schema too). ``stop`` strings end the
    completion early and are not included in the text. ``avoid_copying`` lists texts (the
    few-shot example answers) whose spans the output must not reproduce, on backends that can
    enforce it while decoding (the local transformers backend); small models otherwise echo the
    worked example instead of answering the input. ``avoid_words`` are words the output must
    not use (the example's subject words that the input never mentions), on the same backends.
    """

    messages: tuple[Message, ...]
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    json_schema: JsonObject | None = None
    stop: tuple[str, ...] = ()
    avoid_copying: tuple[str, ...] = ()
    avoid_words: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", _freeze_messages(self.messages))
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "avoid_copying", tuple(self.avoid_copying))
        object.__setattr__(self, "avoid_words", tuple(self.avoid_words))
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0 (0 = no top-k cut)")

    def generation_params(self) -> JsonObject:
        """The decoding parameters as plain JSON-able data (used in cache keys and logs)."""
        params: JsonObject = {
            "max_new_tokens": self.max_new_tokens,
            "temperature": float(self.temperature),
            "top_p": float(self.top_p),
            "seed": self.seed,
            "stop": list(self.stop),
            "json_schema": self.json_schema,
        }
        if self.top_k:  # only when set, so earlier cache keys stay valid
            params["top_k"] = self.top_k
        if self.avoid_copying:
            params["avoid_copying"] = list(self.avoid_copying)
        if self.avoid_words:
            params["avoid_words"] = list(self.avoid_words)
        return params

    def effective_seed(self) -> int:
        """The request's seed, or a stable one derived from its content when none was given.

        Backends that sample use this so that the same request always yields the same text.
        """
        if self.seed is not None:
            return int(self.seed)
        blob = json.dumps([list(self.messages), self.generation_params()], sort_keys=True)
        return int.from_bytes(hashlib.sha256(blob.encode("utf-8")).digest()[:4], "big")


@dataclass
class GenerationResult:
    """The outcome of one request. ``error`` is set (and ``text`` empty) when generation failed.

    ``finish_reason`` is ``"stop"`` (natural end or a stop string), ``"length"`` (hit
    ``max_new_tokens``), whatever a remote API reported (e.g. ``"content_filter"``), or ``"error"``.
    ``refusal`` carries an API-level refusal message when the provider sends one separately.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    error: str | None = None
    refusal: str | None = None
    attempts: int = 1
    latency_s: float = 0.0
    extra: JsonObject = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def failure(cls, error: str, *, attempts: int = 1, latency_s: float = 0.0) -> GenerationResult:
        return cls(
            text="", finish_reason="error", error=error, attempts=attempts, latency_s=latency_s
        )


@runtime_checkable
class LLMBackend(Protocol):
    """Anything that can generate chat completions in batches.

    ``name`` identifies the kind of backend (``"transformers"``, ``"openai"``...), ``model_id`` the
    exact model (and adapter) behind it; both are part of every cache key.
    """

    name: str
    model_id: str

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, in order; per-request failures are results with ``error``."""
        ...


def apply_stop_strings(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop string. Returns the text and whether a stop string hit."""
    cut = min((i for s in stop if s and (i := text.find(s)) >= 0), default=-1)
    if cut < 0:
        return text, False
    return text[:cut], True
