"""A model bundle (:mod:`ragtrail.models.bundle`) served as an LLM backend: the bundle's base
model with its adapters merged in order, through :class:`TransformersBackend`.

Every adapter's digest is part of the backend's model id, so two bundles that differ in any
stage never share cached completions. ``bundle:<dir>`` specs load through here, and so does the
model registry's ``registry:<name>@<alias>`` once it has downloaded a version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragtrail.llm.backends.transformers_local import TransformersBackend
from ragtrail.models.bundle import read_bundle


def load_bundle_backend(bundle_dir: str | Path, **backend_kwargs: Any) -> TransformersBackend:
    """The bundle in ``bundle_dir`` as a backend (``backend_kwargs`` go to the backend; an
    ``adapter_path`` there is refused, the bundle names its adapters)."""
    if "adapter_path" in backend_kwargs:
        raise TypeError("load_bundle_backend takes its adapters from the bundle, not adapter_path")
    bundle = read_bundle(bundle_dir)
    return TransformersBackend(
        bundle.base_model, adapter_path=bundle.adapter_dirs(), **backend_kwargs
    )
