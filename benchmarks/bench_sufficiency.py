"""Sufficient context, C/A/H and selective generation with the bundled SmolLM2-135M on the shipped
sample corpus and golden set.

Two measurements in one run, on one fresh ``RAGTRAIL_HOME`` (the model cache is shared with the
default home so the GGUF conversion is not timed):

1. **The steps, cold**: ``evaluate_sufficiency`` without selective generation (raters with their
   calibration, answers in three settings, C/A/H), then the selective step alone (the same call
   with ``selective=True``: everything before it comes from the cache, so its extra time and calls
   are the confidence features and the policy): wall seconds and model calls of each.
2. **Cached rerun**: the whole step again: wall time, its ratio to the cold total (target <= 0.10)
   and model calls (target 0), and identical numbers.

    .venv/bin/python -m benchmarks.bench_sufficiency [--items N] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks._common import machine_line, write_section
from benchmarks.bench_citations import LLM, _ingest, _runtime
from ragtrail.summaries.sufficiency_summary import SufficiencySummary


def _timed(rt: Any, **kwargs: Any) -> tuple[float, int, SufficiencySummary]:
    from ragtrail.pipeline.sufficiency.step import evaluate_sufficiency
    from ragtrail.pipeline.sufficiency.views import load_sufficiency

    calls = rt.llm_usage.totals().calls
    start = time.perf_counter()
    evaluate_sufficiency(rt, "sample", run_id="bench.golden", **kwargs)
    seconds = time.perf_counter() - start
    summary = load_sufficiency(rt, "bench.golden")
    assert summary is not None
    return seconds, rt.llm_usage.totals().calls - calls, summary


def _numbers(summary: SufficiencySummary) -> str:
    """Everything but timings and call counts, to compare a rerun with the cold run."""
    data = summary.to_json()
    drop = {"seconds", "model_calls"}
    return json.dumps({k: v for k, v in data.items() if k not in drop}, sort_keys=True)


def run(items: int | None = None) -> str:
    with tempfile.TemporaryDirectory(prefix="ragtrail-bench-sufficiency-") as tmp:
        sizes = {} if items is None else {"sufficiency": {"max_items": items}}
        rt = _runtime(Path(tmp) / "home", generation={"llm": LLM}, **sizes)
        qa_set = _ingest(rt, "sample")
        suff_s, suff_calls, _ = _timed(rt, qa_set=qa_set, selective=False)
        sel_s, sel_calls, cold = _timed(rt, qa_set=qa_set, selective=True)
        rerun_s, rerun_calls, warm = _timed(rt, qa_set=qa_set, selective=True)
        rt.close()

    selective = cold.selective
    gain = selective.auc.gain if selective is not None else None
    cold_s = suff_s + sel_s
    lines = [
        "## Sufficient context, C/A/H and selective generation — SmolLM2-135M, sample golden set",
        "",
        machine_line(),
        "",
        f"`evaluate_sufficiency` on {cold.items} golden questions x settings "
        f"{', '.join(cold.settings)}; raters {', '.join(r.name for r in cold.raters)} "
        "(each calibrated on golden references in the same run); P(True) with "
        f"the nightly's sample/ask counts; local transformers backend, CPU:",
        "",
        "| step | wall s | model calls |",
        "|---|---|---|",
        f"| sufficiency + C/A/H (cold) | {suff_s:.1f} | {suff_calls} |",
        f"| selective: confidence + policy (cold) | {sel_s:.1f} | {sel_calls} |",
        f"| whole step, cached rerun | {rerun_s:.1f} | {rerun_calls} |",
        f"| **rerun / cold** (target <= 0.10, 0 calls) | **{rerun_s / cold_s:.3f}** | |",
        "",
        f"Rerun numbers identical to the cold run: **{_numbers(cold) == _numbers(warm)}**. "
        f"Policy: {selective.status if selective is not None else 'not run'}"
        + (
            f", AUC gain {gain.value:.3f} (n={gain.n})"
            if gain is not None and gain.value is not None
            else f" ({selective.reason if selective is not None else ''})"
        )
        + ".",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=None, help="default: the nightly's")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    section = run(args.items)
    print(section)
    if args.write:
        write_section("sufficiency", section)


if __name__ == "__main__":
    main()
