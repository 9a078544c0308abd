"""LLM throughput of the local transformers backend on the bundled SmolLM2-135M-Instruct.

Measures, on this machine: the one-off GGUF -> safetensors conversion, loading the converted copy,
greedy free-text throughput (completion tokens per second) unbatched versus in batches, and the
issue's target quantity: questions per second of the real question prompt (guided JSON decoding,
copy guard, validation) for the sample corpus' statements, batch size 1 versus batched.

    .venv/bin/python -m benchmarks.llm_throughput [--cache-dir DIR | --fresh] [--max-new-tokens 48]
        [--batch-size 8] [--repeats 3] [--write]

By default the normal model cache (``$RAGTRAIL_HOME/models``) is used; if the conversion was done
earlier, the time recorded at conversion is reported. ``--fresh`` converts into a temporary
directory so the conversion is timed now. ``run()`` (no arguments, returns the Markdown section)
is the entry point for ``benchmarks.run_all``; ``--write`` updates BENCHMARKS.md directly.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QUESTIONS = [
    "What is retrieval-augmented generation? Answer in one sentence.",
    "Name two reasons to keep an audit log.",
    "Summarise: employees are reimbursed for reasonable travel costs.",
    "Is Paris the capital of France? Answer yes or no and explain briefly.",
    "Give one tip for writing clear documentation.",
    "What does a unit test check?",
    "Why should test questions be balanced across categories?",
    "Explain what a cache is to a new engineer.",
]


def _timed(fn: Callable[[], list[Any]]) -> tuple[list[Any], float, float]:
    """Run ``fn``; return its result, wall seconds and this process's CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def measure(
    cache_dir: Path, max_new_tokens: int, batch_size: int, repeats: int
) -> dict[str, float]:
    """Measure conversion, load and throughput; throughput modes alternate ``repeats`` times.

    The best (least disturbed) repeat is reported next to the median, because a shared machine's
    other processes can halve a single measurement.
    """
    import torch

    from ragtrail.llm.backends.base import GenerationRequest
    from ragtrail.llm.backends.model_store import (
        BUILTIN_SMOLLM2,
        SMOLLM2_DIRNAME,
        ensure_builtin_smollm2,
    )
    from ragtrail.llm.backends.transformers_local import TransformersBackend
    from ragtrail.models.store import COMPLETE_MARKER

    out: dict[str, float] = {"torch_threads": float(torch.get_num_threads())}
    marker = cache_dir / SMOLLM2_DIRNAME / COMPLETE_MARKER
    t0 = time.perf_counter()
    ensure_builtin_smollm2(cache_dir)
    out["conversion_s"] = time.perf_counter() - t0
    out["conversion_recorded"] = 0.0
    if out["conversion_s"] < 1.0 and marker.is_file():  # converted earlier: use the recorded time
        out["conversion_s"] = float(json.loads(marker.read_text())["conversion_seconds"])
        out["conversion_recorded"] = 1.0

    t0 = time.perf_counter()
    backend = TransformersBackend(BUILTIN_SMOLLM2, cache_dir=cache_dir, batch_size=batch_size)
    out["load_s"] = time.perf_counter() - t0

    reqs = [
        GenerationRequest(messages=[{"role": "user", "content": q}], max_new_tokens=max_new_tokens)
        for q in QUESTIONS
    ]
    backend.generate(reqs[:1])  # warm-up (page in the weights)

    rates: dict[str, list[float]] = {"unbatched": [], "batched": []}
    cpu_share: dict[str, list[float]] = {"unbatched": [], "batched": []}
    texts: dict[str, list[str]] = {}
    modes: dict[str, Callable[[], list[Any]]] = {
        "unbatched": lambda: [backend.generate([r])[0] for r in reqs],
        "batched": lambda: backend.generate(reqs),
    }
    for _ in range(repeats):
        for mode, fn in modes.items():
            results, wall, cpu = _timed(fn)
            rates[mode].append(sum(r.completion_tokens for r in results) / wall)
            cpu_share[mode].append(cpu / wall)
            texts[mode] = [r.text for r in results]
            out[f"{mode}_tokens"] = float(sum(r.completion_tokens for r in results))
    for mode in modes:
        out[f"{mode}_tok_per_s_best"] = max(rates[mode])
        out[f"{mode}_tok_per_s_median"] = statistics.median(rates[mode])
        out[f"{mode}_cpu_per_wall"] = statistics.median(cpu_share[mode])
    out["same_text"] = float(texts["unbatched"] == texts["batched"])
    out.update(_question_rates(backend, batch_size))
    out["load_avg_1m"] = os.getloadavg()[0]
    return out


def _statements(limit: int = 16) -> list[tuple[str, str]]:
    """(statement, theme) pairs: sentences of the shipped sample corpus, a few per document."""
    from ragtrail.generate.prompts import context_sentences
    from ragtrail.ingest.loaders import parse_document
    from ragtrail.paths import sample_corpus_dir
    from ragtrail.records import SourceFile

    root = sample_corpus_dir()
    pairs: list[tuple[str, str]] = []
    for path in sorted(root.rglob("*.md")):
        rel = str(path.relative_to(root))
        doc = parse_document(SourceFile(rel, str(path), path.read_bytes()), max_bytes=1_000_000)
        for section in doc.sections[:2]:
            theme = section.headings[-1] if section.headings else rel
            pairs += [(s, theme) for s in context_sentences(section.text, limit=1)]
        if len(pairs) >= limit:
            break
    return pairs[:limit]


def _question_rates(backend: Any, batch_size: int) -> dict[str, float]:
    """Questions per second with the question prompt, unbatched vs batched (no cache)."""
    from ragtrail.generate.prompts import QUESTION, QuestionInput
    from ragtrail.generate.steps import params_for
    from ragtrail.llm.client import LLMClient

    inputs = [QuestionInput(statement=s, theme=t) for s, t in _statements()]
    params = params_for(QUESTION.name, None)
    out: dict[str, float] = {"qa_inputs": float(len(inputs))}
    for mode, size in (("qa_unbatched", 1), ("qa_batched", batch_size)):
        backend.batch_size = size
        client = LLMClient(backend, max_attempts=1)
        outcomes, wall, _ = _timed(
            lambda c=client: c.run(QUESTION, inputs, stage="q", params=params)
        )
        out[f"{mode}_per_s"] = len(outcomes) / wall
        out[f"{mode}_valid"] = float(sum(o.ok for o in outcomes))
    backend.batch_size = batch_size
    out["qa_speedup"] = out["qa_batched_per_s"] / out["qa_unbatched_per_s"]
    return out


def to_markdown(r: dict[str, float], max_new_tokens: int, batch_size: int, repeats: int) -> str:
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, torch threads {int(r['torch_threads'])}"
    )
    return "\n".join(
        [
            "## LLM throughput (SmolLM2-135M-Instruct, transformers, float32 CPU)",
            "",
            f"Machine: {machine}. Greedy, max_new_tokens={max_new_tokens}, {len(QUESTIONS)} "
            f"prompts, {repeats} alternating repeats (best / median); 1-min load average at the "
            f"end {r['load_avg_1m']:.2f}.",
            "",
            "| step | value |",
            "| --- | --- |",
            f"| GGUF -> safetensors conversion (one-off) | {r['conversion_s']:.1f} s"
            f"{' (recorded when the cache was built)' if r['conversion_recorded'] else ''} |",
            f"| load from the converted copy | {r['load_s']:.1f} s |",
            f"| unbatched | {r['unbatched_tok_per_s_best']:.1f} / "
            f"{r['unbatched_tok_per_s_median']:.1f} tokens/s |",
            f"| batch of {batch_size} | {r['batched_tok_per_s_best']:.1f} / "
            f"{r['batched_tok_per_s_median']:.1f} tokens/s |",
            f"| batched text == unbatched text | {'yes' if r['same_text'] else 'no'} |",
            f"| question prompt (guided JSON), {int(r['qa_inputs'])} statements, batch 1 | "
            f"{r['qa_unbatched_per_s']:.2f} questions/s ({int(r['qa_unbatched_valid'])} valid) |",
            f"| question prompt, batch {batch_size} | {r['qa_batched_per_s']:.2f} questions/s "
            f"({int(r['qa_batched_valid'])} valid) |",
            f"| **batched / unbatched questions per second** (target >= 3) | "
            f"**{r['qa_speedup']:.2f}x** |",
        ]
    )


DEFAULTS = {"max_new_tokens": 48, "batch_size": 8, "repeats": 3}


def run() -> str:
    """Benchmark with the default model cache and settings; return the Markdown section."""
    from ragtrail.models.store import default_model_cache

    result = measure(default_model_cache(), **DEFAULTS)
    return to_markdown(result, **DEFAULTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cache-dir", type=Path, default=None)
    where.add_argument("--fresh", action="store_true", help="convert into a temporary directory")
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULTS["max_new_tokens"])
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    parser.add_argument("--repeats", type=int, default=DEFAULTS["repeats"])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    from ragtrail.models.store import default_model_cache

    with tempfile.TemporaryDirectory(prefix="ragtrail-llm-bench-") as tmp:
        cache = Path(tmp) if args.fresh else (args.cache_dir or default_model_cache())
        result = measure(cache, args.max_new_tokens, args.batch_size, args.repeats)
    for key, value in result.items():
        print(f"{key:>28}: {value:.2f}")
    markdown = to_markdown(result, args.max_new_tokens, args.batch_size, args.repeats)
    print(markdown)
    if args.write:
        from benchmarks._common import write_section

        write_section("llm_throughput", markdown)


if __name__ == "__main__":
    main()
