"""Build a backend from a one-line spec, as written in config files and CLI flags.

=================================  ===========================================================
``builtin:smollm2-135m-instruct``  the bundled SmolLM2 through transformers (CPU friendly)
``hf:<id, path or s3:// URI>``     any transformers causal or seq2seq model
``openai:<model>@<base_url>``      an OpenAI-compatible server; without ``@base_url`` the URL
                                   comes from ``RAGTRAIL_LLM_BASE_URL``; the key from
                                   ``RAGTRAIL_LLM_API_KEY`` unless ``api_key=`` is passed
``vllm:<model>``                   in-process vLLM (optional extra, CUDA only)
``generator:<dir or s3:// URI>``   a LoRA-tuned small generator saved by
                                   :func:`ragtrail.train.generator.finetune_generator`
``scripted:<module>:<callable>``   a TEST DOUBLE, not a model: ``<module>.<callable>()`` must
                                   return an :class:`LLMBackend` (e.g. a
                                   :class:`ragtrail.llm.testing.ScriptedBackend`); lets tests
                                   select scripted replies in worker processes by config
=================================  ===========================================================

Backends are imported only when asked for, so e.g. an HTTP-only deployment never imports torch.
Keyword arguments are passed to the backend's constructor.
"""

from __future__ import annotations

from typing import Any

from ragtrail.llm.backends.base import LLMBackend
from ragtrail.llm.backends.model_store import BUILTIN_SMOLLM2

_URL_MARK = ("@http://", "@https://")


def load_llm_backend(spec: str, **kwargs: Any) -> LLMBackend:
    """Return the backend named by ``spec`` (see module docstring)."""
    spec = spec.strip()
    if spec.startswith("builtin:"):
        from ragtrail.llm.backends.transformers_local import TransformersBackend

        if spec != BUILTIN_SMOLLM2:
            raise ValueError(f"unknown builtin model {spec!r}; known: {BUILTIN_SMOLLM2}")
        return TransformersBackend(spec, **kwargs)
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ValueError(f"LLM spec {spec!r} must look like 'kind:model' ({_KINDS})")
    if kind == "hf":
        from ragtrail.llm.backends.transformers_local import TransformersBackend

        return TransformersBackend(rest, **kwargs)
    if kind == "openai":
        from ragtrail.llm.backends.openai_compat import OpenAICompatBackend

        model, base_url = _split_model_url(rest)
        if base_url:
            kwargs["base_url"] = base_url
        return OpenAICompatBackend.from_env(model, **kwargs)
    if kind == "generator":
        from ragtrail.train.backend import FineTunedGeneratorBackend

        return FineTunedGeneratorBackend(rest, **kwargs)
    if kind == "vllm":
        from ragtrail.llm.backends.vllm_inprocess import VLLMBackend

        return VLLMBackend(rest, **kwargs)
    if kind == "scripted":
        return _load_scripted(rest, **kwargs)
    raise ValueError(f"unknown LLM backend kind {kind!r} in {spec!r} ({_KINDS})")


_KINDS = (
    "builtin:smollm2-135m-instruct, hf:<model>, openai:<model>[@<base_url>], vllm:<model>, "
    "generator:<dir>, scripted:<module>:<callable>"
)


def _load_scripted(target: str, **kwargs: Any) -> LLMBackend:
    """Import ``module:callable`` and return the test-double backend the callable builds."""
    import importlib

    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"scripted LLM spec needs 'scripted:<module>:<callable>', got {target!r}")
    factory = getattr(importlib.import_module(module_name), attr, None)
    if not callable(factory):
        raise ValueError(f"{module_name}.{attr} is not a callable that builds an LLM backend")
    backend = factory(**kwargs)
    missing = [a for a in ("name", "model_id", "generate") if not hasattr(backend, a)]
    if missing:
        raise TypeError(f"{module_name}.{attr}() returned {backend!r}, lacking {missing}")
    return backend


def _split_model_url(rest: str) -> tuple[str, str | None]:
    for mark in _URL_MARK:
        pos = rest.find(mark)
        if pos >= 0:
            return rest[:pos], rest[pos + 1 :]
    return rest, None
