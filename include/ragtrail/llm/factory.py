"""Build a backend from a one-line spec, as written in config files and CLI flags.

=================================  ===========================================================
``builtin:smollm2-135m-instruct``  the bundled SmolLM2 through transformers (CPU friendly)
``hf:<id, path or s3:// URI>``     any transformers causal or seq2seq model
``openai:<model>@<base_url>``      an OpenAI-compatible server; without ``@base_url`` the URL
                                   comes from ``RAGTRAIL_LLM_BASE_URL``; the key from
                                   ``RAGTRAIL_LLM_API_KEY`` unless ``api_key=`` is passed
``vllm:<model>``                   in-process vLLM (optional extra, CUDA only)
``bundle:<dir>``                   a model bundle (:mod:`ragtrail.models.bundle`): its base
                                   model with its LoRA adapters merged in order
``generator:<dir or s3:// URI>``   a LoRA-tuned small generator saved by
                                   :func:`ragtrail.train.generator.finetune_generator`;
                                   registered by :mod:`ragtrail.train` when it is imported
``registry:<name>@<ref>``          a registered model version, ``<ref>`` an alias or number
                                   (``registry:ragtrail-citation@champion``); its bundle is
                                   downloaded, checked against its digest and loaded
``scripted:<module>:<callable>``   a TEST DOUBLE, not a model: ``callable()`` returns a backend
                                   (e.g. a :class:`ragtrail.llm.testing.ScriptedBackend`), so
                                   tests can select scripted replies through the environment
                                   in processes they do not control (Airflow workers)
=================================  ===========================================================

Spec kinds live in a registry (kind -> loader). Packages above the LLM layer add their own kinds
with :func:`register_llm_backend` instead of this module importing them, so ``ragtrail.llm``
depends on nothing above it. A loader may be registered as a ``"module:attribute"`` string,
imported on first use: backends are imported only when asked for, so e.g. an HTTP-only
deployment never imports torch. Keyword arguments are passed to the backend's constructor.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ragtrail.llm.backends.base import LLMBackend
from ragtrail.llm.backends.model_store import BUILTIN_SMOLLM2
from ragtrail.records import ModelKind, ModelSpec, ModelSpecError
from ragtrail.redact import is_redacted, redact

BackendLoader = Callable[..., LLMBackend]
"""``loader(rest_of_spec, **kwargs) -> backend``; a backend class is such a loader."""

_URL_MARK = ("@http://", "@https://")


class DuplicateBackendError(ValueError):
    """A spec kind is already registered with a different loader."""


def _openai(rest: str, **kwargs: Any) -> LLMBackend:
    from ragtrail.llm.backends.openai_compat import OpenAICompatBackend

    model, base_url = _split_model_url(rest)
    if base_url:
        kwargs["base_url"] = base_url
    return OpenAICompatBackend.from_env(model, **kwargs)


_LOADERS: dict[str, BackendLoader | str] = {
    ModelKind.HF: "ragtrail.llm.backends.transformers_local:TransformersBackend",
    ModelKind.OPENAI: _openai,
    ModelKind.VLLM: "ragtrail.llm.backends.vllm_inprocess:VLLMBackend",
    ModelKind.REGISTRY: "ragtrail.llm.backends.registry_model:load_registry_backend",
    ModelKind.BUNDLE: "ragtrail.llm.backends.bundle:load_bundle_backend",
}


def register_llm_backend(kind: str, loader: BackendLoader | str) -> None:
    """Make ``kind:<rest>`` specs load through ``loader`` (a callable or ``"module:attr"``).

    Registering the same loader again is a no-op (modules may be re-imported); a different
    loader for a known kind raises :class:`DuplicateBackendError` rather than silently
    replacing it.
    """
    if not kind or not kind.isidentifier() or kind == ModelKind.BUILTIN:
        raise ValueError(f"invalid LLM backend kind {kind!r}")
    if isinstance(loader, str) and not _is_reference(loader):
        raise ValueError(f"loader reference must look like 'package.module:attr', got {loader!r}")
    known = _LOADERS.get(kind)
    if known is not None and known != loader:
        raise DuplicateBackendError(f"LLM backend kind {kind!r} is already registered: {known!r}")
    _LOADERS[kind] = loader


def registered_llm_backends() -> tuple[str, ...]:
    """The spec kinds :func:`load_llm_backend` accepts now (besides ``builtin:``), sorted."""
    return tuple(sorted(_LOADERS))


def load_llm_backend(spec: str, **kwargs: Any) -> LLMBackend:
    """Return the backend named by ``spec`` (see module docstring).

    A spec whose URL credentials were redacted (``***``, as every record and report shows them)
    is refused: it was copied from a record, and it would only fail to authenticate. Error
    messages show the spec redacted.
    """
    spec = spec.strip()
    shown = redact(spec)
    if is_redacted(spec):
        raise ValueError(
            f"LLM spec {shown!r} has its credentials redacted (***), as recorded specs do: "
            "give the spec with its real URL (e.g. from the settings or the environment)"
        )
    try:
        parsed = ModelSpec.parse(spec, kinds=None)
    except ModelSpecError:
        raise ValueError(f"LLM spec {shown!r} must look like 'kind:model' ({_kinds()})") from None
    if parsed.kind == ModelKind.BUILTIN:
        if spec != BUILTIN_SMOLLM2:
            raise ValueError(f"unknown builtin model {shown!r}; known: {BUILTIN_SMOLLM2}")
        return _resolve_loader(_LOADERS[ModelKind.HF])(spec, **kwargs)
    loader = _LOADERS.get(parsed.kind)
    if loader is None:
        raise ValueError(f"unknown LLM backend kind {parsed.kind!r} in {shown!r} ({_kinds()})")
    return _resolve_loader(loader)(parsed.model, **kwargs)


def _resolve_loader(loader: BackendLoader | str) -> BackendLoader:
    if not isinstance(loader, str):
        return loader
    module, _, attr = loader.partition(":")
    resolved: BackendLoader = getattr(importlib.import_module(module), attr)
    return resolved


def _is_reference(text: str) -> bool:
    module, sep, attr = text.partition(":")
    return bool(sep) and all(p.isidentifier() for p in module.split(".")) and attr.isidentifier()


def _kinds() -> str:
    kinds = ", ".join(f"{k}:<model>" for k in registered_llm_backends())
    hint = "" if ModelKind.GENERATOR in _LOADERS else "; 'generator:' needs `import ragtrail.train`"
    return f"{BUILTIN_SMOLLM2}, {kinds}{hint}"


def _load_scripted(target: str, **kwargs: Any) -> LLMBackend:
    """Import ``module:callable`` and return the test-double backend the callable builds."""
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


_LOADERS["scripted"] = _load_scripted


def _split_model_url(rest: str) -> tuple[str, str | None]:
    for mark in _URL_MARK:
        pos = rest.find(mark)
        if pos >= 0:
            return rest[:pos], rest[pos + 1 :]
    return rest, None
