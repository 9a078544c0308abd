"""The settings of one generator fine-tuning run, as one typed, immutable value.

Kept free of torch so that a DAG or CLI can build and validate a config without loading the
training stack; :func:`ragtrail.train.generator.finetune_generator` takes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ragtrail.jsonsafe import JsonObject
from ragtrail.train.data import DEFAULT_HELD_OUT_FRACTION

ModelKind = Literal["seq2seq", "causal", "auto"]

ANSWER_TOKEN_INIT = " Answer:"
"""Text whose token embeddings, averaged, initialise a newly added ``<a>`` row."""


@dataclass(frozen=True)
class GeneratorTrainingConfig:
    """Model kind, LoRA shape, optimisation, sequence lengths, split and samples of one run.

    ``kind``: ``"seq2seq"``, ``"causal"`` or ``"auto"`` (whatever the base model is); a base model
    of the other kind is refused. ``target_modules``: ``None`` (the per-architecture default:
    attention query and value), ``"extended"`` (all attention and MLP projections),
    ``"all-linear"`` (PEFT's) or a list of module names. ``token_lr``: the learning rate of the
    ``<a>`` row, default ``10 * lr``. ``answer_token_init``: text whose embeddings initialise the
    ``<a>`` row (``None``: random resize init). ``n_samples``: greedy generations recorded in
    training.json and the model card.
    """

    kind: ModelKind = "auto"
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: Sequence[str] | str | None = None
    epochs: int = 3
    lr: float = 3e-4
    token_lr: float | None = None
    answer_token_init: str | None = ANSWER_TOKEN_INIT
    batch_size: int = 8
    max_steps: int | None = None
    seed: int = 0
    max_source_len: int = 384
    max_target_len: int = 96
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    n_samples: int = 4

    def __post_init__(self) -> None:
        if (
            self.batch_size < 1
            or self.epochs < 1
            or (self.max_steps is not None and self.max_steps < 1)
        ):
            raise ValueError("batch_size, epochs and max_steps must be >= 1")
        if self.kind not in ("seq2seq", "causal", "auto"):
            raise ValueError(f"kind must be 'seq2seq', 'causal' or 'auto', got {self.kind!r}")
        if self.target_modules is not None and not isinstance(self.target_modules, str):
            object.__setattr__(self, "target_modules", tuple(self.target_modules))

    @property
    def effective_token_lr(self) -> float:
        """The ``<a>`` row's learning rate: ``token_lr``, or ten times ``lr``.

        It is one row that starts from scratch; at the LoRA rate it would barely move in a short
        run.
        """
        return self.token_lr if self.token_lr is not None else 10 * self.lr

    def hyperparameters(self, target_modules: list[str] | str) -> JsonObject:
        """The hyper-parameters as recorded in training.json, with the resolved LoRA targets."""
        return {
            "lora_r": self.lora_r,
            "lora_alpha": self.lora_alpha,
            "lora_dropout": self.lora_dropout,
            "target_modules": target_modules,
            "epochs": self.epochs,
            "lr": self.lr,
            "token_lr": self.effective_token_lr,
            "answer_token_init": self.answer_token_init,
            "batch_size": self.batch_size,
            "max_steps": self.max_steps,
            "seed": self.seed,
            "max_source_len": self.max_source_len,
            "max_target_len": self.max_target_len,
            "held_out_fraction": self.held_out_fraction,
            "weight_decay": self.weight_decay,
            "max_grad_norm": self.max_grad_norm,
            "optimizer": "AdamW, constant learning rate",
        }
