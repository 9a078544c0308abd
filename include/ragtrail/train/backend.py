"""Serve a fine-tuned generator (base model + LoRA adapter + tokenizer with ``<a>``) as an LLM backend.

The plain :class:`~ragtrail.llm.backends.transformers_local.TransformersBackend` cannot load these
adapters as they are: it takes the tokenizer from the base model (which lacks ``<a>``), does not
resize the embeddings before applying the adapter, and renders prompts its own way. This subclass
keeps everything else of it (model resolution for paths / HF ids / ``s3://`` / builtin models,
batching, per-request seeding and failure isolation, stop strings) and changes only loading and
prompt rendering, which use the same :class:`~ragtrail.train.encoding.PromptFormat` as training.

Requests are ordinary chat requests; the content of the last user message is the generator input
(build it with :func:`generator_request`), the output text is ``"<<label>> question <a> answer"``
(split it with :func:`~ragtrail.train.data.parse_generation`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.backends.base import GenerationRequest, Message
from ragtrail.llm.backends.model_store import (
    dtype_tag,
    model_dtype,
    resolve_model_dir,
    resolve_model_source,
)
from ragtrail.llm.backends.transformers_local import TransformersBackend
from ragtrail.models.bundle import is_bundle, read_bundle
from ragtrail.models.store import cache_root as resolve_cache_root
from ragtrail.train.data import format_input
from ragtrail.train.encoding import PromptFormat

log = logging.getLogger(__name__)

ADAPTER_SUBDIR = "adapter"
TOKENIZER_SUBDIR = "tokenizer"
TRAINING_JSON = "training.json"
MODEL_CARD = "model_card.md"


@dataclass
class BaseModel:
    """A loaded base model and where it came from."""

    model: Any
    source: str  # local directory (or HF id) actually loaded
    model_id: str  # spec-derived id, as the transformers backend records it
    is_encoder_decoder: bool


def load_base_model(
    spec: str,
    *,
    cache_dir: str | Path | None = None,
    s3_endpoint_url: str | None = None,
    dtype: torch.dtype | str = torch.float32,
) -> BaseModel:
    """Load a base model named like the transformers backend names them (path, HF id, s3, builtin).

    Resolution is :func:`~ragtrail.llm.backends.model_store.resolve_model_source`, as for the
    transformers backend, so both accept the same specs and share one model cache.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    source, derived_id = resolve_model_source(spec, cache_dir, s3_endpoint_url)
    config = AutoConfig.from_pretrained(source)
    is_ed = bool(getattr(config, "is_encoder_decoder", False))
    auto_cls = AutoModelForSeq2SeqLM if is_ed else AutoModelForCausalLM
    model = auto_cls.from_pretrained(source, dtype=model_dtype(dtype))
    return BaseModel(model=model, source=source, model_id=derived_id, is_encoder_decoder=is_ed)


def fit_embeddings(model: Any, tokenizer: Any, *, mean_resizing: bool) -> bool:
    """Grow the embedding matrix (and an untied LM head) when the tokenizer outgrew it.

    Only grows, never shrinks: models such as T5 ship more embedding rows than tokens, and the
    new token then already has a row. Returns whether a resize happened. Training and loading
    both call this, so the adapter always meets the same matrix shape.
    """
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) <= rows:
        return False
    model.resize_token_embeddings(len(tokenizer), mean_resizing=mean_resizing)
    return True


def generator_request(
    label: str,
    context: str,
    *,
    max_new_tokens: int = 96,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
) -> GenerationRequest:
    """A request asking the fine-tuned generator for one ``label`` question about ``context``."""
    return GenerationRequest(
        messages=({"role": "user", "content": format_input(label, context)},),
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
    )


def generator_adapter_dir(generator_dir: Path) -> Path:
    """The adapter of a generator directory: ``adapter/`` of a fine-tune output, or the single
    adapter of a registered ``generator`` bundle (:mod:`ragtrail.train.registration`)."""
    if is_bundle(generator_dir):
        bundle = read_bundle(generator_dir)
        if len(bundle.adapters) != 1:
            raise ValueError(
                f"{generator_dir}: a generator bundle has one adapter, not {bundle.adapters}"
            )
        return bundle.adapter_dirs()[0]
    return generator_dir / ADAPTER_SUBDIR


def read_training_json(generator_dir: str | Path) -> JsonObject:
    """The ``training.json`` record of a fine-tuned generator directory."""
    return json.loads((Path(generator_dir) / TRAINING_JSON).read_text(encoding="utf-8"))


class FineTunedGeneratorBackend(TransformersBackend):
    """An :class:`~ragtrail.llm.backends.base.LLMBackend` over a directory written by
    :func:`ragtrail.train.generator.finetune_generator` (local path or ``s3://`` URI).

    Args:
        generator_dir: the fine-tune output (``adapter/``, ``tokenizer/``, ``training.json``).
        base_model: override the base model spec recorded in ``training.json`` (e.g. when the
            original path moved); it must be the same weights.
        merge_adapter: fold LoRA into the weights for faster generation (default); ``False`` keeps
            the PEFT wrapper, which reproduces the training-time model bit for bit.
        Other arguments as for :class:`TransformersBackend`.
    """

    name = "transformers-generator"

    def __init__(
        self,
        generator_dir: str | Path,
        *,
        base_model: str | None = None,
        cache_dir: str | Path | None = None,
        batch_size: int = 8,
        device: str = "cpu",
        dtype: torch.dtype | str = torch.float32,
        s3_endpoint_url: str | None = None,
        merge_adapter: bool = True,
        model_id: str | None = None,
    ) -> None:
        from peft import PeftModel
        from transformers import AutoTokenizer

        started = time.perf_counter()
        dtype = model_dtype(dtype)
        cache_root = resolve_cache_root(cache_dir)
        local, digest = resolve_model_dir(generator_dir, cache_root, s3_endpoint_url)
        meta = read_training_json(local)
        base = load_base_model(
            base_model or str(meta["base_model"]),
            cache_dir=cache_root,
            s3_endpoint_url=s3_endpoint_url,
            dtype=dtype,
        )
        tokenizer = AutoTokenizer.from_pretrained(str(local / TOKENIZER_SUBDIR))
        # The new token's rows are overwritten by the adapter's trainable tokens: no init needed.
        fit_embeddings(base.model, tokenizer, mean_resizing=False)
        net = PeftModel.from_pretrained(base.model, str(generator_adapter_dir(local)))
        if merge_adapter:
            net = net.merge_and_unload()
        self._setup(
            net,
            tokenizer,
            is_encoder_decoder=base.is_encoder_decoder,
            prompt_format=PromptFormat.from_json(meta["prompt_format"]),
            model_id=(model_id or f"{base.model_id}+generator:{digest[:12]}") + dtype_tag(dtype),
            batch_size=batch_size,
            device=device,
        )
        self.training_record = meta
        self.load_seconds = time.perf_counter() - started
        log.info("loaded generator %s in %.1f s", self.model_id, self.load_seconds)

    @classmethod
    def from_loaded(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        is_encoder_decoder: bool,
        prompt_format: PromptFormat,
        model_id: str,
        batch_size: int = 8,
        device: str = "cpu",
    ) -> FineTunedGeneratorBackend:
        """Wrap an in-memory model (e.g. right after training) without loading anything."""
        self = cls.__new__(cls)
        self._setup(
            model,
            tokenizer,
            is_encoder_decoder=is_encoder_decoder,
            prompt_format=prompt_format,
            model_id=model_id,
            batch_size=batch_size,
            device=device,
        )
        self.training_record = {}
        self.load_seconds = 0.0
        return self

    def _setup(
        self,
        model: Any,
        tokenizer: Any,
        *,
        is_encoder_decoder: bool,
        prompt_format: PromptFormat,
        model_id: str,
        batch_size: int,
        device: str,
    ) -> None:
        """Set the attributes the inherited generation code relies on."""
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.is_encoder_decoder = is_encoder_decoder
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "right" if is_encoder_decoder else "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.prompt_format = prompt_format
        self.eos_ids = self._eos_ids()
        config = getattr(model, "config", None)
        self.max_positions = self._max_positions(config, None)
        self._explicit_max_input = None
        self.model_id = model_id
        # The generator writes "<<label>> question <a> answer", not JSON, and its inputs share no
        # long prefix: neither schema guidance nor the prefix cache applies.
        self._init_decoding(guided_json=False, prefix_caching=False)

    # ------------------------------------------------------------------ prompting

    @staticmethod
    def _source_text(messages: Sequence[Message]) -> str:
        """The generator input: the last user message (system messages are ignored)."""
        for message in reversed(messages):
            if message["role"] == "user":
                return message["content"]
        raise ValueError("a generator request needs a user message holding '<<label>> context'")

    def render_prompt(self, messages: Sequence[Message]) -> str:
        """The exact text fed to the model, rendered as during training."""
        return self.prompt_format.render_prompt(self.tokenizer, self._source_text(messages))

    def _encode(self, messages: Sequence[Message]) -> list[int]:
        return self.prompt_format.prompt_ids(self.tokenizer, self._source_text(messages))
