"""The records of a run: ``training.json`` (for machines) and ``model_card.md`` (for people)."""

from __future__ import annotations

import platform
from datetime import UTC, datetime

import torch

from ragtrail.jsonsafe import JsonObject
from ragtrail.train.config import GeneratorTrainingConfig
from ragtrail.train.data import ANSWER_TOKEN
from ragtrail.train.encoding import PromptFormat
from ragtrail.train.result import FinetuneResult


def _library_versions() -> dict[str, str]:
    import peft
    import tokenizers
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "tokenizers": tokenizers.__version__,
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def training_record(
    result: FinetuneResult,
    config: GeneratorTrainingConfig,
    target_modules: list[str] | str,
    fmt: PromptFormat,
    resolved_base: str,
    total_seconds: float,
) -> JsonObject:
    """The content of ``training.json``: inputs, hyper-parameters, losses, versions, samples."""
    return {
        "format_version": 1,
        "task": "ragtrail.generator",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "base_model": result.base_model,
        "base_model_id": resolved_base,
        "kind": result.kind,
        "answer_token": ANSWER_TOKEN,
        "input_format": "<<{label}>> {context}",
        "target_format": "<<{label}>> {question} <a> {answer}",
        "prompt_format": fmt.to_json(),
        "data_version": result.data_version,
        "n_train": result.n_train,
        "n_held_out": result.n_held_out,
        "hyperparameters": config.hyperparameters(target_modules),
        "steps": result.steps,
        "train_losses": [_round(x) for x in result.train_losses],
        "train_loss_first": _round(result.train_loss_first),
        "train_loss_last": _round(result.train_loss_last),
        "eval_loss_before": _round(result.eval_loss_before),
        "eval_loss_after": _round(result.eval_loss_after),
        "trainable_params": result.trainable_params,
        "total_params": result.total_params,
        "trainable_share": round(result.trainable_share, 6),
        "train_seconds": round(result.seconds, 3),
        "total_seconds": round(total_seconds, 3),
        "library_versions": _library_versions(),
        "samples": result.samples,
    }


def _fmt_loss(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def model_card(record: JsonObject) -> str:
    """A human-readable summary of ``training.json``."""
    hp = record["hyperparameters"]
    lines = [
        "# ragtrail QA generator (LoRA)",
        "",
        f"Fine-tuned from `{record['base_model']}` ({record['kind']}) to write one question of a",
        "requested type about a context, in the format of METHODS §4:",
        "",
        f"- input: `{record['input_format']}`",
        f"- output: `{record['target_format']}` (`{record['answer_token']}` is an added token)",
        "",
        "## Training",
        "",
        "| | |",
        "|---|---|",
        f"| data version | `{record['data_version']}` |",
        f"| examples (train / held-out) | {record['n_train']} / {record['n_held_out']} |",
        f"| LoRA | r={hp['lora_r']}, alpha={hp['lora_alpha']}, dropout={hp['lora_dropout']}, "
        f"targets={hp['target_modules']} |",
        f"| trainable parameters | {record['trainable_params']:,} of {record['total_params']:,} "
        f"({100 * record['trainable_share']:.2f}%) |",
        f"| optimisation | {hp['optimizer']}, lr={hp['lr']} (`<a>` row: {hp['token_lr']}), "
        f"batch={hp['batch_size']}, "
        f"epochs={hp['epochs']}, max_steps={hp['max_steps']}, seed={hp['seed']} |",
        f"| steps / train seconds | {record['steps']} / {record['train_seconds']:.1f} |",
        f"| train loss first → last | {_fmt_loss(record['train_loss_first'])} → "
        f"{_fmt_loss(record['train_loss_last'])} |",
        f"| held-out loss before → after | {_fmt_loss(record['eval_loss_before'])} → "
        f"{_fmt_loss(record['eval_loss_after'])} |",
        f"| prompt | {record['prompt_format']} |",
        f"| libraries | {', '.join(f'{k} {v}' for k, v in record['library_versions'].items())} |",
        "",
        "## Usage",
        "",
        "```python",
        "from ragtrail.train import FineTunedGeneratorBackend, generator_request, parse_generation",
        "backend = FineTunedGeneratorBackend('<this directory or its s3:// URI>')",
        "[out] = backend.generate([generator_request('fact_single', context)])",
        "label, question, answer = parse_generation(out.text)",
        "```",
    ]
    if record["samples"]:
        lines += ["", "## Sample generations (greedy)", ""]
        for s in record["samples"]:
            shown = s["input"] if len(s["input"]) <= 160 else s["input"][:157] + "..."
            lines += [
                f"- input: `{shown}`",
                f"  - generated: `{s['generated']}`",
                f"  - reference: `{s['target']}`",
            ]
    return "\n".join(lines) + "\n"
