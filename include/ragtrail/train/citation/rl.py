"""RL stage of the citation answerer: TRL ``GRPOTrainer`` on the citation reward, KL to the SFT
model.

Trainer choice. TRL 1.16 has no PPO (RAGE used PPO). Of the two on-policy trainers it has, GRPO
is used: per prompt it samples ``num_generations`` completions and takes each one's reward
relative to its group (mean-centred, std-scaled) as the advantage, so no value model is trained
(PPO's critic would be a second network to fit on a few hundred prompts), and its KL term to a
reference model is an explicit part of the loss, weighted by ``beta`` and logged per step. RLOO
(leave-one-out baseline, KL folded into the reward) would serve too; GRPO's per-token KL and its
logged ``kl`` make the distance from the SFT model easy to watch.

KL reference = the SFT model. With PEFT, TRL's reference is the policy with its adapter
disabled. The SFT adapter is therefore merged into the base weights first and a fresh LoRA is
trained on top: "adapter disabled" is then exactly the SFT model, and no second copy of the
weights is loaded. The bundle stores the two adapters (``sft`` then ``rl``), merged in that order
when loaded.

Parameters (:class:`CitationTrainingConfig`): ``num_generations`` completions per prompt (4 by
default; the group must be at least 2 for a relative advantage), ``beta`` = KL weight (0.04,
must be > 0: the task asks for a KL penalty, and TRL's default 0 would load no reference),
``rl_lr`` (1e-5, constant), ``max_completion_length`` (128 tokens: two cited sentences of JSON
fit in about 110), ``rl_temperature`` (0.8), ``rl_steps`` optimiser steps, one prompt group per
step on one device (``per_device_train_batch_size = num_generations``). TRL's default loss
(``dapo``: token-level normalisation) and one policy update per generation
(``num_iterations=1``) are kept. Generation is not schema-guided during RL (evaluation is):
an unparseable reply earns 0, so the policy is pushed towards well-formed JSON too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ragtrail.train.citation.config import CitationTrainingConfig
from ragtrail.train.citation.data import CitationPrompt
from ragtrail.train.citation.reward import citation_reward
from ragtrail.train.citation.stage import (
    StageResult,
    finished_stage,
    load_trainable,
    lora_config,
    trainer_arguments,
)


def rl_stage_config(config: CitationTrainingConfig) -> dict[str, object]:
    """The parameters of the RL stage, as recorded in lineage."""
    return {
        "trainer": "trl.GRPOTrainer",
        "reward": "(citation precision + citation recall) / 2",
        "kl_reference": "SFT model (SFT adapter merged; fresh LoRA on top)",
        "steps": config.rl_steps,
        "num_generations": config.num_generations,
        "prompts_per_step": 1,
        "beta": config.beta,
        "lr": config.rl_lr,
        "lr_schedule": "constant",
        "max_completion_length": config.max_completion_length,
        "temperature": config.rl_temperature,
        "loss_type": "dapo",
        "lora_r": config.lora_r,
        "lora_alpha": config.lora_alpha,
        "lora_dropout": config.lora_dropout,
        "seed": config.seed,
    }


def run_rl(
    base_model: str,
    sft_adapter: Path | None,
    prompts: Sequence[CitationPrompt],
    config: CitationTrainingConfig,
    work_dir: Path,
    *,
    cache_dir: str | Path | None = None,
) -> StageResult:
    """Train a LoRA with GRPO on ``prompts`` over the base model with ``sft_adapter`` merged
    (the base alone when SFT was skipped); save it to ``work_dir/adapter``."""
    if not prompts:
        raise ValueError("the RL stage needs at least one prompt")
    from datasets import Dataset
    from peft import PeftModel
    from trl import GRPOConfig, GRPOTrainer

    started = time.perf_counter()
    model, tokenizer = load_trainable(base_model, cache_dir=cache_dir)
    if sft_adapter is not None:
        model = PeftModel.from_pretrained(model, str(sft_adapter)).merge_and_unload()
    rows = [
        {"prompt": p.messages, "relevant": list(p.relevant), "n_passages": p.n_passages}
        for p in prompts
    ]
    args = GRPOConfig(
        **trainer_arguments(config, work_dir / "trainer"),
        max_steps=config.rl_steps,
        per_device_train_batch_size=config.num_generations,
        gradient_accumulation_steps=1,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.rl_temperature,
        beta=config.beta,
        learning_rate=config.rl_lr,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[citation_reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora_config(model, config),
    )
    trainer.train()
    return finished_stage(
        "rl", trainer, work_dir, started=started, examples=len(rows), config=rl_stage_config(config)
    )
