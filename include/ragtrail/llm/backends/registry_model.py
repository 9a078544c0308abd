"""``registry:<name>@<alias or version>``: serve a registered model bundle as an LLM backend.

The spec resolves the alias (``champion``, ``challenger``) or version number in the model registry
(:class:`ragtrail.models.mlflow_registry.MlflowModelRegistry` from the settings, unless a registry
is passed), downloads the version's bundle into the content-checked cache and loads it:

- kind ``generator`` (the LoRA question generator, with its own tokenizer and prompt format)
  through the ``generator:`` spec kind, which :mod:`ragtrail.train` registers;
- any other kind (the citation answerer) as its base model with its adapters merged in order
  (:func:`ragtrail.llm.backends.bundle.load_bundle_backend`).

The backend's ``model_id`` (the identity in LLM cache keys) names the resolved version and its
content digest, so a moved alias never serves cached answers of the model it replaced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragtrail.config import Settings, load_settings
from ragtrail.llm.backends.base import LLMBackend
from ragtrail.models.bundle import read_bundle
from ragtrail.models.registry import ModelRegistry, parse_model_ref

GENERATOR_KIND = "generator"


def load_registry_backend(
    rest: str,
    *,
    registry: ModelRegistry | None = None,
    settings: Settings | None = None,
    **backend_kwargs: Any,
) -> LLMBackend:
    """The backend for spec ``registry:<rest>``; ``rest`` is ``<name>[@<alias or version>]``
    (a bare name means ``@champion``). Other keyword arguments go to the model backend."""
    name, ref = parse_model_ref(rest)
    if registry is None:
        from ragtrail.models.mlflow_registry import MlflowModelRegistry

        registry = MlflowModelRegistry.from_settings(settings or load_settings())
    version, bundle_dir = registry.download_bundle(name, ref)
    model_id = f"registry:{name}@v{version.version}:{version.digest[:12]}"
    return load_bundle(bundle_dir, model_id=model_id, **backend_kwargs)


def load_bundle(bundle_dir: str | Path, *, model_id: str, **backend_kwargs: Any) -> LLMBackend:
    """Load a local bundle directory as a backend (see module docstring)."""
    from ragtrail.llm.factory import load_llm_backend

    bundle = read_bundle(bundle_dir)
    if bundle.kind == GENERATOR_KIND:
        return load_llm_backend(f"generator:{bundle.path}", model_id=model_id, **backend_kwargs)
    from ragtrail.llm.backends.bundle import load_bundle_backend

    return load_bundle_backend(bundle.path, model_id=model_id, **backend_kwargs)
