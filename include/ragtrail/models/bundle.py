"""A trained model as one self-describing directory: base model, LoRA adapters, lineage.

Fine-tuning writes a *bundle*; the model registry stores and versions bundles; the answerer loads
one (``registry:<name>@champion``) by loading the base model and merging the adapters in order.
An RL stage trained on top of an SFT stage is two adapters (``sft`` then ``rl``), so a version
stays a few megabytes instead of a full copy of the weights, and each stage can be inspected.

Layout::

    <bundle>/bundle.json        {"format", "kind", "base_model", "adapters": [...], "lineage"}
    <bundle>/adapters/<name>/   one PEFT adapter directory per stage, merged in the listed order
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragtrail import jsonsafe
from ragtrail.jsonsafe import JsonObject
from ragtrail.redact import redact_json

BUNDLE_FORMAT = "ragtrail-model-bundle/1"
BUNDLE_FILE = "bundle.json"
ADAPTERS_DIR = "adapters"
ADAPTER_CONFIG = "adapter_config.json"


class BundleError(ValueError):
    """A directory that is not a valid model bundle; the message lists every problem."""


@dataclass(frozen=True)
class ModelBundle:
    """A bundle read from ``path``.

    Attributes:
        kind: what the model is for (``citation_answerer``, ``generator``, ...).
        base_model: the base model's spec as the transformers backend names models (local path,
            HF id, ``s3://`` URI, ``builtin:...``).
        adapters: stage names in merge order; ``adapter_dir(name)`` is each one's directory.
        lineage: free-form strict-JSON facts (training data version and split, config, seeds,
            metrics) that the registry copies into the version's tags.
    """

    path: Path
    kind: str
    base_model: str
    adapters: tuple[str, ...] = ()
    lineage: JsonObject = field(default_factory=dict)

    def adapter_dir(self, name: str) -> Path:
        """The directory of stage ``name``'s adapter."""
        if name not in self.adapters:
            raise KeyError(f"bundle {self.path} has no adapter {name!r} (has {self.adapters})")
        return self.path / ADAPTERS_DIR / name

    def adapter_dirs(self) -> list[Path]:
        """Every adapter directory, in merge order."""
        return [self.adapter_dir(name) for name in self.adapters]


def write_bundle(
    out_dir: str | Path,
    *,
    kind: str,
    base_model: str,
    adapters: Mapping[str, str | Path],
    lineage: Mapping[str, Any] | None = None,
) -> ModelBundle:
    """Write a bundle into ``out_dir`` (created; must be empty or absent).

    ``adapters`` maps stage names to PEFT adapter directories, in merge order; each is copied.
    ``lineage`` must be strict JSON (undefined numbers as null with a reason, see
    :mod:`ragtrail.jsonsafe`); it is written redacted (no credentials of a URL in it, e.g. a
    teacher's spec: :mod:`ragtrail.redact`).
    """
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise BundleError(f"{out}: not empty; a bundle is written into a fresh directory")
    problems = []
    if not kind:
        problems.append("kind is empty")
    if not base_model:
        problems.append("base_model is empty")
    for name, source in adapters.items():
        if not name or "/" in name or name.startswith("."):
            problems.append(f"adapter name {name!r} is not a plain directory name")
        if not (Path(source) / ADAPTER_CONFIG).is_file():
            problems.append(f"adapter {name!r}: {source} has no {ADAPTER_CONFIG}")
    if problems:
        raise BundleError("cannot write bundle: " + "; ".join(problems))
    manifest = {
        "format": BUNDLE_FORMAT,
        "kind": kind,
        "base_model": base_model,
        "adapters": list(adapters),
        "lineage": redact_json(dict(lineage or {})),
    }
    text = jsonsafe.dumps(manifest, "bundle manifest", indent=2)  # refuses NaN before copying
    out.mkdir(parents=True, exist_ok=True)
    for name, source in adapters.items():
        shutil.copytree(source, out / ADAPTERS_DIR / name)
    (out / BUNDLE_FILE).write_text(text, encoding="utf-8")
    return read_bundle(out)


def is_bundle(path: str | Path) -> bool:
    """Whether ``path`` holds a ``bundle.json`` (valid or not)."""
    return (Path(path) / BUNDLE_FILE).is_file()


def read_bundle(path: str | Path) -> ModelBundle:
    """Read and check the bundle in ``path``; every problem is reported at once."""
    root = Path(path)
    manifest_path = root / BUNDLE_FILE
    if not manifest_path.is_file():
        raise BundleError(f"{root}: no {BUNDLE_FILE}; not a model bundle")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BundleError(f"{manifest_path}: not JSON ({exc})") from exc
    if not isinstance(manifest, dict):
        raise BundleError(f"{manifest_path}: expected an object")
    problems = []
    if manifest.get("format") != BUNDLE_FORMAT:
        problems.append(f"format is {manifest.get('format')!r}, expected {BUNDLE_FORMAT!r}")
    for key in ("kind", "base_model"):
        if not isinstance(manifest.get(key), str) or not manifest.get(key):
            problems.append(f"{key} must be a non-empty string")
    adapters = manifest.get("adapters", [])
    if not isinstance(adapters, list) or not all(isinstance(a, str) for a in adapters):
        problems.append("adapters must be a list of names")
        adapters = []
    for name in adapters:
        if not (root / ADAPTERS_DIR / name / ADAPTER_CONFIG).is_file():
            problems.append(f"adapter {name!r}: {ADAPTERS_DIR}/{name}/{ADAPTER_CONFIG} missing")
    lineage = manifest.get("lineage", {})
    if not isinstance(lineage, dict):
        problems.append("lineage must be an object")
        lineage = {}
    if problems:
        raise BundleError(f"{root}: invalid model bundle: " + "; ".join(problems))
    return ModelBundle(
        path=root,
        kind=manifest["kind"],
        base_model=manifest["base_model"],
        adapters=tuple(adapters),
        lineage=lineage,
    )
