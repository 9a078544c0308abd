"""Decoding steps of lone requests: grouped-query attention against transformers' SDPA, side by
side in one process on the bundled SmolLM2-135M-Instruct.

A call of one request (a retry of an unparsable reply, a stage with one question) has no prompt
prefix shared with other rows. Its decoding steps used to run transformers' SDPA, which copies
each key/value head for the three query heads that share it and runs one query row per head;
they now run the grouped-query path of :mod:`ragtrail.llm.backends.prefix_attention` (the
query heads of a key/value head as its query positions, no copies).

- Speed: the same 12 questions over the sample corpus' Markdown documents, each sent alone
  (one ``generate`` call per request), by one backend with the grouped path off and on,
  alternating off, on, on, off; wall time and the mean decoding step.
- Closeness: the answers the SDPA path wrote are fed back token by token (teacher-forced
  decoding steps) through both paths, and each step's next-token choice is compared with a
  float32 model's over the same tokens. 95% percentile bootstrap over requests.

    .venv/bin/python -m benchmarks.bench_decode_attention [--write]
"""

from __future__ import annotations

import os
import statistics
from contextlib import nullcontext
from typing import Any

import numpy as np

from benchmarks._common import machine_line, section_main
from benchmarks._decoding import differing_share, sample_questions, timed_generation

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL = "builtin:smollm2-135m-instruct"


def _forced_picks(model: Any, prompt: list[int], answer: list[int], grouped: bool) -> np.ndarray:
    """The next token chosen at each teacher-forced decoding step over ``answer``."""
    import torch

    from ragtrail.llm.backends import prefix_attention

    picks = []
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        cache = out.past_key_values
        picks.append(int(out.logits[0, -1].argmax()))
        for token in answer[:-1]:
            with prefix_attention.decoding_over(None) if grouped else nullcontext():
                out = model(input_ids=torch.tensor([[token]]), past_key_values=cache)
            cache = out.past_key_values
            picks.append(int(out.logits[0, -1].argmax()))
    return np.array(picks)


def run() -> str:
    import torch
    from transformers import AutoModelForCausalLM

    from ragtrail.config import load_settings
    from ragtrail.hardware import resolve_model_dtype
    from ragtrail.llm.backends.transformers_local import TransformersBackend

    settings = load_settings()
    dtype = resolve_model_dtype(settings.generation.llm_dtype)
    torch.set_num_threads(os.cpu_count() or 1)
    requests = sample_questions()
    backend = TransformersBackend(MODEL, dtype=dtype, cache_dir=settings.resolved_model_cache_dir)
    if not backend._prefix_attention:
        return "## Decoding attention\n\nSkipped: the grouped-query path is not available here."
    backend.generate(requests[:1])  # warm-up
    runs: dict[bool, list[tuple[float, float, list[Any]]]] = {False: [], True: []}
    for grouped in (False, True, True, False):
        backend._prefix_attention = grouped
        runs[grouped].append(timed_generation(backend, requests, alone=True))
    backend._prefix_attention = True
    texts = {g: [r.text for r in runs[g][0][2]] for g in runs}
    same = sum(a == b for a, b in zip(texts[False], texts[True], strict=True))

    tokenizer = backend.tokenizer
    prompts = [backend._encode(r.messages) for r in requests]
    answers = [tokenizer.encode(t, add_special_tokens=False) or [0] for t in texts[False]]
    reference = AutoModelForCausalLM.from_pretrained(
        backend.model.config._name_or_path, dtype=torch.float32
    ).eval()
    picks: dict[str, list[np.ndarray]] = {"float32": [], "sdpa": [], "grouped": []}
    for prompt, answer in zip(prompts, answers, strict=True):
        with torch.inference_mode():
            full = reference(input_ids=torch.tensor([prompt + answer])).logits[0]
        picks["float32"].append(full[len(prompt) - 1 : -1].argmax(-1).numpy())
        picks["sdpa"].append(_forced_picks(backend.model, prompt, answer, grouped=False))
        picks["grouped"].append(_forced_picks(backend.model, prompt, answer, grouped=True))

    rows = []
    for grouped, name in ((False, "transformers' SDPA (copied heads)"), (True, "grouped-query")):
        walls = ", ".join(f"{w:.1f} s" for w, _, _ in runs[grouped])
        steps = ", ".join(f"{s:.1f} ms" for _, s, _ in runs[grouped])
        rows.append(f"| {name} | {walls} | {steps} |")
    ratio = statistics.fmean(s for _, s, _ in runs[True]) / statistics.fmean(
        s for _, s, _ in runs[False]
    )
    closeness = []
    for a, b in (("float32", "sdpa"), ("float32", "grouped"), ("sdpa", "grouped")):
        rate, low, high, n = differing_share(picks[a], picks[b])
        closeness.append(f"| {a} vs {b} | {rate:.4f} [{low:.4f}, {high:.4f}] | {n} |")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return "\n".join(
        [
            "## Decoding attention — lone requests, SmolLM2-135M-Instruct, side by side",
            "",
            f"Machine: {machine_line()}; load average at the end {load}. Model {MODEL} in "
            f"{dtype}; {len(requests)} questions over the sample corpus' documents (prompts of "
            f"{min(map(len, prompts))}-{max(map(len, prompts))} tokens), each in a `generate` "
            "call of its own, 96 new tokens at most, greedy; one backend, the grouped-query "
            "path off, on, on, off.",
            "",
            "| decoding attention | wall (12 calls) | mean decoding step |",
            "|---|---|---|",
            *rows,
            "",
            f"Decoding step, grouped / SDPA: **{ratio:.2f}x**. Answers identical: {same} of "
            f"{len(requests)} (bf16 rounding flips near ties of greedy decoding; see below).",
            "",
            "How often a teacher-forced decoding step picks another next token (the SDPA "
            "path's answers fed back; 95% bootstrap over requests):",
            "",
            "| pair | share of steps whose next token differs | steps |",
            "|---|---|---|",
            *closeness,
        ]
    )


def main() -> None:
    section_main("decode_attention", run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
