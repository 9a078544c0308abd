"""Citation-model retraining with the bundled SmolLM2-135M on the sample corpus (CPU): citation F1
of the base model, after SFT and after RL, on the same held-out mixtures.

Steps, on one fresh ``RAGTRAIL_HOME`` (the model cache is shared with the default home so the
GGUF conversion is not timed):

1. ingest the sample corpus and its golden set; take a seeded sample of ``--items`` questions
   spread over the labels and split them by question and document
   (:func:`ragtrail.train.citation.split_citation_data`);
2. :func:`ragtrail.train.citation.train_citation_model`: best-of-N self-distillation from the
   base model (no teacher here), SFT, GRPO, the bundle;
3. the base model, the SFT model (base + ``sft``) and the RL model (the bundle) answer the split's
   frozen held-out mixtures greedily with the same seed; citation F1 over the answerable
   questions, 95% bootstrap CI and n, next to the seeded random baseline.

    .venv/bin/python -m benchmarks.bench_citation_training [--items 24] [--types all] [--write]
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
from benchmarks.bench_citations import LLM, _ingest, _runtime


def _cell(cell: dict[str, Any] | None) -> str:
    if not cell or cell.get("value") is None:
        return "undefined"
    return f"{cell['value']:.3f} [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}] (n={cell['n']})"


def run(items: int, types: tuple[str, ...], overrides: dict[str, Any]) -> str:
    from ragtrail.evaluate.comparison.promotion import GateConfig, decide_promotion
    from ragtrail.llm.backends.bundle import load_bundle_backend
    from ragtrail.llm.backends.transformers_local import TransformersBackend
    from ragtrail.llm.client import LLMClient
    from ragtrail.pipeline.passage_sources import corpus_from_runtime
    from ragtrail.pipeline.run_io import load_items, sample_items
    from ragtrail.train.citation import (
        CitationTrainingConfig,
        evaluate_citation_model,
        headline,
        split_citation_data,
        train_citation_model,
    )

    with tempfile.TemporaryDirectory(prefix="ragtrail-bench-cittrain-") as tmp:
        home = Path(tmp) / "home"
        rt = _runtime(home)
        qa_set = _ingest(rt, "sample")
        cache = rt.settings.resolved_model_cache_dir
        config = CitationTrainingConfig.from_settings(rt.settings, **overrides)
        all_items, _, _ = load_items(rt, qa_set)
        picked = sample_items(all_items, items, config.seed)
        started = time.perf_counter()
        split = split_citation_data(
            picked,
            corpus_from_runtime(rt, "sample"),
            eval_share=config.eval_share,
            seed=config.seed,
            mixture_types=types,  # type: ignore[arg-type]
        )
        split_seconds = time.perf_counter() - started
        rt.limit_torch_threads()
        base = TransformersBackend(LLM, cache_dir=cache)
        started = time.perf_counter()
        result = train_citation_model(
            LLM, split, config, Path(tmp) / "run", current=LLMClient(base), cache_dir=cache
        )
        train_seconds = time.perf_counter() - started
        assert result.sft.adapter_dir is not None or result.sft.skipped
        models = {"base": base}
        if result.sft.adapter_dir is not None:
            models["after SFT"] = TransformersBackend(
                LLM, adapter_path=[result.sft.adapter_dir], cache_dir=cache
            )
        models["after SFT + RL"] = load_bundle_backend(result.bundle.path, cache_dir=cache)
        scores: dict[str, dict[str, Any]] = {}
        eval_seconds: dict[str, float] = {}
        evaluations = {}
        for name, backend in models.items():
            started = time.perf_counter()
            evaluations[name] = evaluate_citation_model(LLMClient(backend), split)
            eval_seconds[name] = time.perf_counter() - started
            scores[name] = headline(evaluations[name])
        # The promotion gate as retrain_models applies it: the model in service (here the base
        # model) against the trained bundle on the same frozen mixtures, paired.
        gate = decide_promotion(
            evaluations["base"].rows,
            evaluations["after SFT + RL"].rows,
            GateConfig.from_settings(rt.settings.promotion),
        )
        rt.close()

    lineage = result.lineage
    targets = lineage["targets"]
    sft, rl = lineage["stages"]["sft"], lineage["stages"]["rl"]
    counts = split.counts
    rows = ["| model | " + " | ".join(f"F1 {t}" for t in types) + " | eval s |"]
    rows.append("|---" * (len(types) + 2) + "|")
    for name in models:
        cells = " | ".join(_cell(scores[name].get("model", {}).get(t)) for t in types)
        rows.append(f"| {name} | {cells} | {eval_seconds[name]:.0f} |")
    random_row = scores["base"].get("random", {})
    rows.append(
        "| random baseline | " + " | ".join(_cell(random_row.get(t)) for t in types) + " | |"
    )

    def stage_line(name: str, stage: dict[str, Any], extra: str) -> str:
        if stage.get("skipped"):
            return f"| {name} | skipped: {stage['skipped']} | | | |"
        loss = stage.get("loss") or []
        first_last = f"{loss[0]:.3f} -> {loss[-1]:.3f}" if loss else "-"
        return (
            f"| {name} | {stage['steps']} | {stage['wall_seconds']:.0f} | "
            f"{stage['tokens_seen']} | loss {first_last}{extra} |"
        )

    mean_reward = rl.get("mean_reward")
    reward_text = f"; mean reward {mean_reward:.3f}" if mean_reward is not None else ""
    kept_mean = targets["reward_kept"].get("mean")
    lines = [
        "## Citation-model retraining — SmolLM2-135M on the sample corpus (CPU)",
        "",
        machine_line(),
        "",
        f"Split (seed {config.seed}): {counts['items']} golden questions sampled, "
        f"{counts['eval_items']} held out ({counts['eval_mixtures']} frozen mixtures, types "
        f"{', '.join(types)}, {counts['eval_documents']} documents on the evaluation side), "
        f"{counts['train_prompts']} training prompts from {counts['train_items']} questions "
        f"({lineage['train_prompts_used']} used); split in {split_seconds:.1f} s, version "
        f"`{split.split_version}`.",
        "",
        "| stage | steps | wall s | tokens | notes |",
        "|---|---|---|---|---|",
        f"| targets (best-of-{targets['samples_per_prompt']}, T={config.sample_temperature}) "
        f"| {targets['answers']} answers | {targets['wall_seconds']:.0f} | "
        f"{targets['tokens_generated']} generated | kept {targets['kept']}/{targets['prompts']} "
        f"prompts at reward >= {targets['threshold']}; mean reward all "
        f"{targets['reward_all'].get('mean') or 0:.3f}, kept "
        f"{kept_mean if kept_mean is None else round(kept_mean, 3)} |",
        stage_line(f"SFT (LoRA r={config.lora_r})", sft, ""),
        stage_line(f"RL (GRPO, {config.num_generations} gen, beta {config.beta})", rl, reward_text),
        f"| **training total** | | **{train_seconds:.0f}** | | |",
        "",
        "Citation F1 over the answerable held-out questions (greedy, guided, the same seed for "
        "every model; 95% bootstrap CI, n; random = 1-3 citations uniformly at random):",
        "",
        *rows,
        "",
        f"Promotion gate (base as the model in service vs after SFT + RL, paired on the same "
        f"mixtures, as `retrain_models` decides): **{'promote' if gate.promote else 'keep as challenger'}** "
        f"— {gate.reason}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=24, help="golden questions to split")
    parser.add_argument("--types", default="all", help="comma-separated mixture types")
    parser.add_argument("--train-prompts", type=int, default=8)
    parser.add_argument("--best-of-n", type=int, default=3)
    parser.add_argument("--sft-steps", type=int, default=8)
    parser.add_argument("--rl-steps", type=int, default=4)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    overrides = {
        "max_train_prompts": args.train_prompts,
        "best_of_n": args.best_of_n,
        "sft_steps": args.sft_steps,
        "rl_steps": args.rl_steps,
    }
    section = run(args.items, tuple(args.types.split(",")), overrides)
    print(section)
    if args.write:
        write_section("citation-training", section)


if __name__ == "__main__":
    main()
