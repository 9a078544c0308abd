"""Run every benchmark and rewrite its section of BENCHMARKS.md (`make bench`)."""

from __future__ import annotations

import importlib
import sys

from benchmarks._common import SkipBenchmark, write_section

BENCHMARKS = [
    "bench_ingest",
    "bench_retrieval",
    "bench_embedding_backends",
    "bench_languages",
    "llm_throughput",
    "bench_decode_weights",
    "bench_decode_attention",
    "bench_packed_weights",
    "bench_direct_step",
    "bench_drafts",
    "bench_scorer",
    "bench_generation",
    "bench_generator_finetune",
    "bench_check_similarity",
    "bench_entailment",
    "bench_trained_judges",
    "bench_interval_coverage",
    "bench_hagrid_attribution",
    "bench_citations",
    "bench_sufficiency",
    "bench_nightly",
    "bench_endpoint",
    "bench_budgets",
]


def main(names: list[str]) -> int:
    for name in names or BENCHMARKS:
        module = importlib.import_module(f"benchmarks.{name}")
        try:
            section = module.run()
        except SkipBenchmark as skip:
            print(f"skipped {name}: {skip}")
            continue
        print(section)
        write_section(name.removeprefix("bench_"), section)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
