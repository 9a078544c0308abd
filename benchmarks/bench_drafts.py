"""Prompt-lookup drafts: greedy decoding with up to 3 draft tokens per step against one token per
step, side by side in one process on the bundled SmolLM2-135M-Instruct.

Two kinds of calls over the sample corpus' Markdown documents, each one ``generate`` call of 12
requests at the default batch width: free-text questions (96 new tokens at most) and guided JSON
that quotes the document's sentences (the evidence extractor's kind of reply, 160 at most). The
two backends alternate off, on, on, off; wall time, the row-steps per generated token, and how
many texts are the same as one token per step writes.

    .venv/bin/python -m benchmarks.bench_drafts [--write]
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks._common import machine_line, section_main
from benchmarks._decoding import sample_questions

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL = "builtin:smollm2-135m-instruct"
ROOT = Path(__file__).resolve().parent.parent
QUOTES_SCHEMA = {
    "type": "object",
    "properties": {"sentences": {"type": "array", "items": {"type": "string"}}},
    "required": ["sentences"],
}


def quoting_requests(count: int = 12) -> list[Any]:
    """``count`` guided-JSON requests quoting the sentences of a sample document (its first
    1,500 characters, the documents in turn) that say what the reader must do."""
    from ragtrail.llm.backends.base import GenerationRequest

    paths = sorted((ROOT / "sample" / "corpus").rglob("*.md"))
    texts = [p.read_text(encoding="utf-8") for p in paths]
    return [
        GenerationRequest(
            messages=(
                {
                    "role": "system",
                    "content": "Quote the sentences of the document that say what the reader "
                    'must do, word for word. Reply in JSON: {"sentences": [...]}.',
                },
                {"role": "user", "content": texts[i % len(texts)][:1500]},
            ),
            max_new_tokens=160,
            json_schema=QUOTES_SCHEMA,
        )
        for i in range(count)
    ]


def _timed(backend: Any, requests: list[Any]) -> tuple[float, int, list[Any]]:
    """Wall seconds, row-steps (rows of every decoding step) and results of one call."""
    rows: list[int] = []
    single, drafted = backend._decode_step, backend._draft_step

    def one(step_rows: Any, *args: Any, **kwargs: Any) -> Any:
        rows.append(len(step_rows))
        return single(step_rows, *args, **kwargs)

    def several(step_rows: Any, *args: Any, **kwargs: Any) -> Any:
        rows.append(len(step_rows))
        return drafted(step_rows, *args, **kwargs)

    backend._decode_step, backend._draft_step = one, several
    try:
        start = time.perf_counter()
        results = backend.generate(requests)
        return time.perf_counter() - start, sum(rows), results
    finally:
        del backend._decode_step, backend._draft_step


def run() -> str:
    import torch

    from ragtrail.config import load_settings
    from ragtrail.hardware import resolve_model_dtype
    from ragtrail.llm.backends.transformers_local import TransformersBackend

    settings = load_settings()
    dtype = resolve_model_dtype(settings.generation.llm_dtype)
    torch.set_num_threads(os.cpu_count() or 1)
    kwargs = {"dtype": dtype, "cache_dir": settings.resolved_model_cache_dir}
    off = TransformersBackend(MODEL, draft_tokens=0, **kwargs)
    on = TransformersBackend(MODEL, draft_tokens=3, **kwargs)
    if on._direct_step is None:
        return (
            "## Prompt-lookup drafts\n\nSkipped: drafts need the direct decoding step, which "
            f"does not cover this model here ({dtype})."
        )
    table = []
    for name, requests in (
        ("12 free-text questions", sample_questions()),
        ("12 guided-JSON quotations", quoting_requests()),
    ):
        for backend in (off, on):
            backend.generate(requests[:1])  # warm-up
        runs: dict[bool, list[tuple[float, int, list[Any]]]] = {False: [], True: []}
        for drafting in (False, True, True, False):
            runs[drafting].append(_timed(on if drafting else off, requests))
        reference = [r.text for r in runs[False][0][2]]
        for drafting in (False, True):
            walls = ", ".join(f"{w:.1f} s" for w, _, _ in runs[drafting])
            tokens = sum(r.completion_tokens for r in runs[drafting][0][2])
            per_token = statistics.fmean(steps for _, steps, _ in runs[drafting]) / tokens
            same = sum(a.text == b for a, b in zip(runs[drafting][0][2], reference, strict=True))
            label = "up to 3 drafts" if drafting else "one token a step"
            table.append(
                f"| {name} | {label} | {walls} | {tokens} | {per_token:.2f} | "
                f"{same}/{len(requests)} |"
            )
        ratio = statistics.fmean(w for w, _, _ in runs[True]) / statistics.fmean(
            w for w, _, _ in runs[False]
        )
        table.append(f"| {name} | drafts / one token | **{ratio:.2f}x** | | | |")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return "\n".join(
        [
            "## Prompt-lookup drafts — SmolLM2-135M-Instruct, side by side",
            "",
            f"Machine: {machine_line()}; load average at the end {load}. Model {MODEL} in "
            f"{dtype} with direct decoding steps; one call of 12 requests per run at batch "
            f"width {on.batch_size}, greedy; the backends alternated off, on, on, off.",
            "",
            "| calls | decoding | wall | tokens | row-steps per token | texts as one token a "
            "step writes |",
            "|---|---|---|---|---|---|",
            *table,
        ]
    )


def main() -> None:
    section_main("drafts", run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
