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
from collections.abc import Callable, Sequence
from typing import Any

from ragtrail.llm.backends.base import GenerationRequest, GenerationResult, LLMBackend
from ragtrail.llm.backends.model_store import (
    DEFAULT_MAX_STRING_CHARS,
    local_model_id,
    resolve_model_source,
)


class LoadedModelMismatch(RuntimeError):
    """The loaded model's id differs from the id computed before loading it."""


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
        self._build = build
        self._backend: LLMBackend | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the real backend has been built."""
        return self._backend is not None

    def load(self) -> LLMBackend:
        """The real backend, built on the first call."""
        with self._lock:
            if self._backend is None:
                built = self._build()
                if (built.name, built.model_id) != (self.name, self.model_id):
                    raise LoadedModelMismatch(
                        f"the loaded model is {built.name}:{built.model_id}, but its cache keys "
                        f"were made for {self.name}:{self.model_id}"
                    )
                self._backend = built
            return self._backend

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """The real backend's results (building it first if need be)."""
        return self.load().generate(requests)

    def __getattr__(self, attr: str) -> Any:
        # only reached for attributes this class lacks: the loaded backend's own (tokenizer, ...)
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self.load(), attr)
