"""What a generator fine-tuning run returns."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ragtrail.jsonsafe import JsonObject


@dataclass
class FinetuneResult:
    """What a fine-tuning run produced (everything is also in ``out_dir/training.json``)."""

    out_dir: Path
    adapter_dir: Path
    tokenizer_dir: Path
    base_model: str
    kind: str
    data_version: str
    n_train: int
    n_held_out: int
    train_losses: list[float]
    eval_loss_before: float | None
    eval_loss_after: float | None
    trainable_params: int
    total_params: int
    steps: int
    seconds: float
    samples: list[JsonObject] = field(default_factory=list)

    @property
    def trainable_share(self) -> float:
        """Trainable parameters / all parameters (LoRA + ``<a>`` rows over base + adapter)."""
        return self.trainable_params / self.total_params if self.total_params else 0.0

    @property
    def train_loss_first(self) -> float:
        return self.train_losses[0] if self.train_losses else math.nan

    @property
    def train_loss_last(self) -> float:
        return self.train_losses[-1] if self.train_losses else math.nan
