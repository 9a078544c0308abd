"""The question generator in the model registry, beside the citation model.

A fine-tune output directory (:func:`ragtrail.train.generator.finetune_generator`: ``adapter/``,
``tokenizer/``, ``training.json``, ``model_card.md``) becomes a bundle of kind ``generator``: the
adapter as its one stage (``adapters/generator``), the tokenizer (it carries the added ``<a>``
token) and the training record beside ``bundle.json``. Its lineage is read from
``training.json``. :class:`~ragtrail.train.backend.FineTunedGeneratorBackend` loads such a bundle,
so ``registry:ragtrail-generator@champion`` serves it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.backends.model_store import resolve_model_dir
from ragtrail.models.bundle import ModelBundle, write_bundle
from ragtrail.models.registry import ModelRegistry, ModelVersion
from ragtrail.models.store import cache_root
from ragtrail.train.backend import (
    ADAPTER_SUBDIR,
    MODEL_CARD,
    TOKENIZER_SUBDIR,
    TRAINING_JSON,
    read_training_json,
)

GENERATOR_KIND = "generator"
GENERATOR_STAGE = "generator"


def generator_lineage(record: Mapping[str, Any]) -> JsonObject:
    """Lineage of a generator from its ``training.json`` record."""
    hyper = dict(record.get("hyperparameters", {}))
    return {
        "task": record.get("task"),
        "base_model": record.get("base_model"),
        "base_model_id": record.get("base_model_id"),
        "training_data": {
            "version": record.get("data_version"),
            "split": {
                "by": "context",
                "n_train": record.get("n_train"),
                "n_held_out": record.get("n_held_out"),
                "held_out_fraction": hyper.get("held_out_fraction"),
                "seed": hyper.get("seed"),
            },
        },
        "configuration": hyper,
        "seeds": {"training": hyper.get("seed")},
        "training_metrics": {
            "steps": record.get("steps"),
            "train_loss_first": record.get("train_loss_first"),
            "train_loss_last": record.get("train_loss_last"),
            "eval_loss_before": record.get("eval_loss_before"),
            "eval_loss_after": record.get("eval_loss_after"),
            "trainable_params": record.get("trainable_params"),
            "train_seconds": record.get("train_seconds"),
        },
        "library_versions": record.get("library_versions", {}),
        "trained_at": record.get("created_at"),
    }


def generator_bundle(generator_dir: str | Path, out_dir: str | Path) -> ModelBundle:
    """Write the fine-tune output in ``generator_dir`` as a ``generator`` bundle in ``out_dir``."""
    source = Path(generator_dir)
    missing = [
        p for p in (ADAPTER_SUBDIR, TOKENIZER_SUBDIR, TRAINING_JSON) if not (source / p).exists()
    ]
    if missing:
        raise FileNotFoundError(f"{source} lacks {missing}: not a fine-tuned generator directory")
    record = read_training_json(source)
    bundle = write_bundle(
        out_dir,
        kind=GENERATOR_KIND,
        base_model=str(record["base_model"]),
        adapters={GENERATOR_STAGE: source / ADAPTER_SUBDIR},
        lineage=generator_lineage(record),
    )
    shutil.copytree(source / TOKENIZER_SUBDIR, bundle.path / TOKENIZER_SUBDIR)
    for name in (TRAINING_JSON, MODEL_CARD):
        if (source / name).is_file():
            shutil.copy2(source / name, bundle.path / name)
    return bundle


def register_generator(
    registry: ModelRegistry,
    name: str,
    generator_dir: str | Path,
    *,
    evaluation_metrics: Mapping[str, Any] | None = None,
    description: str = "",
    cache_dir: str | Path | None = None,
    s3_endpoint_url: str | None = None,
) -> ModelVersion:
    """Register a fine-tuned generator (local directory or ``s3://`` URI) as a new version of
    ``name``; ``evaluation_metrics`` (e.g. parse and acceptance rates) join its lineage."""
    local, _ = resolve_model_dir(generator_dir, cache_root(cache_dir), s3_endpoint_url)
    extra = {"evaluation_metrics": dict(evaluation_metrics)} if evaluation_metrics else {}
    with tempfile.TemporaryDirectory(prefix="ragtrail-generator-bundle-") as tmp:
        bundle = generator_bundle(local, Path(tmp) / "bundle")
        return registry.register_bundle(
            name,
            bundle.path,
            lineage={"source": str(generator_dir), **extra},
            description=description,
        )
