"""LPO for the SEER evidence extractor: a lambda-weighted DPO loop over ranked evidence samples.

SEER (METHODS §10) ranks each query's deduplicated evidence samples by the combined expert score
``s`` and trains on every ordered pair ``(w, l)`` with ``s_w > s_l``, each pair's DPO loss
weighted by the MRR gain of swapping the two:
``lambda_wl = s_w * |1/r_w - 1/r_l| + s_l * |1/r_l - 1/r_w|`` (``r`` = rank by score, 1 best).

TRL 1.16's DPOTrainer has no per-pair weights (its collator drops extra columns and the loss is a
plain mean), so this is a small loop of its own:

- loss (:func:`lpo_loss`): ``z = beta * ((log pi(w) - log ref(w)) - (log pi(l) - log ref(l)))``,
  ``L = sum(lambda * -log sigmoid(z)) / sum(lambda)``; with all weights 1 it is DPO's mean;
- policy = the extractor with a fresh LoRA; reference = the same model with the adapter
  disabled (no second copy of the weights). An ``init_adapter`` (e.g. an SFT stage) is merged into
  the base first, so the reference is that model;
- log-probabilities are summed over the completion's tokens given the chat prompt, rendered and
  tokenised exactly as :mod:`ragtrail.llm.scoring` does (prompt cut from the left to fit);
- reference log-probabilities are computed once, before the first step (they never change);
- optimiser: AdamW on the LoRA parameters, linear warmup then cosine decay (:func:`warmup_cosine`),
  gradients clipped to ``max_grad_norm``; one optimiser step = ``grad_accum`` micro-batches of
  ``pairs_per_batch`` pairs, whose losses add up to the step's weighted mean exactly;
- float32 on CPU and on CUDA (used when available). Seeded: LoRA init by ``torch.manual_seed``,
  pair order by ``random.Random(seed)``; on CPU two runs give the same losses.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ragtrail.evaluate.evidence.ranking import preference_pairs
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.backends.base import Message, _freeze_messages
from ragtrail.llm.scoring import EncodedContinuation, continuation_log_probs, encode_continuation
from ragtrail.train.citation.stage import ADAPTER, StageResult, load_trainable, lora_config

if TYPE_CHECKING:
    import torch

Weighting = Literal["lambda", "uniform"]
TRAINER = "ragtrail LPO loop (weighted DPO, LoRA, reference = adapter disabled)"


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class PreferenceList:
    """One query's evidence samples and their combined expert scores.

    ``messages`` is the extractor's prompt, ``candidates`` the deduplicated evidence samples and
    ``scores`` their combined scores (same length, finite).
    """

    qid: str
    messages: tuple[Message, ...]
    candidates: tuple[str, ...]
    scores: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", _freeze_messages(self.messages))
        object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "scores", tuple(float(s) for s in self.scores))
        if len(self.candidates) != len(self.scores):
            raise ValueError(
                f"{self.qid}: {len(self.candidates)} candidates but {len(self.scores)} scores"
            )
        if not all(math.isfinite(s) for s in self.scores):
            raise ValueError(f"{self.qid}: scores must be finite")
        if any(not c for c in self.candidates):
            raise ValueError(f"{self.qid}: empty candidate")


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class LPOConfig:
    """Settings of one LPO run (defaults: SEER's, METHODS §10).

    ``max_steps`` 0 runs ``epochs`` passes over the pairs; above 0 it sets the number of optimiser
    steps (cycling through reshuffled epochs). ``max_grad_norm`` 0 turns clipping off.
    """

    beta: float = 0.1
    lr: float = 1e-5
    warmup_ratio: float = 0.015
    schedule: Literal["cosine"] = "cosine"
    pairs_per_batch: int = 16
    grad_accum: int = 2
    epochs: int = 2
    max_steps: int = 0
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    max_length: int = 1024
    seed: int = 0
    weighting: Weighting = "lambda"
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        checks = [
            (self.beta > 0, "beta must be > 0"),
            (self.lr > 0, "lr must be > 0"),
            (0 <= self.warmup_ratio < 1, "warmup_ratio must be in [0, 1)"),
            (self.schedule == "cosine", "schedule must be 'cosine'"),
            (self.pairs_per_batch >= 1, "pairs_per_batch must be >= 1"),
            (self.grad_accum >= 1, "grad_accum must be >= 1"),
            (self.epochs >= 1, "epochs must be >= 1"),
            (self.max_steps >= 0, "max_steps must be >= 0"),
            (self.lora_r >= 1, "lora_r must be >= 1"),
            (self.lora_alpha > 0, "lora_alpha must be > 0"),
            (0 <= self.lora_dropout < 1, "lora_dropout must be in [0, 1)"),
            (self.max_length >= 2, "max_length must be >= 2"),
            (self.weighting in ("lambda", "uniform"), "weighting must be 'lambda' or 'uniform'"),
            (self.max_grad_norm >= 0, "max_grad_norm must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def lpo_stage_config(config: LPOConfig) -> dict[str, object]:
    """The parameters of the LPO stage, as recorded in lineage."""
    return {
        "trainer": TRAINER,
        "loss": "sum(w * -logsigmoid(beta * (dlogp_w - dlogp_l))) / sum(w)",
        "weighting": config.weighting,
        "beta": config.beta,
        "lr": config.lr,
        "lr_schedule": f"linear warmup ({config.warmup_ratio:g} of steps) then {config.schedule}",
        "warmup_ratio": config.warmup_ratio,
        "pairs_per_batch": config.pairs_per_batch,
        "grad_accum": config.grad_accum,
        "epochs": config.epochs,
        "max_steps": config.max_steps,
        "max_grad_norm": config.max_grad_norm,
        "lora_r": config.lora_r,
        "lora_alpha": config.lora_alpha,
        "lora_dropout": config.lora_dropout,
        "max_length": config.max_length,
        "seed": config.seed,
    }


# --------------------------------------------------------------------------- loss, schedule


def lpo_loss(
    policy_w: torch.Tensor,
    policy_l: torch.Tensor,
    ref_w: torch.Tensor,
    ref_l: torch.Tensor,
    weights: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """Weighted DPO loss of a batch of pairs (1-D tensors of summed log-probabilities).

    ``z_i = beta * ((policy_w - ref_w) - (policy_l - ref_l))``;
    ``loss = sum_i(weights_i * -log sigmoid(z_i)) / sum_i(weights_i)``.
    """
    import torch.nn.functional as F

    shapes = {tuple(t.shape) for t in (policy_w, policy_l, ref_w, ref_l, weights)}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"lpo_loss needs five 1-D tensors of one shape, got {sorted(shapes)}")
    if bool((weights < 0).any()):
        raise ValueError("lpo_loss weights must be >= 0")
    total = weights.sum()
    if float(total) <= 0:
        raise ValueError("lpo_loss weights sum to 0: no pair carries any weight")
    logits = beta * ((policy_w - ref_w) - (policy_l - ref_l))
    return (weights * -F.logsigmoid(logits)).sum() / total


def warmup_cosine(total_steps: int, warmup_ratio: float) -> Callable[[int], float]:
    """LR multiplier of optimiser step ``k`` (0-based) for ``LambdaLR``.

    ``W = ceil(warmup_ratio * total_steps)`` warmup steps rise linearly, ``(k + 1) / W``, to the
    full rate at step ``W - 1``; then ``0.5 * (1 + cos(pi * (k - W) / (total_steps - W)))``
    decays from 1 towards 0 (reached one step after the last), so no step runs at rate 0.
    """
    warmup = math.ceil(warmup_ratio * total_steps)

    def factor(k: int) -> float:
        if k < warmup:
            return (k + 1) / warmup
        progress = (k - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


# --------------------------------------------------------------------------- log-probabilities


def _pad_id(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = tokenizer.eos_token_id
    return int(pad) if pad is not None else 0


def completion_logps(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Sequence[Message]],
    completions: Sequence[str],
    *,
    max_length: int,
) -> torch.Tensor:
    """Summed log-probability of each completion as the reply to its chat prompt, in one padded
    batch; differentiable (grad follows the caller's mode). Prompts are cut from the left to fit
    ``max_length`` (see :mod:`ragtrail.llm.scoring`)."""
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    encoded = [
        encode_continuation(tokenizer, p, c, max_length=max_length)
        for p, c in zip(prompts, completions, strict=True)
    ]
    return continuation_log_probs(model, encoded, _pad_id(tokenizer))


def _encode_lists(
    tokenizer: Any, lists: Sequence[PreferenceList], max_length: int
) -> list[list[EncodedContinuation]]:
    return [
        [
            encode_continuation(tokenizer, pl.messages, c, max_length=max_length)
            for c in pl.candidates
        ]
        for pl in lists
    ]


def _logps_no_grad(
    model: Any, encoded: list[list[EncodedContinuation]], pad_id: int, batch: int
) -> list[list[float]]:
    """Log-probabilities of every candidate of every list, in eval mode without grad."""
    import torch

    flat = [(i, j) for i, cands in enumerate(encoded) for j in range(len(cands))]
    out = [[0.0] * len(cands) for cands in encoded]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(flat), batch):
                chunk = flat[start : start + batch]
                values = continuation_log_probs(model, [encoded[i][j] for i, j in chunk], pad_id)
                for (i, j), v in zip(chunk, values.tolist(), strict=True):
                    out[i][j] = float(v)
    finally:
        model.train(was_training)
    return out


def preference_margin(
    model: Any,
    tokenizer: Any,
    lists: Sequence[PreferenceList],
    *,
    beta: float,
    max_length: int,
    weighting: Weighting = "uniform",
) -> float:
    """Mean over all pairs of ``beta * (log p(w) - log p(l))`` under ``model`` as given.

    The plain log-probability margin, with no reference: it can be measured on a base model and
    on the same model with a trained adapter, and the change between the two is the mean DPO
    logit ``beta * ((pi_w - ref_w) - (pi_l - ref_l))`` when the reference is that base. Pass
    ``beta=1`` for the margin in nats. Every pair counts once (``weighting="uniform"``) unless
    ``"lambda"`` asks for the lambda-weighted mean.
    """
    encoded = _encode_lists(tokenizer, lists, max_length)
    logps = _logps_no_grad(model, encoded, _pad_id(tokenizer), batch=16)
    total = weight_sum = 0.0
    for pl, lp in zip(lists, logps, strict=True):
        for pair in preference_pairs(pl.scores, weighting=weighting):
            total += pair.weight * beta * (lp[pair.winner] - lp[pair.loser])
            weight_sum += pair.weight
    if weight_sum <= 0:
        raise ValueError("no preference pairs: every list has equal scores or one candidate")
    return total / weight_sum


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class _TrainPair:
    """One training pair: its list, winner and loser candidate indices, weight, reference."""

    list_index: int
    winner: int
    loser: int
    weight: float
    ref_w: float
    ref_l: float


def _step_plan(n_pairs: int, config: LPOConfig) -> list[list[int]]:
    """Pair indices of every optimiser step: epochs reshuffled by ``random.Random(seed)``, each
    cut into steps of ``pairs_per_batch * grad_accum`` (an epoch's last step may be short);
    ``max_steps`` > 0 cuts or extends the plan to that many steps."""
    rng = random.Random(config.seed)
    per_step = config.pairs_per_batch * config.grad_accum
    total = config.max_steps or config.epochs * math.ceil(n_pairs / per_step)
    plan: list[list[int]] = []
    while len(plan) < total:
        order = list(range(n_pairs))
        rng.shuffle(order)
        for start in range(0, n_pairs, per_step):
            plan.append(order[start : start + per_step])
            if len(plan) == total:
                break
    return plan


def train_lpo(
    base_model: str,
    lists: Sequence[PreferenceList],
    config: LPOConfig,
    work_dir: Path,
    *,
    init_adapter: Path | None = None,
    cache_dir: str | Path | None = None,
) -> StageResult:
    """Train a LoRA with LPO on the pairs of ``lists``; save it to ``work_dir/adapter``.

    ``init_adapter`` is merged into ``base_model`` first (the reference is then that model).
    The history has one row per optimiser step: ``step``, ``loss`` (the step's weighted loss),
    ``margin`` (mean over its pairs of the reward margin ``z / beta``), ``weighted_margin`` (the
    same, weighted), ``lr`` (the rate the step used) and ``pairs``. ``tokens_seen`` counts the
    non-pad tokens of every sequence run with grad (the reference pass is not counted);
    ``examples`` is the number of pairs.
    """
    import torch
    from peft import get_peft_model

    started = time.perf_counter()
    candidates = [
        (i, p)
        for i, pl in enumerate(lists)
        for p in preference_pairs(pl.scores, weighting=config.weighting)
    ]
    candidates = [(i, p) for i, p in candidates if p.weight > 0]
    if not candidates:
        raise ValueError(
            f"no preference pairs with weight > 0 in {len(lists)} lists: LPO needs lists with at "
            "least two candidates of different scores"
        )
    torch.manual_seed(config.seed)
    model, tokenizer = load_trainable(base_model, cache_dir=cache_dir, merge=init_adapter)
    model = get_peft_model(
        model,
        lora_config(model, r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout),
    )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    pad_id = _pad_id(tokenizer)

    encoded = _encode_lists(tokenizer, lists, config.max_length)
    with model.disable_adapter():
        ref = _logps_no_grad(model, encoded, pad_id, batch=2 * config.pairs_per_batch)
    pairs = [
        _TrainPair(i, p.winner, p.loser, p.weight, ref[i][p.winner], ref[i][p.loser])
        for i, p in candidates
    ]

    plan = _step_plan(len(pairs), config)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(len(plan), config.warmup_ratio)
    )
    model.train()
    history: list[JsonObject] = []
    tokens_seen = 0
    for step, step_pairs in enumerate(plan, start=1):
        batch = [pairs[k] for k in step_pairs]
        step_weight = sum(p.weight for p in batch)
        lr = float(scheduler.get_last_lr()[0])
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        margins: list[float] = []
        for start in range(0, len(batch), config.pairs_per_batch):
            micro = batch[start : start + config.pairs_per_batch]
            seqs = [encoded[p.list_index][p.winner] for p in micro]
            seqs += [encoded[p.list_index][p.loser] for p in micro]
            tokens_seen += sum(len(s.ids) for s in seqs)
            logps = continuation_log_probs(model, seqs, pad_id)
            policy_w, policy_l = logps[: len(micro)], logps[len(micro) :]
            ref_w = torch.tensor([p.ref_w for p in micro], device=device)
            ref_l = torch.tensor([p.ref_l for p in micro], device=device)
            weights = torch.tensor([p.weight for p in micro], device=device)
            share = float(weights.sum()) / step_weight
            loss = lpo_loss(policy_w, policy_l, ref_w, ref_l, weights, config.beta) * share
            if not torch.isfinite(loss):
                raise RuntimeError(f"LPO step {step}: the loss is {float(loss)}")
            loss.backward()
            loss_sum += float(loss.detach())
            margins += ((policy_w - ref_w) - (policy_l - ref_l)).detach().tolist()
        if config.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        step_weights = [p.weight for p in batch]
        history.append(
            {
                "step": step,
                "loss": loss_sum,
                "margin": sum(margins) / len(margins),
                "weighted_margin": sum(w * m for w, m in zip(step_weights, margins, strict=True))
                / step_weight,
                "lr": lr,
                "pairs": len(batch),
            }
        )

    adapter_dir = work_dir / ADAPTER
    model.save_pretrained(adapter_dir)
    return StageResult(
        name="lpo",
        adapter_dir=adapter_dir,
        steps=len(plan),
        wall_seconds=time.perf_counter() - started,
        tokens_seen=tokens_seen,
        examples=len(pairs),
        history=tuple(history),
        config=lpo_stage_config(config),
    )
