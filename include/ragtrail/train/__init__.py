"""Training of ragtrail's small, cheap QA generator (METHODS §4).

- :mod:`ragtrail.train.data`: training examples from accepted candidates, JSONL with a content
  version, the seeded split by context, and parsing of ``"<<label>> question <a> answer"``.
- :mod:`ragtrail.train.config`: :class:`GeneratorTrainingConfig`, the settings of one run.
- :mod:`ragtrail.train.generator`: LoRA fine-tuning into an output directory, built from
  :mod:`~ragtrail.train.lora`, :mod:`~ragtrail.train.loop`, :mod:`~ragtrail.train.evaluation` and
  :mod:`~ragtrail.train.model_card`; :mod:`ragtrail.train.publish` uploads the result.
- :mod:`ragtrail.train.backend`: the fine-tuned model as an LLM backend; importing this package
  registers it as the ``generator:`` spec kind of :func:`ragtrail.llm.load_llm_backend` (the LLM
  layer never imports training code).

The data helpers and the config are imported eagerly (pure Python); the torch-based names are imported on first
use, so ``import ragtrail.train`` stays cheap (e.g. at Airflow DAG-parse time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ragtrail.llm.factory import register_llm_backend
from ragtrail.records import ModelKind
from ragtrail.train.config import GeneratorTrainingConfig
from ragtrail.train.data import (
    ANSWER_TOKEN,
    TrainingExample,
    data_version,
    export_training_examples,
    format_input,
    format_target,
    parse_generation,
    read_jsonl,
    split_examples,
    write_jsonl,
)

if TYPE_CHECKING:
    from ragtrail.train.backend import FineTunedGeneratorBackend, generator_request
    from ragtrail.train.generator import finetune_generator
    from ragtrail.train.lora import default_target_modules
    from ragtrail.train.publish import publish_generator
    from ragtrail.train.result import FinetuneResult

register_llm_backend(ModelKind.GENERATOR, "ragtrail.train.backend:FineTunedGeneratorBackend")

_LAZY = {
    "FineTunedGeneratorBackend": "ragtrail.train.backend",
    "generator_request": "ragtrail.train.backend",
    "FinetuneResult": "ragtrail.train.result",
    "default_target_modules": "ragtrail.train.lora",
    "finetune_generator": "ragtrail.train.generator",
    "publish_generator": "ragtrail.train.publish",
}

__all__ = [
    "ANSWER_TOKEN",
    "FineTunedGeneratorBackend",
    "FinetuneResult",
    "GeneratorTrainingConfig",
    "TrainingExample",
    "data_version",
    "default_target_modules",
    "export_training_examples",
    "finetune_generator",
    "format_input",
    "format_target",
    "generator_request",
    "parse_generation",
    "publish_generator",
    "read_jsonl",
    "split_examples",
    "write_jsonl",
]


def __getattr__(name: str) -> Any:
    """Import the torch-based part of the API on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ragtrail.train' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
