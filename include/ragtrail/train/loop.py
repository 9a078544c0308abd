"""The training loop: plain AdamW over seeded epoch shuffles.

Why a hand-written loop: it is short, has no hidden state (no accelerate / Trainer defaults that
change between releases) and is exactly reproducible with a seed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from ragtrail.train.config import GeneratorTrainingConfig
from ragtrail.train.encoding import collate

log = logging.getLogger(__name__)


def _batches(n: int, batch_size: int, generator: torch.Generator) -> list[list[int]]:
    order = torch.randperm(n, generator=generator).tolist()
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def train_loop(
    model: Any,
    encoded: Sequence[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    seq2seq: bool,
    config: GeneratorTrainingConfig,
) -> list[float]:
    """Plain AdamW loop over seeded epoch shuffles; returns the loss of every step."""
    if not encoded:
        raise ValueError("the split left no training examples")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    token_params = [p for n, p in named if "trainable_tokens_delta" in n]
    lora_params = [p for n, p in named if "trainable_tokens_delta" not in n]
    params = [p for _, p in named]
    groups = [
        {"params": lora_params, "lr": config.lr},
        {"params": token_params, "lr": config.effective_token_lr, "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        [g for g in groups if g["params"]], lr=config.lr, weight_decay=config.weight_decay
    )
    order_rng = torch.Generator().manual_seed(config.seed)
    limit = config.max_steps if config.max_steps is not None else math.inf
    losses: list[float] = []
    model.train()
    for _epoch in range(config.epochs):
        for idx in _batches(len(encoded), config.batch_size, order_rng):
            if len(losses) >= limit:
                break
            batch = collate([encoded[i] for i in idx], pad_id=pad_id, seq2seq=seq2seq)
            loss = model(**batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            losses.append(float(loss.detach()))
            if len(losses) % 10 == 0:
                log.info("step %d: loss %.4f", len(losses), losses[-1])
    model.eval()
    return losses
