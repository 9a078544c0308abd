"""Int8 decoding weights (``generation.llm_decode_weights: int8``) against the model's own, side by
side in one process on the bundled SmolLM2-135M-Instruct.

- Speed: the same 16 summary requests over the sample corpus' Markdown documents, decoded by one
  backend with native weights and one with int8 decoding weights (both in the configured
  ``llm_dtype``), alternating native, int8, int8, native; wall time and the mean decoding step.
- Closeness: how often the next token the model would pick (argmax, teacher-forced over the first
  384 tokens of each document) differs between float32 and the native dtype, and between the
  native dtype and int8. The int8 side runs every position through its int8 copy (not only
  decoding steps), so it overstates how much the option changes outputs. Intervals: 95%
  percentile bootstrap over documents (positions of one document are not independent).

    .venv/bin/python -m benchmarks.bench_decode_weights [--write]
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import machine_line, section_main
from benchmarks._decoding import differing_share, timed_decode_steps

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
MODEL = "builtin:smollm2-135m-instruct"
TOKENS_PER_DOCUMENT = 384


def _documents() -> list[str]:
    paths = sorted((ROOT / "sample" / "corpus").rglob("*.md"))
    return [p.read_text(encoding="utf-8") for p in paths]


def _requests(documents: list[str]) -> list[Any]:
    from ragtrail.llm.backends.base import GenerationRequest

    texts = [d[:1500] for d in documents] + [d[1500:3000] or d[:800] for d in documents]
    return [
        GenerationRequest(
            messages=(
                {"role": "system", "content": "Summarise the text in two sentences."},
                {"role": "user", "content": text},
            ),
            max_new_tokens=64,
        )
        for text in texts[:16]
    ]


def _timed_generate(backend: Any, requests: list[Any]) -> tuple[float, float, int]:
    """Wall seconds, mean decoding-step ms and steps of one ``generate`` of ``requests``."""
    with timed_decode_steps(backend) as steps:
        start = time.perf_counter()
        backend.generate(requests)
        wall = time.perf_counter() - start
    return wall, 1000 * statistics.fmean(steps), len(steps)


def _argmax_tokens(model: Any, documents: list[list[int]]) -> list[np.ndarray]:
    import torch

    with torch.inference_mode():
        return [
            model(input_ids=torch.tensor([ids])).logits[0, :-1].float().argmax(-1).numpy()
            for ids in documents
        ]


def run() -> str:
    import torch

    from ragtrail.config import load_settings
    from ragtrail.hardware import resolve_model_dtype
    from ragtrail.llm.backends.int8_decoding import Int8DecodingLinear
    from ragtrail.llm.backends.transformers_local import TransformersBackend

    settings = load_settings()
    dtype = resolve_model_dtype(settings.generation.llm_dtype)
    cache = settings.resolved_model_cache_dir
    torch.set_num_threads(os.cpu_count() or 1)
    documents = _documents()
    requests = _requests(documents)

    native = TransformersBackend(MODEL, dtype=dtype, cache_dir=cache)
    int8 = TransformersBackend(MODEL, dtype=dtype, cache_dir=cache, decode_weights="int8")
    native.generate(requests[:2])  # warm-up: kernels, the JSON-free decoding path
    int8.generate(requests[:2])
    runs: dict[str, list[tuple[float, float, int]]] = {"native": [], "int8": []}
    for name in ("native", "int8", "int8", "native"):
        runs[name].append(_timed_generate(native if name == "native" else int8, requests))

    # closeness: float32 vs the native dtype vs int8 at every position
    from transformers import AutoModelForCausalLM

    tokenizer = native.tokenizer
    ids = [tokenizer.encode(d)[:TOKENS_PER_DOCUMENT] for d in documents]
    source = native.model.config._name_or_path
    reference = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    for module in int8.model.modules():
        if isinstance(module, Int8DecodingLinear):
            module.max_rows = 1 << 30  # every position through the int8 copy
    picks = {
        "float32": _argmax_tokens(reference, ids),
        dtype: _argmax_tokens(native.model, ids),
        "int8": _argmax_tokens(int8.model, ids),
    }
    # what the option leaves out: the output embedding in int8 as well
    head = int8.model.get_output_embeddings()
    int8.model.set_output_embeddings(Int8DecodingLinear(head, 1 << 30))
    picks["int8, output embedding too"] = _argmax_tokens(int8.model, ids)

    rows = []
    for name in ("native", "int8"):
        walls = [w for w, _, _ in runs[name]]
        step_ms = [s for _, s, _ in runs[name]]
        steps = runs[name][0][2]
        rows.append(
            f"| {name if name == 'int8' else f'native ({dtype})'} | "
            f"{', '.join(f'{w:.1f} s' for w in walls)} | "
            f"{', '.join(f'{s:.1f} ms' for s in step_ms)} | {steps} |"
        )
    ratio = statistics.fmean(s for _, s, _ in runs["int8"]) / statistics.fmean(
        s for _, s, _ in runs["native"]
    )
    pairs = [
        ("float32", dtype),
        (dtype, "int8"),
        ("float32", "int8"),
        (dtype, "int8, output embedding too"),
    ]
    closeness = []
    for a, b in pairs:
        rate, low, high, n = differing_share(picks[a], picks[b])
        closeness.append(f"| {a} vs {b} | {rate:.4f} [{low:.4f}, {high:.4f}] | {n} |")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return "\n".join(
        [
            "## Int8 decoding weights — SmolLM2-135M-Instruct, side by side",
            "",
            f"Machine: {machine_line()}; load average at the end {load}. Model "
            f"{MODEL} in {dtype} (`llm_dtype: {settings.generation.llm_dtype}`), batch size "
            f"{native.batch_size}, {len(requests)} summary requests over the sample corpus' "
            f"{len(documents)} Markdown documents, 64 new tokens at most, greedy; both backends "
            "in one process, alternating native, int8, int8, native.",
            "",
            "| decoding weights | wall | mean decoding step | decoding steps |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Decoding step, int8 / native: **{ratio:.2f}x**.",
            "",
            "How often the next token differs (argmax, teacher-forced over the first "
            f"{TOKENS_PER_DOCUMENT} tokens of each document; 95% bootstrap over the "
            f"{len(documents)} documents). The int8 side reads every position through its int8 "
            "copy, more than the option does (prompts keep the native weights):",
            "",
            "| pair | share of positions whose next token differs | positions |",
            "|---|---|---|",
            *closeness,
        ]
    )


def main() -> None:
    section_main("decode_weights", run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
