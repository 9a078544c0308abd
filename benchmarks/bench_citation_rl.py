"""PPO vs GRPO vs RLOO for the citation answerer, after one shared SFT stage (CPU, SmolLM2-135M,
the sample corpus).

One split, one set of best-of-N SFT targets and one SFT adapter; then each algorithm trains its
RL adapter on top of the same SFT model with the same prompts, seed, learning rate, temperature,
completion limit, KL weight and completions per iteration (``num_generations``). The base model,
the SFT model and the three RL models answer the split's frozen held-out mixtures (greedy,
guided, the same seed). Reported: citation F1, precision and recall with 95% bootstrap CIs and n;
paired differences of F1 against the SFT model and against the random baseline (bootstrap CI and
sign-flip p); each stage's wall time and tokens; the mean reward and KL per iteration.

    .venv/bin/python -m benchmarks.bench_citation_rl [--items 40] [--rl-steps 6] [--write]
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

ALGORITHMS = ("ppo", "grpo", "rloo")
METRICS = ("citation_f1", "citation_precision", "citation_recall")


def _cell(cell: dict[str, Any] | None) -> str:
    if not cell or cell.get("value") is None:
        return "undefined"
    return f"{cell['value']:.3f} [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}]"


def _paired(rows_a: list[dict], rows_b: list[dict], system_a: str, system_b: str) -> str:
    """Paired F1 difference (b - a) over the answerable mixtures both rows sets have."""
    from ragtrail.evaluate.comparison.paired import compare_paired
    from ragtrail.evaluate.comparison.promotion import gate_value

    def index(rows: list[dict], system: str) -> dict[tuple[str, str], float]:
        out = {}
        for row in rows:
            value = gate_value(row, "citation_f1") if row["system"] == system else None
            if value is not None:
                out[(row["qid"], row["mixture"])] = value
        return out

    a, b = index(rows_a, system_a), index(rows_b, system_b)
    keys = sorted(set(a) & set(b))
    stats = compare_paired([a[k] for k in keys], [b[k] for k in keys], n_resamples=9999, seed=13)
    if stats.diff is None:
        return "undefined (no pairs)"
    return (
        f"{stats.diff:+.3f} [{stats.ci_low:+.3f}, {stats.ci_high:+.3f}], "
        f"p={stats.p_value:.3f} (n={stats.n})"
    )


def _curve(stage: Any, key: str) -> str:
    values = stage.series(key)
    return " ".join(f"{v:.2f}" for v in values) if values else "-"


def run(items: int, overrides: dict[str, Any]) -> str:

    from ragtrail.llm.backends.transformers_local import TransformersBackend
    from ragtrail.llm.client import LLMClient
    from ragtrail.pipeline.passage_sources import corpus_from_runtime
    from ragtrail.pipeline.run_io import load_items, sample_items
    from ragtrail.train.citation import (
        CitationTrainingConfig,
        evaluate_citation_model,
        headline,
        make_targets,
        split_citation_data,
        training_prompts,
    )
    from ragtrail.train.citation.rl import run_rl
    from ragtrail.train.citation.sft import run_sft

    with tempfile.TemporaryDirectory(prefix="ragtrail-bench-citrl-") as tmp:
        work = Path(tmp)
        rt = _runtime(work / "home")
        qa_set = _ingest(rt, "sample")
        cache = rt.settings.resolved_model_cache_dir
        config = CitationTrainingConfig.from_settings(rt.settings, **overrides)
        all_items, _, _ = load_items(rt, qa_set)
        split = split_citation_data(
            sample_items(all_items, items, config.seed),
            corpus_from_runtime(rt, "sample"),
            eval_share=config.eval_share,
            seed=config.seed,
            mixture_types=("all",),
        )
        rt.limit_torch_threads()
        prompts = training_prompts(split, config)
        base = TransformersBackend(LLM, cache_dir=cache)
        started = time.perf_counter()
        targets, report = make_targets(
            prompts,
            LLMClient(base),
            source="best_of_n",
            samples=config.best_of_n,
            temperature=config.sample_temperature,
            threshold=config.reward_threshold,
            max_new_tokens=config.target_max_new_tokens,
            seed=config.seed,
        )
        target_seconds = time.perf_counter() - started
        sft = run_sft(LLM, prompts, targets, config, work / "sft", cache_dir=cache)
        assert sft.adapter_dir is not None, sft.skipped
        stages = {}
        for algorithm in ALGORITHMS:
            stages[algorithm] = run_rl(
                LLM,
                sft.adapter_dir,
                prompts,
                config.model_copy(update={"rl_algorithm": algorithm}),
                work / algorithm,
                target_completions=[t.completion for t in targets],
                cache_dir=cache,
            )
        models = {"base": base}
        models["SFT"] = TransformersBackend(LLM, adapter_path=[sft.adapter_dir], cache_dir=cache)
        for algorithm, stage in stages.items():
            adapters = [sft.adapter_dir] + ([stage.adapter_dir] if stage.adapter_dir else [])
            models[f"SFT + {algorithm.upper()}"] = TransformersBackend(
                LLM, adapter_path=adapters, cache_dir=cache
            )
        evaluations = {}
        for name, backend in models.items():
            evaluations[name] = evaluate_citation_model(LLMClient(backend), split)
        rt.close()

    counts = split.counts
    limit = stages["ppo"].config["max_completion_length"]
    lines = [
        "## Citation RL: PPO vs GRPO vs RLOO — SmolLM2-135M on the sample corpus (CPU)",
        "",
        machine_line(),
        "",
        f"Split (seed {config.seed}): {counts['items']} golden questions sampled, "
        f"{counts['eval_items']} held out ({counts['eval_mixtures']} frozen mixtures of type "
        f"`all`), {counts['train_prompts']} training prompts ({len(prompts)} used). SFT targets: "
        f"best-of-{config.best_of_n} from the base model, kept {report.kept}/{report.prompts} "
        f"at reward >= {config.reward_threshold} ({target_seconds:.0f} s). SFT: {sft.steps} "
        f"steps, {sft.wall_seconds:.0f} s, {sft.tokens_seen} tokens. Every RL stage: "
        f"{config.rl_steps} iterations of {config.num_generations} completions, lr "
        f"{config.rl_lr:g}, temperature {config.rl_temperature}, beta {config.beta}, completion "
        f"limit {limit} tokens ({stages['ppo'].config['completion_length_basis']}), seed "
        f"{config.seed}; PPO: {config.ppo_epochs} epochs of minibatches of "
        f"{config.ppo_minibatch_size}, adaptive KL (target {config.target_kl}).",
        "",
        "| RL stage | iterations | wall s | tokens | mean reward per iteration | KL per iteration | "
        "stopped |",
        "|---|---|---|---|---|---|---|",
    ]
    for algorithm, stage in stages.items():
        note = stage.skipped or stage.stopped or "-"
        lines.append(
            f"| {algorithm.upper()} | {stage.steps} | {stage.wall_seconds:.0f} | "
            f"{stage.tokens_seen} | {_curve(stage, 'reward')} | {_curve(stage, 'kl')} | {note} |"
        )
    lines += [
        "",
        "Held-out citation quality (answerable mixtures; 95% bootstrap CI; n answerable = "
        f"{headline(evaluations['base'])['model'].get('all', {}).get('n', 0)}):",
        "",
        "| model | F1 | precision | recall | F1 vs SFT (paired) | F1 vs random (paired) |",
        "|---|---|---|---|---|---|",
    ]
    for name, evaluation in evaluations.items():
        cells = [_cell(headline(evaluation, m)["model"].get("all")) for m in METRICS]
        vs_sft = (
            "-"
            if name == "SFT"
            else _paired(evaluations["SFT"].rows, evaluation.rows, "model", "model")
        )
        vs_random = _paired(evaluation.rows, evaluation.rows, "random", "model")
        lines.append(f"| {name} | {' | '.join(cells)} | {vs_sft} | {vs_random} |")
    random_cells = [_cell(headline(evaluations["base"], m)["random"].get("all")) for m in METRICS]
    lines.append(f"| random baseline | {' | '.join(random_cells)} | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=40, help="golden questions to split")
    parser.add_argument("--train-prompts", type=int, default=8)
    parser.add_argument("--best-of-n", type=int, default=3)
    parser.add_argument("--sft-steps", type=int, default=8)
    parser.add_argument("--rl-steps", type=int, default=6)
    parser.add_argument("--rl-lr", type=float, default=1e-4)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    overrides = {
        "max_train_prompts": args.train_prompts,
        "best_of_n": args.best_of_n,
        "sft_steps": args.sft_steps,
        "rl_steps": args.rl_steps,
        "rl_lr": args.rl_lr,
    }
    section = run(args.items, overrides)
    print(section)
    if args.write:
        write_section("citation-rl", section)


if __name__ == "__main__":
    main()
