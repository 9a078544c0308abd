"""Fine-tune a cross-encoder judge on labelled pairs, split by query, threshold tuned on training.

The labelled pairs (:class:`LabelledPair`) are split by their ``group`` (the query they belong
to): a group's side is decided by a seeded hash of the group alone, so no query sits on both
sides, and adding labels later never moves an existing query from one side to the other (a new
challenger's held-out part contains the champion's, and none of the champion's training
queries). The training side is split the same way again into a part the model is fitted on and a
part (``tune_fraction``) a two-category judge's decision threshold is tuned on (the threshold
with the best balanced accuracy there), so neither the fit nor the threshold ever sees a
held-out query.

Training uses sentence-transformers' ``CrossEncoderTrainer`` with cross-entropy over the kind's
categories (AdamW, linear decay after a warm-up, seeded shuffling); the result is a trained-judge
directory (:mod:`ragtrail.judges.trained`) and a :class:`JudgeTraining` record.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragtrail.embed.embedder import resolve_model_ref
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.trained import (
    MODEL_SUBDIR,
    JudgeSettingsFile,
    LabelledPair,
    TrainedKind,
    load_trained_judge,
)

log = logging.getLogger(__name__)

DEFAULT_BASE = "builtin:all-MiniLM-L6-v2"
"""The bundled MiniLM: its encoder initialises the cross-encoder (the classifier head is new)."""


@dataclass(frozen=True)
class JudgeTrainingConfig:
    """How a judge is trained; every field is part of its lineage."""

    base_model: str = DEFAULT_BASE
    epochs: int = 3
    batch_size: int = 16
    learning_rate: float = 5e-5
    warmup: float = 0.1
    max_length: int = 256
    seed: int = 13
    held_out_fraction: float = 0.5
    tune_fraction: float = 0.2

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.max_length < 16:
            raise ValueError("epochs and batch_size must be >= 1 and max_length >= 16")
        for name in ("held_out_fraction", "tune_fraction"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ValueError(f"{name} must lie strictly between 0 and 1")

    def as_dict(self) -> JsonObject:
        return {
            "base_model": self.base_model,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "warmup": self.warmup,
            "max_length": self.max_length,
            "seed": self.seed,
            "held_out_fraction": self.held_out_fraction,
            "tune_fraction": self.tune_fraction,
        }


# ------------------------------------------------------------------------------------ splits


def group_draw(group: str, seed: int, salt: str) -> float:
    """A number in [0, 1) fixed by (seed, salt, group): where the group falls in a split."""
    digest = hashlib.sha256(f"{seed}\0{salt}\0{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_by_group(
    pairs: Sequence[LabelledPair], fraction: float, seed: int, *, salt: str = "held-out"
) -> tuple[list[LabelledPair], list[LabelledPair]]:
    """``(rest, part)``: every group whose draw falls below ``fraction`` goes to ``part``.

    A ValueError when either side would be empty (too few queries to split)."""
    rest = [p for p in pairs if group_draw(p.group, seed, salt) >= fraction]
    part = [p for p in pairs if group_draw(p.group, seed, salt) < fraction]
    if not rest or not part:
        groups = len({p.group for p in pairs})
        raise ValueError(
            f"{len(pairs)} labelled pairs in {groups} queries cannot be split {salt} at "
            f"{fraction:.0%} with both sides non-empty: label more queries"
        )
    return rest, part


@dataclass(frozen=True)
class Split:
    """The three parts of the labelled pairs, by query."""

    fit: list[LabelledPair]
    tune: list[LabelledPair]
    held_out: list[LabelledPair]

    @property
    def train(self) -> list[LabelledPair]:
        """Everything a judge may learn from (its fit and tuning parts)."""
        return [*self.fit, *self.tune]

    def summary(self) -> JsonObject:
        return {
            "by": "query",
            **{
                name: {
                    "pairs": len(part),
                    "queries": len({p.group for p in part}),
                    "queries_digest": groups_digest(part),
                }
                for name, part in (
                    ("fit", self.fit),
                    ("tune", self.tune),
                    ("held_out", self.held_out),
                )
            },
        }


def groups_digest(pairs: Sequence[LabelledPair]) -> str:
    """A short digest of the set of queries in ``pairs`` (two splits agree when it does)."""
    joined = "\n".join(sorted({p.group for p in pairs}))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:16]


def split_pairs(pairs: Sequence[LabelledPair], config: JudgeTrainingConfig, *, tune: bool) -> Split:
    """Held-out by query, then (when ``tune``) a tuning part of the training side by query."""
    train, held_out = split_by_group(pairs, config.held_out_fraction, config.seed)
    if not tune:
        return Split(fit=train, tune=[], held_out=held_out)
    fit, tuning = split_by_group(train, config.tune_fraction, config.seed, salt="tune")
    return Split(fit=fit, tune=tuning, held_out=held_out)


# --------------------------------------------------------------------------------- threshold


def balanced_accuracy(labels: Sequence[bool], decisions: Sequence[bool]) -> float:
    """Mean of the recall of each class present in ``labels``."""
    y = np.asarray(labels, dtype=bool)
    d = np.asarray(decisions, dtype=bool)
    recalls = [float(np.mean(d[y == cls] == cls)) for cls in (True, False) if np.any(y == cls)]
    return float(np.mean(recalls))


def tune_threshold(probabilities: Sequence[float], positive: Sequence[bool]) -> float:
    """The threshold in 0.01 steps with the best balanced accuracy (ties: the one nearest 0.5)."""
    p = np.asarray(probabilities, dtype=np.float64)
    candidates = np.round(np.arange(0.01, 1.0, 0.01), 2)
    scored = [(balanced_accuracy(positive, p >= t), -abs(t - 0.5), float(t)) for t in candidates]
    return max(scored)[2]


# ---------------------------------------------------------------------------------- training


@dataclass(frozen=True)
class JudgeTraining:
    """What a training run produced and how it went."""

    kind: str
    threshold: float | None
    tuned_balanced_accuracy: float | None
    pairs_fitted: int
    seconds: float
    loss_first: float | None
    loss_last: float | None
    library_versions: dict[str, str] = field(default_factory=dict)

    @property
    def pairs_per_second(self) -> float:
        """Training pairs processed per second over all epochs (fit only, not tuning)."""
        return self.pairs_fitted / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> JsonObject:
        return {
            "kind": self.kind,
            "threshold": self.threshold,
            "tuned_balanced_accuracy": self.tuned_balanced_accuracy,
            "pairs_fitted": self.pairs_fitted,
            "seconds": round(self.seconds, 2),
            "pairs_per_second": round(self.pairs_per_second, 2),
            "loss_first": self.loss_first,
            "loss_last": self.loss_last,
            "library_versions": dict(self.library_versions),
        }


def _labels_of(kind: TrainedKind, pairs: Sequence[LabelledPair]) -> list[int]:
    unknown = sorted({p.label for p in pairs} - set(kind.categories))
    if unknown:
        raise ValueError(f"labels {unknown} are not {kind.kind} categories {kind.categories}")
    return [kind.categories.index(p.label) for p in pairs]


def train_cross_encoder(
    kind: TrainedKind,
    split: Split,
    config: JudgeTrainingConfig,
    out_dir: Path | str,
    *,
    device: str = "cpu",
    cache_dir: Path | None = None,
    s3_endpoint_url: str | None = None,
) -> JudgeTraining:
    """Fit a cross-encoder on ``split.fit``, tune its threshold on ``split.tune`` (two-category
    kinds) and save the judge into ``out_dir`` (``model/`` and ``judge.json``)."""
    import sentence_transformers
    import torch
    import transformers
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import CrossEntropyLoss
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    if len({p.label for p in split.fit}) < 2:
        raise ValueError(
            f"the fit part has one label only ({split.fit[0].label}): nothing to learn"
        )
    out = Path(out_dir)
    target, _ = resolve_model_ref(
        config.base_model, cache_dir=cache_dir, s3_endpoint_url=s3_endpoint_url
    )
    torch.manual_seed(config.seed)
    id2label = dict(enumerate(kind.categories))
    model = CrossEncoder(
        target,
        num_labels=len(kind.categories),
        max_length=config.max_length,
        device=device,
        config_kwargs={"id2label": id2label, "label2id": {v: k for k, v in id2label.items()}},
    )
    dataset = Dataset.from_dict(
        {
            "first": [p.first for p in split.fit],
            "second": [p.second for p in split.fit],
            "label": _labels_of(kind, split.fit),
        }
    )
    steps = -(-len(split.fit) // config.batch_size) * config.epochs
    with tempfile.TemporaryDirectory(prefix="ragtrail-judge-train-") as scratch:
        args = CrossEncoderTrainingArguments(
            output_dir=scratch,
            num_train_epochs=config.epochs,
            per_device_train_batch_size=config.batch_size,
            learning_rate=config.learning_rate,
            warmup_steps=max(1, round(config.warmup * steps)),
            seed=config.seed,
            data_seed=config.seed,
            save_strategy="no",
            report_to="none",
            logging_steps=max(1, steps // 20),
            use_cpu=device == "cpu",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = CrossEncoderTrainer(
            model=model, args=args, train_dataset=dataset, loss=CrossEntropyLoss(model)
        )
        for callback in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(callback)
        started = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the CLI's JSON
            trainer.train()
        seconds = time.perf_counter() - started
        losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    model.save_pretrained(str(out / MODEL_SUBDIR))

    threshold = tuned = None
    settings = JudgeSettingsFile(kind.kind, None, config.max_length, config.base_model)
    if kind.positive is not None:
        settings = _with_threshold(settings, 0.5)
        settings.write(out)
        judge = load_trained_judge(out, model_ref=str(out), device=device)
        index = kind.categories.index(kind.positive)
        probs = judge.probabilities([p.judge_input(kind) for p in split.tune])[:, index]
        positive = [p.label == kind.positive for p in split.tune]
        threshold = tune_threshold(probs, positive)
        tuned = balanced_accuracy(positive, probs >= threshold)
        settings = _with_threshold(settings, threshold)
    settings.write(out)
    log.info(
        "trained %s judge on %d pairs in %.0f s (loss %s -> %s, threshold %s)",
        kind.kind,
        len(split.fit),
        seconds,
        losses[0] if losses else None,
        losses[-1] if losses else None,
        threshold,
    )
    return JudgeTraining(
        kind=kind.kind,
        threshold=threshold,
        tuned_balanced_accuracy=tuned,
        pairs_fitted=len(split.fit) * config.epochs,
        seconds=seconds,
        loss_first=float(losses[0]) if losses else None,
        loss_last=float(losses[-1]) if losses else None,
        library_versions={
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
        },
    )


def _with_threshold(settings: JudgeSettingsFile, threshold: float) -> JudgeSettingsFile:
    return JudgeSettingsFile(settings.kind, threshold, settings.max_length, settings.base_model)


__all__ = [
    "DEFAULT_BASE",
    "JudgeTraining",
    "JudgeTrainingConfig",
    "Split",
    "balanced_accuracy",
    "group_draw",
    "split_by_group",
    "split_pairs",
    "train_cross_encoder",
    "tune_threshold",
]
