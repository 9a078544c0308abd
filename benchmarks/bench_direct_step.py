"""Direct decoding steps: one loop over the packed layers against the model's own forward pass,
side by side in one process on the bundled SmolLM2-135M-Instruct.

The same 12 questions over the sample corpus' Markdown documents, sent alone (one ``generate``
call each) and as one call (continuous batching at the default width), by a backend taking
direct steps and one taking the model's forward pass (both with packed weights), alternating
model, direct, direct, model; wall time, the mean decoding step, and whether every text is the
same.

    .venv/bin/python -m benchmarks.bench_direct_step [--write]
"""

from __future__ import annotations

import os

from benchmarks._common import machine_line, section_main
from benchmarks._decoding import alternated_generation, sample_questions

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL = "builtin:smollm2-135m-instruct"


def run() -> str:
    import torch

    from ragtrail.config import load_settings
    from ragtrail.hardware import resolve_model_dtype
    from ragtrail.llm.backends.transformers_local import TransformersBackend

    settings = load_settings()
    dtype = resolve_model_dtype(settings.generation.llm_dtype)
    torch.set_num_threads(os.cpu_count() or 1)
    kwargs = {"dtype": dtype, "cache_dir": settings.resolved_model_cache_dir}
    direct = TransformersBackend(MODEL, **kwargs)
    model = TransformersBackend(MODEL, direct_decoding=False, **kwargs)
    if direct._direct_step is None:
        return (
            "## Direct decoding steps\n\nSkipped: the model's steps are not covered here "
            f"({dtype}, {direct.packed_layers} layers packed)."
        )
    requests = sample_questions()
    for backend in (model, direct):
        backend.generate(requests[:1])  # warm-up
    table, same = alternated_generation(model, direct, requests, ("model", "direct"))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return "\n".join(
        [
            "## Direct decoding steps — SmolLM2-135M-Instruct, side by side",
            "",
            f"Machine: {machine_line()}; load average at the end {load}. Model {MODEL} in "
            f"{dtype}, {direct.packed_layers} linear layers packed in both backends. "
            f"{len(requests)} questions over the sample corpus' documents, 96 new tokens at "
            "most, greedy; the two backends alternated model, direct, direct, model.",
            "",
            "| calls | decoding step | wall | mean decoding step |",
            "|---|---|---|---|",
            *table,
            "",
            "The four runs of each kind of call wrote the same texts, direct or not: "
            f"{'yes' if same else 'NO'}.",
        ]
    )


def main() -> None:
    section_main("direct_step", run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
