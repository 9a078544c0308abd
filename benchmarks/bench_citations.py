"""Citation evaluation with the bundled SmolLM2-135M on the shipped sample corpus and golden set.

Three measurements in one run, on one fresh ``RAGTRAIL_HOME`` (the model cache is shared with the
default home so the GGUF conversion is not timed):

1. **Batched vs unbatched answering**: the same relevance mixtures answered through the real
   client with the local backend at batch size 1 and at batch size 8, each on an empty LLM cache;
   answers per second and their ratio (target >= 3).
2. **Cold vs rerun**: :func:`ragtrail.pipeline.citations.evaluate_citations` on the golden sample
   set (mixtures and scenarios, the nightly's default sample sizes), then the same call again:
   wall times, their ratio (target <= 0.10) and the rerun's model calls (target 0).
3. **The baseline to beat**: the cold run's citation F1, model vs random, per mixture type, over
   the answerable questions, with 95% bootstrap intervals and n.

    .venv/bin/python -m benchmarks.bench_citations [--items 4] [--answers 8] [--write]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks._common import machine_line, write_section

LLM = "builtin:smollm2-135m-instruct"
BATCH = 8


def _runtime(home: Path, **overrides: Any) -> Any:
    from ragtrail.config import load_settings
    from ragtrail.runtime import Runtime

    default_models = Path.cwd() / ".ragtrail" / "models"
    settings = load_settings(
        home=home,
        model_cache_dir=default_models if default_models.is_dir() else None,
        **overrides,
    )
    return Runtime(settings)


def _ingest(rt: Any, corpus: str) -> str:
    from ragtrail.paths import sample_corpus_dir
    from ragtrail.pipeline.night import INGEST, run_flow
    from ragtrail.pipeline.nightly import register_night_golden_sets

    state = INGEST.resolve({"corpus": corpus, "source": str(sample_corpus_dir())}, [], "bench")
    run_flow(rt, INGEST, state)
    (golden,) = register_night_golden_sets(rt, str(sample_corpus_dir()), corpus, [], print)
    return f"golden:{golden['version']}"


def _answers_per_second(rt: Any, corpus: str, qa_set: str, n: int, batch: int) -> float:
    """Answer the first ``n`` mixtures with a fresh client of batch size ``batch``."""
    from ragtrail.evaluate.mixture_answers import answer_mixtures
    from ragtrail.evaluate.mixtures import build_mixtures
    from ragtrail.llm.client import LLMClient
    from ragtrail.llm.factory import load_llm_backend
    from ragtrail.pipeline.citations import sample_items
    from ragtrail.pipeline.evaluate import load_items
    from ragtrail.pipeline.mixtures import corpus_from_runtime

    items, _, _ = load_items(rt, qa_set)
    mixtures = build_mixtures(
        sample_items(items, n, rt.settings.seed),
        corpus_from_runtime(rt, corpus),
        types=("relevant+irrelevant",),
    ).mixtures[:n]
    rt.limit_torch_threads()
    backend = load_llm_backend(
        LLM, batch_size=batch, cache_dir=rt.settings.resolved_model_cache_dir
    )
    client = LLMClient(backend, report_every=batch)
    start = time.perf_counter()
    answers = answer_mixtures(client, mixtures)
    seconds = time.perf_counter() - start
    return sum(1 for _ in answers) / seconds


def _f1_table(summary: dict[str, Any]) -> list[str]:
    from ragtrail.evaluate.citations import ANSWERABLE

    by = {
        (a["system"], a["mixture"]): a
        for a in summary["mixture"]["aggregates"]
        if a["metric"] == "citation_f1" and a.get("label") == ANSWERABLE
    }

    def cell(agg: dict[str, Any] | None) -> str:
        if not agg or agg.get("value") is None:
            return "undefined"
        return f"{agg['value']:.3f} [{agg['ci_low']:.3f}, {agg['ci_high']:.3f}] (n={agg['n']})"

    rows = ["| mixture | SmolLM2-135M F1 | random F1 |", "|---|---|---|"]
    for mixture in summary["mixture"]["types"]:
        rows.append(
            f"| {mixture} | {cell(by.get(('model', mixture)))} | "
            f"{cell(by.get(('random', mixture)))} |"
        )
    return rows


def run(items: int = 4, answers: int = 8) -> str:
    from ragtrail.pipeline.citations import evaluate_citations, load_citations

    with tempfile.TemporaryDirectory(prefix="ragtrail-bench-citations-") as tmp:
        home = Path(tmp) / "home"
        rt = _runtime(home, generation={"llm": LLM}, citations={"max_items": items})
        qa_set = _ingest(rt, "sample")

        unbatched = _answers_per_second(rt, "sample", qa_set, answers, 1)
        batched = _answers_per_second(rt, "sample", qa_set, answers, BATCH)

        start = time.perf_counter()
        evaluate_citations(rt, "sample", run_id="bench.golden", qa_set=qa_set)
        cold = time.perf_counter() - start
        calls_cold = rt.llm_usage.totals().calls
        start = time.perf_counter()
        evaluate_citations(rt, "sample", run_id="bench.golden", qa_set=qa_set)
        warm = time.perf_counter() - start
        rerun_calls = rt.llm_usage.totals().calls - calls_cold
        summary = load_citations(rt, "bench.golden")
        rt.close()

    assert summary is not None
    mixture, scenarios = summary["mixture"], summary.get("scenarios") or {}
    lines = [
        "## Citation quality — SmolLM2-135M on the sample golden set (local transformers, CPU)",
        "",
        machine_line(),
        "",
        f"Answering throughput, the same {answers} relevant+irrelevant mixtures (1-3/3/0), "
        "empty cache each:",
        "",
        "| batch size | answers/s |",
        "|---|---|",
        f"| 1 | {unbatched:.3f} |",
        f"| {BATCH} | {batched:.3f} |",
        f"| **batched / unbatched** (target >= 3) | **{batched / unbatched:.2f}x** |",
        "",
        f"`evaluate_citations` on the golden sample set: {items} questions x "
        f"{len(mixture['types'])} mixture types, scenarios on "
        f"{scenarios.get('items', 0)} questions ({', '.join(scenarios.get('names', []))}):",
        "",
        "| run | wall s | model calls |",
        "|---|---|---|",
        f"| cold | {cold:.1f} | {calls_cold} |",
        f"| rerun | {warm:.1f} | {rerun_calls} |",
        f"| **rerun / cold** (target <= 0.10, 0 calls) | **{warm / cold:.3f}** | |",
        "",
        "The baseline the retraining work has to beat — citation F1 over the answerable questions "
        f"(95% bootstrap CI, n; {mixture['failed']} failed answers left out, random = 1-3 "
        f"citations uniformly at random, {mixture['baseline_repeats']} draws per mixture):",
        "",
        *_f1_table(summary),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4)
    parser.add_argument("--answers", type=int, default=8)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    section = run(args.items, args.answers)
    print(section)
    if args.write:
        write_section("citations", section)


if __name__ == "__main__":
    main()
