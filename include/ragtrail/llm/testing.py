"""Test doubles for the LLM layer: a scripted, in-process backend that returns given texts.

:class:`ScriptedBackend` is NOT a model. It exists so tests of anything built on
:class:`ragtrail.llm.client.LLMClient` (QA generation, critique, judging) can run with exact,
deterministic outputs and count the calls made. Each request's reply comes from a responder
function, or from a list of texts consumed in order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ragtrail.llm.backends.base import GenerationRequest, GenerationResult

Responder = Callable[[GenerationRequest, int], "str | GenerationResult"]


@dataclass
class ScriptedBackend:
    """Returns scripted replies. ``calls`` records every request seen (in order).

    Args:
        responder: ``(request, request_number) -> text | GenerationResult``; or a list of
            replies used in order (one per request); running out of replies is an error result.
        model_id: id reported for cache keys.
    """

    responder: Responder | Sequence[str | GenerationResult]
    model_id: str = "scripted-v1"
    name: str = "scripted"
    calls: list[GenerationRequest] = field(default_factory=list)
    generate_calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        with self._lock:
            self.generate_calls += 1
            first = len(self.calls)
            self.calls.extend(requests)
        return [self._reply(req, first + i) for i, req in enumerate(requests)]

    def _reply(self, request: GenerationRequest, number: int) -> GenerationResult:
        if callable(self.responder):
            reply = self.responder(request, number)
        elif number < len(self.responder):
            reply = self.responder[number]
        else:
            return GenerationResult.failure(f"script exhausted at request {number}")
        if isinstance(reply, GenerationResult):
            return reply
        prompt_tokens = sum(len(m["content"].split()) for m in request.messages)
        return GenerationResult(
            text=reply,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(reply.split()),
            finish_reason="stop",
        )
