"""SFT stage of the citation answerer: TRL ``SFTTrainer`` with a fresh LoRA on the base model.

The dataset is conversational prompt-completion: ``prompt`` is the answerer's chat
(:attr:`CitationPrompt.messages`), ``completion`` one assistant message holding the target JSON.
TRL renders both with the tokenizer's chat template, as the transformers backend renders prompts
at evaluation time, and computes the loss on the completion tokens only (``completion_only_loss``;
the prompt, most of every sequence, is context, not something to imitate). Examples are visited
in a seeded order; the LoRA is initialised from the same seed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragtrail.train.citation.config import CitationTrainingConfig
from ragtrail.train.citation.data import CitationPrompt
from ragtrail.train.citation.stage import (
    StageResult,
    finished_stage,
    load_trainable,
    lora_config,
    skipped_stage,
    trainer_arguments,
    without_printing,
)
from ragtrail.train.citation.targets import SFTTarget

log = logging.getLogger(__name__)


def sft_stage_config(config: CitationTrainingConfig) -> dict[str, object]:
    """The parameters of the SFT stage, as recorded in lineage."""
    return {
        "trainer": "trl.SFTTrainer",
        "steps": config.sft_steps,
        "batch_size": config.sft_batch_size,
        "lr": config.sft_lr,
        "lr_schedule": "constant",
        "max_length": config.max_length,
        "completion_only_loss": True,
        "lora_r": config.lora_r,
        "lora_alpha": config.lora_alpha,
        "lora_dropout": config.lora_dropout,
        "seed": config.seed,
    }


def run_sft(
    base_model: str,
    prompts: Sequence[CitationPrompt],
    targets: Sequence[SFTTarget],
    config: CitationTrainingConfig,
    work_dir: Path,
    *,
    cache_dir: str | Path | None = None,
) -> StageResult:
    """Train a LoRA on ``targets`` (matched to ``prompts`` by key) and save it to
    ``work_dir/adapter``. With no target the stage is skipped (the RL stage then starts from the
    base model), and the result says so."""
    stage_config = sft_stage_config(config)
    if not targets:
        return skipped_stage("sft", "no SFT target cleared the reward threshold", stage_config)
    by_key = {p.key: p for p in prompts}
    missing = [t.key for t in targets if t.key not in by_key]
    if missing:
        raise ValueError(f"SFT targets without a prompt: {missing}")

    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    started = time.perf_counter()
    model, tokenizer = load_trainable(base_model, cache_dir=cache_dir)
    rows = [
        {
            "prompt": by_key[t.key].messages,
            "completion": [{"role": "assistant", "content": t.completion}],
        }
        for t in targets
    ]
    # A prompt that fills max_length leaves no completion token to learn from (TRL then drops the
    # example): such examples are left out here, counted, and an empty stage is skipped.
    fitting = [row for row in rows if _prompt_tokens(tokenizer, row["prompt"]) < config.max_length]
    if not fitting:
        return skipped_stage(
            "sft",
            f"all {len(rows)} SFT prompts are at least max_length={config.max_length} tokens long",
            stage_config,
        )
    if len(fitting) < len(rows):
        log.warning(
            "SFT: %d of %d prompts too long for max_length", len(rows) - len(fitting), len(rows)
        )
    rows = fitting
    args = SFTConfig(
        **trainer_arguments(config, work_dir / "trainer"),
        max_steps=config.sft_steps,
        per_device_train_batch_size=config.sft_batch_size,
        gradient_accumulation_steps=1,
        learning_rate=config.sft_lr,
        max_length=config.max_length,
        completion_only_loss=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora_config(
            model, r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout
        ),
    )
    without_printing(trainer).train()
    return finished_stage(
        "sft", trainer, work_dir, started=started, examples=len(rows), config=stage_config
    )


def _prompt_tokens(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    """Tokens of ``messages`` rendered with the chat template, generation prompt included."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])
