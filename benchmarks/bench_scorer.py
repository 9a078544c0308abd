"""The helpfulness scorer's long sequences scored alone against the padded batches it used before,
side by side in one process on the bundled SmolLM2-135M-Instruct.

The requests have the shape of the evidence step's helpfulness rows (``scorer_messages``: a
question with evidence, or without, then the gold answer as the continuation), built from the
sample corpus' Markdown documents with evidence of three sizes, so the sequences run from a few
dozen to about 2,000 tokens, as in a night. One scorer, its ``alone_from`` switched between the
default (:data:`~ragtrail.llm.scoring.SCORE_ALONE_FROM`) and off (every sequence in padded
batches), alternating off, on, on, off; wall time, and how far the two ways' log-probabilities
and helpfulness values are apart.

    .venv/bin/python -m benchmarks.bench_scorer [--write]
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks._common import machine_line, section_main

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
MODEL = "builtin:smollm2-135m-instruct"
EVIDENCE_CHARS = (600, 3000, 9000)
GOLD_WORDS = 8


def _requests() -> list[Any]:
    """Per document: a question without evidence, and with evidence of each size: the document,
    then the next ones, cut at that many characters. The gold answer is a few words from a
    sentence past the first 3,000 characters, so only the longest evidence holds it."""
    from ragtrail.evaluate.evidence.experts import scorer_messages
    from ragtrail.llm.scoring import ScoreRequest

    texts = [
        p.read_text(encoding="utf-8") for p in sorted((ROOT / "sample" / "corpus").rglob("*.md"))
    ]
    requests = []
    for i, text in enumerate(texts):
        evidence = "\n\n".join(texts[i:] + texts[:i])
        title = text.strip().splitlines()[0].lstrip("# ").strip()
        sentences = [s for s in evidence[3000:9000].replace("\n", " ").split(". ") if len(s) > 60]
        gold = " ".join(sentences[len(sentences) // 2].split()[:GOLD_WORDS])
        question = f"What does the handbook say next to the page '{title}'?"
        requests.append(ScoreRequest(scorer_messages(question, None), gold))
        requests += [
            ScoreRequest(scorer_messages(question, evidence[:chars]), gold)
            for chars in EVIDENCE_CHARS
        ]
    return requests


def _timed(scorer: Any, requests: list[Any], alone_from: int | None) -> tuple[float, list[float]]:
    scorer.alone_from = alone_from
    start = time.perf_counter()
    values = scorer.log_probs(requests)
    return time.perf_counter() - start, values


def run() -> str:
    import torch

    from ragtrail.config import load_settings
    from ragtrail.evaluate.evidence.measures import helpfulness
    from ragtrail.hardware import resolve_model_dtype
    from ragtrail.llm.scoring import SCORE_ALONE_FROM, TransformersLogProbScorer

    torch.set_num_threads(os.cpu_count() or 1)
    settings = load_settings()
    dtype = resolve_model_dtype(settings.generation.llm_dtype)
    batch_size = settings.evidence.scorer_batch_size
    scorer = TransformersLogProbScorer(MODEL, batch_size=batch_size, dtype=dtype, device="cpu")
    requests = _requests()
    lengths = sorted(len(scorer.encode(r).ids) for r in requests)
    _timed(scorer, requests[:4], None)  # warm-up: first-call allocations
    walls: dict[str, list[float]] = {"batched": [], "alone": []}
    values: dict[str, list[float]] = {}
    for name in ("batched", "alone", "alone", "batched"):
        wall, got = _timed(scorer, requests, SCORE_ALONE_FROM if name == "alone" else None)
        walls[name].append(wall)
        values[name] = got
    if dtype != "float32":  # the reference both ways are compared with
        reference = TransformersLogProbScorer(MODEL, batch_size=batch_size, device="cpu")
        values["float32"] = reference.log_probs(requests)
    ratio = statistics.fmean(walls["alone"]) / statistics.fmean(walls["batched"])
    lp_gap = max(abs(a - b) for a, b in zip(values["alone"], values["batched"], strict=True))
    helpful: dict[str, list[float]] = {}
    for name, got in values.items():  # each question's rows: closed book, then its evidence
        helpful[name] = [
            helpfulness(got[i + k], got[i])
            for i in range(0, len(got), 1 + len(EVIDENCE_CHARS))
            for k in range(1, 1 + len(EVIDENCE_CHARS))
        ]

    def gaps(a: str, b: str) -> list[float]:
        return [abs(x - y) for x, y in zip(helpful[a], helpful[b], strict=True)]

    h_gaps = gaps("alone", "batched")
    against = [
        f"| {name} vs float32 | {max(gaps(name, 'float32')):.4f} | "
        f"{statistics.fmean(gaps(name, 'float32')):.4f} |"
        for name in ("batched", "alone")
        if "float32" in helpful
    ]
    long_rows = sum(1 for n in lengths if n >= SCORE_ALONE_FROM)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = [f"| {name} | {', '.join(f'{w:.1f} s' for w in walls[name])} |" for name in walls]
    return "\n".join(
        [
            "## Helpfulness scorer — long sequences alone, side by side",
            "",
            f"Machine: {machine_line()}; load average at the end {load}. Scorer {MODEL} in "
            f"{dtype}, batch size {batch_size} (`evidence.scorer_batch_size`); {len(requests)} "
            f"requests shaped like the evidence step's helpfulness rows (each of the sample "
            f"corpus' {len(requests) // (1 + len(EVIDENCE_CHARS))} Markdown documents: a "
            "question without evidence and with evidence of "
            f"{', '.join(map(str, EVIDENCE_CHARS))} characters, the document then the next ones; "
            f"the gold answer {GOLD_WORDS} words from past the first 3,000), "
            f"{lengths[0]}-{lengths[-1]} tokens (median "
            f"{statistics.median(lengths):.0f}), {long_rows} of them at least "
            f"{SCORE_ALONE_FROM} tokens. One scorer, alternating every sequence in padded "
            f"batches (before) and sequences of at least {SCORE_ALONE_FROM} tokens alone (now).",
            "",
            "| sequences | wall |",
            "|---|---|",
            *rows,
            "",
            f"Alone / batched: **{ratio:.2f}x**. The two ways' summed log-probabilities differ by "
            f"at most {lp_gap:.3f} nats ({dtype} rounding of different kernels); the helpfulness "
            f"values (sigmoid of the gain, {min(helpful['alone']):.2f}-{max(helpful['alone']):.2f} "
            f"here) by at most {max(h_gaps):.4f}, {statistics.fmean(h_gaps):.4f} on average.",
            *(
                [
                    "",
                    f"Each way against a float32 scorer (the {dtype} model's own rounding; "
                    "helpfulness values):",
                    "",
                    "| pair | largest difference | mean difference |",
                    "|---|---|---|",
                    *against,
                ]
                if against
                else []
            ),
        ]
    )


def main() -> None:
    section_main("scorer", run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
