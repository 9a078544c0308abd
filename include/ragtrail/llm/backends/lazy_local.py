"""A local transformers backend that loads its model on the first request the cache lacks.

A warm night answers every model call from the content-addressed cache, yet building a
:class:`~ragtrail.llm.backends.transformers_local.TransformersBackend` imports torch and
transformers' generation stack and loads the weights: seconds spent on nothing. The cache keys
only need the backend's ``name`` and ``model_id``, and for a plain local model (a builtin or an
``hf:`` id, path or ``s3://`` URI, without adapters) the id follows from the spec: the resolved
model (for ``s3://``, the mirror's digest), its precision and its JSON guide.
:class:`LazyLocalBackend` computes that id with no torch import and builds the real backend on its
first :meth:`~LazyLocalBackend.generate`, then checks that the loaded backend's own id is the one
the cache keys used: a mismatch would mix cached replies of two models, so it raises instead.

This module imports neither torch nor transformers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from ragtrail.llm.backends.base import GenerationRequest, GenerationResult, LLMBackend
from ragtrail.llm.backends.model_store import (
    DEFAULT_MAX_STRING_CHARS,
    local_model_id,
    resolve_model_source,
)

T = TypeVar("T")


class LoadedModelMismatch(ValueError):
    """The loaded model's id differs from the id computed before loading it."""


class BuiltOnFirstUse(Generic[T]):
    """``build()``, run once on the first :meth:`get` (thread-safely), for a model whose cache
    identity is known before it exists: what was built must report ``expected`` as
    ``identity(built)``, or :class:`LoadedModelMismatch` is raised and nothing is kept (its
    replies would sit under another model's cache keys). The lazy LLM backend below and the
    lazy helpfulness scorer (:class:`ragtrail.llm.scoring.LazyLogProbScorer`) both build so."""

    def __init__(
        self, build: Callable[[], T], expected: Hashable, identity: Callable[[T], Hashable]
    ) -> None:
        self._build = build
        self.expected = expected
        self._identity = identity
        self._built: T | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        """Whether :meth:`get` has built the model."""
        return self._built is not None

    def get(self) -> T:
        """The model, built on the first call."""
        with self._lock:
            if self._built is None:
                built = self._build()
                if (got := self._identity(built)) != self.expected:
                    raise LoadedModelMismatch(
                        f"the model built for {self.expected!r} reports {got!r}"
                    )
                self._built = built
            return self._built


def planned_local_model_id(model: str, **kwargs: Any) -> str:
    """The ``model_id`` :class:`TransformersBackend` ``(model, **kwargs)`` will have, found
    without loading it (resolving the model source, which converts a builtin or mirrors an
    ``s3://`` prefix at most once per cache)."""
    if kwargs.get("adapter_path"):
        raise ValueError("a backend with adapters is identified by loading them")
    _, derived_id = resolve_model_source(
        model, kwargs.get("cache_dir"), kwargs.get("s3_endpoint_url")
    )
    return local_model_id(
        kwargs.get("model_id") or derived_id,
        kwargs.get("dtype", "float32"),
        guided_json=kwargs.get("guided_json", True),
        max_string_chars=kwargs.get("max_string_chars", DEFAULT_MAX_STRING_CHARS),
        decode_weights=kwargs.get("decode_weights", "native"),
    )


class LazyLocalBackend:
    """An :class:`~ragtrail.llm.backends.base.LLMBackend` that builds ``build()`` on first use.

    ``name`` and ``model_id`` are known up front; ``generate`` (and any other attribute of the
    real backend) builds it once, thread-safely. It serves one request at a time, as a local
    model does (``concurrent_requests`` 1).
    """

    name = "transformers"
    concurrent_requests = 1

    def __init__(self, model_id: str, build: Callable[[], LLMBackend]) -> None:
        self.model_id = model_id
        self._backend = BuiltOnFirstUse(
            build, (self.name, model_id), lambda built: (built.name, built.model_id)
        )

    @property
    def loaded(self) -> bool:
        """Whether the real backend has been built."""
        return self._backend.built

    def load(self) -> LLMBackend:
        """The real backend, built on the first call."""
        return self._backend.get()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """The real backend's results (building it first if need be)."""
        return self.load().generate(requests)

    def __getattr__(self, attr: str) -> Any:
        # only reached for attributes this class lacks: the loaded backend's own (tokenizer, ...)
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self.load(), attr)
