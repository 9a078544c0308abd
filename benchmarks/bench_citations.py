"""Citation evaluation with the bundled SmolLM2-135M on the shipped sample corpus and golden set.

Three measurements in one run, on one fresh ``RAGTRAIL_HOME`` (the model cache is shared with the
default home so the GGUF conversion is not timed):

1. **Batched vs unbatched answering**: the relevance mixtures the nightly answers (``--answer-items``
   golden questions x every mixture type) through the real client (requests per backend call as
   the runtime's clients send them) with the local backend at batch size 1, 8 (the default) and
   16, in float32 and in bfloat16, each backend fresh, warmed on one other question's mixture, on
   an empty LLM cache; answers per second and their ratio (target >= 3).
2. **Cold vs rerun**: :func:`ragtrail.pipeline.citations.step.evaluate_citations` on the golden sample
   set (mixtures and scenarios, the nightly's default sample sizes), then the same call again:
   wall times, their ratio (target <= 0.10) and the rerun's model calls (target 0).
3. **The baseline to beat**: the cold run's citation F1, model vs random, per mixture type, over
   the answerable questions, with 95% bootstrap intervals and n.

    .venv/bin/python -m benchmarks.bench_citations [--items 4] [--answer-items 8] [--write]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks._common import machine_line, write_section

if TYPE_CHECKING:
    from ragtrail.summaries.citation_summary import CitationSummary, MixtureAggregate

LLM = "builtin:smollm2-135m-instruct"
BATCHES = (8, 16)
DTYPES = ("float32", "bfloat16")


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
    return f"golden:{golden.version}"


@dataclass
class Throughput:
    """One timed answering pass."""

    dtype: str
    batch: int
    answers: int
    seconds: float
    completion_tokens: int
    raw: list[tuple[str, ...]]

    @property
    def per_second(self) -> float:
        return self.answers / self.seconds


def _workload(rt: Any, corpus: str, qa_set: str, n_items: int) -> tuple[list[Any], list[Any]]:
    """The mixtures of ``n_items`` sampled questions in every type, and a warm-up mixture of one
    more question (answered untimed by each fresh backend: tokenizer tables, first allocations)."""
    from ragtrail.evaluate.citations.mixtures import build_mixtures
    from ragtrail.pipeline.passage_sources import corpus_from_runtime
    from ragtrail.pipeline.run_io import load_items, sample_items

    items, _, _ = load_items(rt, qa_set)
    picked = sample_items(items, n_items + 1, rt.settings.seed)
    mixture_corpus = corpus_from_runtime(rt, corpus)
    timed = build_mixtures(picked[:n_items], mixture_corpus).mixtures
    warm = build_mixtures(picked[n_items:], mixture_corpus).mixtures[:1]
    return list(timed), list(warm)


def _answer(rt: Any, mixtures: list[Any], warm: list[Any], dtype: str, batch: int) -> Throughput:
    """Answer ``mixtures`` with a fresh backend of ``dtype`` and ``batch``, no LLM cache."""
    from ragtrail.evaluate.citations.mixture_answers import answer_mixtures
    from ragtrail.llm import UsageMeter
    from ragtrail.llm.client import LLMClient
    from ragtrail.llm.factory import load_llm_backend
    from ragtrail.runtime import BATCHES_PER_CALL

    rt.limit_torch_threads()
    backend = load_llm_backend(
        LLM, batch_size=batch, dtype=dtype, cache_dir=rt.settings.resolved_model_cache_dir
    )
    per_call = BATCHES_PER_CALL * batch
    answer_mixtures(LLMClient(backend, report_every=per_call), warm)
    usage = UsageMeter()
    client = LLMClient(backend, usage=usage, report_every=per_call)
    start = time.perf_counter()
    answers = answer_mixtures(client, mixtures)
    seconds = time.perf_counter() - start
    return Throughput(
        dtype,
        batch,
        len(answers),
        seconds,
        usage.totals().completion_tokens,
        [a.raw_texts for a in answers],
    )


def _throughput_table(passes: list[Throughput]) -> list[str]:
    by = {(p.dtype, p.batch): p for p in passes}
    rows = [
        "| precision | batch size | answers | wall s | answers/s | generated tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for p in passes:
        rows.append(
            f"| {p.dtype} | {p.batch} | {p.answers} | {p.seconds:.1f} | {p.per_second:.3f} | "
            f"{p.completion_tokens / p.seconds:.1f} |"
        )
    rows += [
        "",
        "| precision | batch size | **batched / unbatched answers/s** (target >= 3) "
        "| generated tokens/s ratio | same text as unbatched |",
        "|---|---|---|---|---|",
    ]
    for dtype in DTYPES:
        one = by[(dtype, 1)]
        for batch in BATCHES:
            many = by[(dtype, batch)]
            same = sum(a == b for a, b in zip(one.raw, many.raw, strict=True))
            tokens = (many.completion_tokens / many.seconds) / (one.completion_tokens / one.seconds)
            rows.append(
                f"| {dtype} | {batch} | **{many.per_second / one.per_second:.2f}x** | "
                f"{tokens:.2f}x | {same} of {one.answers} |"
            )
    rows.append("")
    for batch in (1, *BATCHES):
        ratio = by[("bfloat16", batch)].per_second / by[("float32", batch)].per_second
        rows.append(f"bfloat16 / float32 answers/s at batch size {batch}: {ratio:.2f}x.  ")
    return rows


def _f1_table(summaries: dict[str, CitationSummary]) -> list[str]:
    """Citation F1 over the answerable questions per mixture type: the model in each precision,
    and the random baseline (the same mixtures in every run)."""
    from ragtrail.evaluate.citations.evaluator import ANSWERABLE

    def cells(summary: CitationSummary) -> dict[tuple[str, str], MixtureAggregate]:
        return {
            (a.system, a.mixture): a
            for a in summary.mixture.aggregates
            if a.metric == "citation_f1" and a.label == ANSWERABLE
        }

    def cell(agg: MixtureAggregate | None) -> str:
        if not agg or agg.value is None:
            return "undefined"
        return f"{agg.value:.3f} [{agg.ci_low:.3f}, {agg.ci_high:.3f}] (n={agg.n})"

    by = {dtype: cells(summary) for dtype, summary in summaries.items()}
    first = next(iter(summaries.values())).mixture
    head = " | ".join(f"SmolLM2-135M {dtype} F1" for dtype in summaries)
    rows = [f"| mixture | {head} | random F1 |", "|---|" + "---|" * (len(summaries) + 1)]
    for mixture in first.types:
        models = " | ".join(cell(by[d].get(("model", mixture))) for d in summaries)
        rows.append(f"| {mixture} | {models} | {cell(by['float32'].get(('random', mixture)))} |")
    return rows


def run(items: int = 4, answer_items: int = 8) -> str:
    from ragtrail.pipeline.citations.step import evaluate_citations
    from ragtrail.pipeline.citations.views import load_citations

    with tempfile.TemporaryDirectory(prefix="ragtrail-bench-citations-") as tmp:
        home = Path(tmp) / "home"
        rt = _runtime(home, generation={"llm": LLM}, citations={"max_items": items})
        qa_set = _ingest(rt, "sample")

        mixtures, warm = _workload(rt, "sample", qa_set, answer_items)
        passes = [_answer(rt, mixtures, warm, d, b) for d in DTYPES for b in (1, *BATCHES)]

        start = time.perf_counter()
        evaluate_citations(rt, "sample", run_id="bench.golden", qa_set=qa_set)
        cold = time.perf_counter() - start
        calls_cold = rt.llm_usage.totals().calls
        start = time.perf_counter()
        evaluate_citations(rt, "sample", run_id="bench.golden", qa_set=qa_set)
        warm_s = time.perf_counter() - start
        rerun_calls = rt.llm_usage.totals().calls - calls_cold
        stored = {"float32": load_citations(rt, "bench.golden")}
        rt.close()

        half = _runtime(
            home, generation={"llm": LLM, "llm_dtype": "bfloat16"}, citations={"max_items": items}
        )
        start = time.perf_counter()
        evaluate_citations(half, "sample", run_id="bench.golden.bf16", qa_set=qa_set)
        cold_half = time.perf_counter() - start
        stored["bfloat16"] = load_citations(half, "bench.golden.bf16")
        half.close()

    summaries = {dtype: summary for dtype, summary in stored.items() if summary}
    assert len(summaries) == len(stored)
    mixture, scenarios = summaries["float32"].mixture, summaries["float32"].scenarios
    failed = ", ".join(f"{d} {summary.mixture.failed}" for d, summary in summaries.items())
    lines = [
        "## Citation quality — SmolLM2-135M on the sample golden set (local transformers, CPU)",
        "",
        machine_line(),
        "",
        f"Answering throughput on the nightly's kind of workload: {len(mixtures)} relevance "
        f"mixtures ({answer_items} golden questions x {len(mixture.types)} mixture types, "
        f"{mixture.spec}), each pass a fresh backend warmed on another "
        "question's mixture, no LLM cache:",
        "",
        *_throughput_table(passes),
        "",
        f"`evaluate_citations` on the golden sample set: {items} questions x "
        f"{len(mixture.types)} mixture types, scenarios on "
        f"{scenarios.items if scenarios else 0} questions "
        f"({', '.join(scenarios.names if scenarios else [])}):",
        "",
        "| run | wall s | model calls |",
        "|---|---|---|",
        f"| cold | {cold:.1f} | {calls_cold} |",
        f"| rerun | {warm_s:.1f} | {rerun_calls} |",
        f"| **rerun / cold** (target <= 0.10, 0 calls) | **{warm_s / cold:.3f}** | |",
        f"| cold, bfloat16 | {cold_half:.1f} | |",
        "",
        "The baseline the retraining work has to beat — citation F1 over the answerable questions "
        f"(95% bootstrap CI, n; failed answers, left out: {failed}; random = 1-3 citations "
        f"uniformly at random, {mixture.baseline_repeats} draws per mixture):",
        "",
        *_f1_table(summaries),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4)
    parser.add_argument("--answer-items", type=int, default=8)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    section = run(args.items, args.answer_items)
    print(section)
    if args.write:
        write_section("citations", section)


if __name__ == "__main__":
    main()
