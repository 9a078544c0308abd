"""How a trained generator is checked: held-out loss and a few recorded greedy generations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ragtrail.jsonsafe import JsonObject
from ragtrail.train.backend import FineTunedGeneratorBackend
from ragtrail.train.data import TrainingExample, parse_generation
from ragtrail.train.encoding import IGNORE_INDEX, PromptFormat, collate


@torch.no_grad()
def eval_loss(
    model: Any,
    encoded: Sequence[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    seq2seq: bool,
    bs: int,
) -> float | None:
    """Token-weighted mean loss over the held-out examples (``None`` if there are none)."""
    if not encoded:
        return None
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for i in range(0, len(encoded), bs):
        batch = collate(encoded[i : i + bs], pad_id=pad_id, seq2seq=seq2seq)
        # Causal models predict token t+1 from t: the first label position is never scored.
        labels = batch["labels"] if seq2seq else batch["labels"][:, 1:]
        n = int((labels != IGNORE_INDEX).sum())
        total += float(model(**batch).loss) * n
        tokens += n
    model.train(was_training)
    return total / tokens if tokens else None


def sample_generations(
    model: Any,
    tokenizer: Any,
    fmt: PromptFormat,
    examples: Sequence[TrainingExample],
    *,
    seq2seq: bool,
) -> list[JsonObject]:
    """Greedy generations of the in-memory model for a few inputs (recorded in training.json)."""
    if not examples:
        return []
    from ragtrail.llm.backends.base import GenerationRequest

    backend = FineTunedGeneratorBackend.from_loaded(
        model,
        tokenizer,
        is_encoder_decoder=seq2seq,
        prompt_format=fmt,
        model_id="in-memory",
    )
    requests = [
        GenerationRequest(
            messages=({"role": "user", "content": ex.input},), max_new_tokens=fmt.max_target_len
        )
        for ex in examples
    ]
    outputs = backend.generate(requests)
    return [
        {
            "input": ex.input,
            "target": ex.target,
            "generated": res.text if res.ok else f"<error: {res.error}>",
            "parsed": parse_generation(res.text) is not None,
        }
        for ex, res in zip(examples, outputs, strict=True)
    ]
