"""Packed bf16 weights: oneDNN-packed linear layers against torch's plain ones, side by side in one
process on the bundled SmolLM2-135M-Instruct.

- Matrices: the model's 211 linear layers (30 decoder layers and the vocabulary projection),
  each called in the model's order on inputs of 1 to 600 rows, plain and packed alternating
  (plain, packed, packed, plain, three times; the median pass), each product checked bit for bit.
- Generation: the same 12 questions over the sample corpus' Markdown documents, sent alone (one
  ``generate`` call each) and as one call (continuous batching at the default width), by a
  backend with packed weights and one without (both through the model's forward pass, not direct
  decoding steps), alternating plain, packed, packed, plain; wall
  time, the mean decoding step, and whether every text is the same.

    .venv/bin/python -m benchmarks.bench_packed_weights [--write]
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks._common import machine_line, section_main
from benchmarks._decoding import alternated_generation, sample_questions

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL = "builtin:smollm2-135m-instruct"
ROWS = (1, 4, 8, 32, 64, 128, 256, 400, 600)


def _matrix_rows(plain: Any, packed: Any) -> list[str]:
    """Table rows: each input size's time over all matrices, plain and packed, and equality."""
    import torch

    pairs = [
        (a, b)
        for a, b in zip(plain.model.modules(), packed.model.modules(), strict=True)
        if isinstance(a, torch.nn.Linear)
    ]
    out = []
    generator = torch.Generator().manual_seed(0)
    for rows in ROWS:
        inputs = {
            width: torch.randn(rows, width, generator=generator).to(torch.bfloat16)
            for width in {a.in_features for a, _ in pairs}
        }

        def over_all(pick: int, inputs: dict[int, Any] = inputs) -> Callable[[], float]:
            def timed() -> float:
                start = time.perf_counter()
                for pair in pairs:
                    pair[pick](inputs[pair[pick].in_features])
                return time.perf_counter() - start

            return timed

        with torch.inference_mode():
            over_all(0)(), over_all(1)()  # warm-up
            times: dict[int, list[float]] = {0: [], 1: []}
            for pick in (0, 1, 1, 0) * 3:
                times[pick].append(over_all(pick)())
            same = all(
                torch.equal(a(inputs[a.in_features]), b(inputs[a.in_features])) for a, b in pairs
            )
        plain_ms, packed_ms = (1000 * statistics.median(times[k]) for k in (0, 1))
        out.append(
            f"| {rows} | {plain_ms:.1f} ms | {packed_ms:.1f} ms | {packed_ms / plain_ms:.2f}x | "
            f"{'yes' if same else 'NO'} |"
        )
    return out


def run() -> str:
    import torch

    from ragtrail.config import load_settings
    from ragtrail.hardware import resolve_model_dtype
    from ragtrail.llm.backends.transformers_local import TransformersBackend

    settings = load_settings()
    dtype = resolve_model_dtype(settings.generation.llm_dtype)
    torch.set_num_threads(os.cpu_count() or 1)
    kwargs = {"dtype": dtype, "cache_dir": settings.resolved_model_cache_dir}
    # Both take the model's forward pass, so that the packing alone differs (direct decoding
    # steps, which need packed layers, have a benchmark of their own: bench_direct_step).
    kwargs["direct_decoding"] = False
    packed = TransformersBackend(MODEL, **kwargs)
    plain = TransformersBackend(MODEL, packed_weights=False, **kwargs)
    if not packed.packed_layers:
        return f"## Packed bf16 weights\n\nSkipped: nothing is packed here ({dtype}, this CPU)."
    requests = sample_questions()
    matrices = _matrix_rows(plain, packed)
    for backend in (plain, packed):
        backend.generate(requests[:1])  # warm-up
    table, same = alternated_generation(plain, packed, requests, ("plain", "packed"))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return "\n".join(
        [
            "## Packed bf16 weights — SmolLM2-135M-Instruct, side by side",
            "",
            f"Machine: {machine_line()}; load average at the end {load}. Model {MODEL} in "
            f"{dtype}, {packed.packed_layers} linear layers packed. Inputs of at most "
            "256 rows use the packed weight (`PACKED_MAX_ROWS`).",
            "",
            "All 211 linear layers called once each, in the model's order, on random bf16 "
            "inputs (one per input width, so that stacked siblings compute their product once "
            "for the three or two of them; median of six passes, alternated plain, packed, "
            "packed, plain):",
            "",
            "| input rows | plain | packed | packed / plain | same bits |",
            "|---|---|---|---|---|",
            *matrices,
            "",
            f"Generation: {len(requests)} questions over the sample corpus' documents, 96 new "
            "tokens at most, greedy; two backends (plain, packed) alternated plain, packed, "
            "packed, plain.",
            "",
            "| calls | weights | wall | mean decoding step |",
            "|---|---|---|---|",
            *table,
            "",
            "The four runs of each kind of call wrote the same texts, packed or plain: "
            f"{'yes' if same else 'NO'}.",
        ]
    )


def main() -> None:
    section_main("packed_weights", run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
