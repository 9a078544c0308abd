"""What the SFT and RL stages share: loading the model to train, the LoRA shape, the trainer
arguments every stage needs on any device, and the stage's result record."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragtrail import jsonsafe
from ragtrail.jsonsafe import JsonObject
from ragtrail.train.citation.config import CitationTrainingConfig

ADAPTER = "adapter"
"""Each stage saves its LoRA adapter in this subdirectory of its work directory."""


@dataclass(frozen=True)
class StageResult:
    """One training stage: where its adapter is and what it cost.

    ``adapter_dir`` is None when the stage was skipped (``skipped`` says why). ``tokens_seen``
    counts the tokens of every sequence the optimiser saw (prompts and completions, padding
    excluded); ``history`` holds the trainer's per-step log (loss, and for RL reward, KL, ...).
    """

    name: str
    adapter_dir: Path | None
    steps: int
    wall_seconds: float
    tokens_seen: int
    examples: int
    history: tuple[JsonObject, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    skipped: str | None = None
    stopped: str | None = None
    """Why a stage that kept its adapter ended before its planned steps (e.g. no reward
    spread left); None when it ran them all."""

    def series(self, key: str) -> list[float]:
        """One logged value per step where the trainer logged it (e.g. ``loss``, ``reward``)."""
        return [row[key] for row in self.history if key in row]

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            "name": self.name,
            "adapter_dir": str(self.adapter_dir) if self.adapter_dir else None,
            "steps": self.steps,
            "wall_seconds": round(self.wall_seconds, 3),
            "tokens_seen": self.tokens_seen,
            "examples": self.examples,
            "loss": self.series("loss"),
            "history": [dict(row) for row in self.history],
            "config": dict(self.config),
            "skipped": self.skipped,
            "stopped": self.stopped,
        }
        rewards = self.series("reward")
        jsonsafe.finite_or_undefined(
            out,
            "mean_reward",
            sum(rewards) / len(rewards) if rewards else None,
            "no reward logged (not an RL stage, or skipped)",
        )
        return jsonsafe.check_finite(out, f"{self.name} stage result")


def skipped_stage(name: str, reason: str, config: Mapping[str, Any]) -> StageResult:
    return StageResult(name, None, 0, 0.0, 0, 0, (), dict(config), reason)


def finished_stage(
    name: str,
    trainer: Any,
    work_dir: Path,
    *,
    started: float,
    examples: int,
    config: Mapping[str, Any],
    stopped: str | None = None,
) -> StageResult:
    """Save a trained stage's LoRA adapter to ``work_dir/adapter`` and describe the run (steps,
    wall time since ``started`` on ``time.perf_counter()``, tokens seen, per-step history)."""
    adapter_dir = work_dir / ADAPTER
    trainer.model.save_pretrained(adapter_dir)
    history = step_history(trainer.state.log_history)
    tokens = [row["num_tokens"] for row in history if "num_tokens" in row]
    return StageResult(
        name=name,
        adapter_dir=adapter_dir,
        steps=int(trainer.state.global_step),
        wall_seconds=time.perf_counter() - started,
        tokens_seen=int(tokens[-1]) if tokens else 0,
        examples=examples,
        history=history,
        config=dict(config),
        stopped=stopped,
    )


def step_history(log_history: Sequence[Mapping[str, Any]]) -> tuple[JsonObject, ...]:
    """The per-step rows of a trainer's ``state.log_history`` (the final summary row, which
    has ``train_runtime``, left out), numbers only; a non-finite value (a NaN loss) is dropped
    from its row and named under ``undefined`` instead of leaking into JSON."""
    rows = []
    for entry in log_history:
        if "train_runtime" in entry or "step" not in entry:
            continue
        row: JsonObject = {}
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(float(value)):
                row[key] = float(value)
            else:
                row.setdefault("undefined", {})[key] = f"the trainer logged {value}"
        rows.append(row)
    return tuple(rows)


def _source(base_model: str, cache_dir: str | Path | None) -> str:
    from ragtrail.llm.backends.model_store import resolve_model_source
    from ragtrail.models.store import cache_root

    source, _ = resolve_model_source(base_model, cache_root(cache_dir))
    return str(source)


def load_tokenizer(base_model: str, *, cache_dir: str | Path | None = None) -> Any:
    """The base model's tokenizer (resolved as :func:`load_trainable` does), with a pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(_source(base_model, cache_dir))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_trainable(
    base_model: str, *, cache_dir: str | Path | None = None, merge: Path | None = None
) -> tuple[Any, Any]:
    """The base model (float32) and its tokenizer, resolved like the transformers backend resolves
    specs (path, HF id, ``s3://``, ``builtin:``), with a pad token. ``merge`` (an earlier stage's
    LoRA adapter) is merged into the weights: a fresh adapter trained on top then has exactly
    that model as its reference when disabled."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        _source(base_model, cache_dir), dtype=torch.float32
    )
    if merge is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(merge)).merge_and_unload()
    return model, load_tokenizer(base_model, cache_dir=cache_dir)


def sample_completions(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    *,
    temperature: float,
    max_new_tokens: int,
    end_ids: Sequence[int],
    pad_id: int,
    seed: int,
) -> list[tuple[list[int], bool]]:
    """One sampled completion per (left-padded) row, as an RL stage samples them: ``temperature``
    over the full vocabulary (no top-k / top-p cut), seeded, ending at any of ``end_ids``. Each
    completion's tokens up to and including its end token, and whether it was cut off (no end
    token within ``max_new_tokens``)."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            do_sample=True,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            eos_token_id=list(end_ids),
            pad_token_id=pad_id,
        )
    ends = set(end_ids)
    completions = []
    for row in out[:, input_ids.shape[1] :].tolist():
        stop = next((i for i, t in enumerate(row) if t in ends), None)
        completions.append((row, True) if stop is None else (row[: stop + 1], False))
    return completions


def end_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Tokens that end a completion: the tokenizer's end of sequence and whatever the model's
    generation config ends on (e.g. the chat template's end of turn)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif isinstance(configured, list | tuple):
        ids.update(int(i) for i in configured)
    if not ids:
        raise ValueError("the model has no end-of-sequence token: completions could never end")
    return sorted(ids)


def lora_config(model: Any, *, r: int, alpha: float, dropout: float = 0.0) -> Any:
    """A fresh causal-LM LoRA on the architecture's default targets (attention q and v)."""
    from peft import LoraConfig

    from ragtrail.train.lora import resolve_target_modules

    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=resolve_target_modules(model, None),
        task_type="CAUSAL_LM",
    )


def without_printing(trainer: Any) -> Any:
    """``trainer`` without transformers' PrinterCallback, which prints every log row to stdout
    when progress bars are off: a command's ``--json`` output must stay JSON. The rows still
    reach ``trainer.state.log_history`` (the stage's history)."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer


def trainer_arguments(config: CitationTrainingConfig, work_dir: Path) -> dict[str, Any]:
    """Arguments every stage passes to its TRL config: seeded, one log row per step, nothing
    saved or reported by the trainer itself, CPU unless a GPU is there (bf16 and gradient
    checkpointing only on a GPU)."""
    import torch

    on_gpu = torch.cuda.is_available()
    return {
        "output_dir": str(work_dir),
        "seed": config.seed,
        "data_seed": config.seed,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": not on_gpu,
        "bf16": on_gpu and torch.cuda.is_bf16_supported(),
        # TRL turns it on by default; it saves GPU memory but also turns off the KV cache when
        # RL trainers generate, which makes CPU rollouts several times slower
        "gradient_checkpointing": on_gpu,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "lr_scheduler_type": "constant",
    }
