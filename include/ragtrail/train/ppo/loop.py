"""PPO with LoRA for a causal LM and a reward *function*, in one readable loop.

TRL 1.13+ ships no PPO trainer, and the last one (1.12) wants a reward *model*; this loop takes
any scoring function. Each iteration (``steps`` of them):

1. **rollout**: ``prompts_per_step`` prompts (a seeded reshuffle of all prompts, cycled) are
   rendered with the chat template, cut from the left to ``max_prompt_length``, left-padded,
   and the policy samples one completion each (``temperature``, no top-k / top-p cut, up to
   ``max_new_tokens``; it stops at an end-of-turn / end-of-sequence token). A completion with no
   end token was **cut off**, and the scoring function is told so;
2. **scoring**: ``score(prompt_indices, texts, cut_off)`` returns one reward and a status per
   completion; :class:`~ragtrail.train.reward_signal.RewardSpreadGuard` stops the loop when
   ``patience`` iterations in a row had no reward spread;
3. **old log-probs, reference log-probs, values** without grad: the policy, the policy with its
   adapter disabled (the reference: the SFT model, whose adapter was merged into the base
   first), and a value head (a linear layer, zero-initialised, on the policy's last hidden
   state: a shared backbone, so no second network is loaded);
4. **rewards and advantages** (:mod:`.objectives`): per-token KL penalty with the score at the
   last token, GAE (``gamma``, ``lam``), returns, whitened advantages;
5. **updates**: ``epochs`` passes over the rollout in seeded minibatches of ``minibatch_size``
   sequences: clipped surrogate + ``vf_coef`` x clipped value loss, AdamW on the LoRA and
   value-head parameters, gradients clipped to ``max_grad_norm``;
6. the KL controller is updated with the rollout's mean sequence KL (adaptive towards
   ``target_kl``, or fixed when it is None).

Log-probabilities are of the temperature-scaled distribution the completions were sampled
from. Dropout is off throughout (the model stays in eval mode; gradients still flow), so the
first update's ratio is exactly 1. Seeds: LoRA and value-head init by ``torch.manual_seed(seed)``,
each rollout's sampling by a seed derived from ``seed`` and the iteration, prompt order and
minibatches by generators of their own; two runs on CPU give the same history.

One history row per iteration: ``step``, ``reward`` (mean score), ``reward_std``, ``kl`` (mean
sequence KL to the reference), ``kl_coef``, ``entropy`` (mean token entropy of the rollout),
``policy_loss``, ``value_loss``, ``clip_fraction``, ``value_clip_fraction``, ``approx_kl``
(means over the iteration's updates), ``response_length``, ``cut_off`` (share), ``num_tokens``
(cumulative, tokens run with grad), ``lr``, and ``status/<name>`` counts.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.backends.base import Message
from ragtrail.llm.scoring import render_chat_prompt
from ragtrail.train.citation.stage import (
    ADAPTER,
    StageResult,
    end_token_ids,
    load_trainable,
    lora_config,
    sample_completions,
)
from ragtrail.train.reward_signal import RewardSpreadGuard

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

TRAINER = (
    "ragtrail PPO loop (LoRA policy, value head on the shared backbone, "
    "reference = adapter disabled)"
)


class ScoredCompletion(Protocol):
    """What the scoring function says of one completion."""

    @property
    def reward(self) -> float: ...

    @property
    def status(self) -> str: ...


ScoreFn = Callable[[Sequence[int], Sequence[str], Sequence[bool]], Sequence[ScoredCompletion]]
"""``score(prompt_indices, completion_texts, cut_off_flags)`` -> one result per completion."""


@dataclass(frozen=True)
class PPOConfig:
    """Settings of one PPO run (defaults: the usual RLHF PPO values, e.g. TRL's)."""

    steps: int
    prompts_per_step: int = 4
    epochs: int = 4
    minibatch_size: int = 2
    lr: float = 1e-5
    init_kl_coef: float = 0.04
    target_kl: float | None = 6.0
    kl_horizon: int = 10000
    cliprange: float = 0.2
    cliprange_value: float = 0.2
    vf_coef: float = 0.1
    gamma: float = 1.0
    lam: float = 0.95
    temperature: float = 0.8
    max_new_tokens: int = 128
    max_prompt_length: int = 2048
    max_grad_norm: float = 1.0
    patience: int = 2
    lora_r: int = 16
    lora_alpha: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.steps >= 1, "steps must be >= 1"),
            (self.prompts_per_step >= 2, "prompts_per_step must be >= 2 (advantages are whitened)"),
            (self.epochs >= 1, "epochs must be >= 1"),
            (self.minibatch_size >= 1, "minibatch_size must be >= 1"),
            (self.lr > 0, "lr must be > 0"),
            (self.init_kl_coef >= 0, "init_kl_coef must be >= 0"),
            (self.target_kl is None or self.target_kl > 0, "target_kl must be > 0 or None"),
            (self.kl_horizon >= 1, "kl_horizon must be >= 1"),
            (0 < self.cliprange < 1, "cliprange must be in (0, 1)"),
            (self.cliprange_value > 0, "cliprange_value must be > 0"),
            (self.vf_coef > 0, "vf_coef must be > 0"),
            (0 < self.gamma <= 1, "gamma must be in (0, 1]"),
            (0 <= self.lam <= 1, "lam must be in [0, 1]"),
            (self.temperature > 0, "temperature must be > 0"),
            (self.max_new_tokens >= 1, "max_new_tokens must be >= 1"),
            (self.max_prompt_length >= 1, "max_prompt_length must be >= 1"),
            (self.max_grad_norm > 0, "max_grad_norm must be > 0"),
            (self.patience >= 1, "patience must be >= 1"),
            (self.lora_r >= 1 and self.lora_alpha > 0, "lora_r >= 1 and lora_alpha > 0 needed"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def as_dict(self) -> JsonObject:
        return {"trainer": TRAINER, **asdict(self)}


@dataclass
class _Rollout:
    """One iteration's sequences: ``[left-padded prompt | right-padded response]``."""

    input_ids: torch.Tensor  # [B, P + T]
    attention_mask: torch.Tensor  # [B, P + T]
    prompt_width: int  # P
    response_mask: torch.Tensor  # [B, T] float
    scores: torch.Tensor  # [B]


class _Policy:
    """The LoRA policy, its value head and the forward pass the loop needs."""

    def __init__(self, model: Any, value_head: Any, pad_id: int, temperature: float) -> None:
        self.model = model
        self.value_head = value_head
        self.pad_id = pad_id
        self.temperature = temperature

    def forward(
        self, rollout: _Rollout, rows: torch.Tensor, *, values: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Log-probs and entropies ``[b, T]`` of the response tokens (and values) for ``rows``."""
        import torch

        from ragtrail.train.ppo.objectives import token_entropy

        ids = rollout.input_ids[rows]
        mask = rollout.attention_mask[rows]
        width = ids.shape[1] - rollout.prompt_width
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=False,
            logits_to_keep=width + 1,
            output_hidden_states=values,
        )
        logits = out.logits[:, :-1].float() / self.temperature  # predicts response tokens
        targets = ids[:, rollout.prompt_width :]
        logp = torch.log_softmax(logits, dim=-1).gather(2, targets[..., None]).squeeze(2)
        entropy = token_entropy(logits)
        value = None
        if values:
            start = rollout.prompt_width - 1
            hidden = out.hidden_states[-1][:, start : start + width].float()
            value = self.value_head(hidden).squeeze(-1)
        return logp, entropy, value


def _prompt_ids(tokenizer: Any, messages: Sequence[Message], max_length: int) -> list[int]:
    text, templated = render_chat_prompt(tokenizer, messages)
    ids = list(tokenizer(text, add_special_tokens=not templated)["input_ids"])
    if not ids:
        raise ValueError("a prompt renders to no tokens")
    return ids[-max_length:]


def _rollout(
    policy: _Policy,
    tokenizer: Any,
    prompt_ids: list[list[int]],
    end_ids: list[int],
    config: PPOConfig,
    sample_seed: int,
) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor, list[bool], list[list[int]]]:
    """Sample one completion per prompt; returns ids, attention mask, prompt width, response
    mask, cut-off flags and each response's own tokens (end token included)."""
    import torch

    device = next(policy.model.parameters()).device
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), policy.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompt_ids):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    sampled = sample_completions(
        policy.model,
        ids.to(device),
        mask.to(device),
        temperature=config.temperature,
        max_new_tokens=config.max_new_tokens,
        end_ids=end_ids,
        pad_id=policy.pad_id,
        seed=sample_seed,
    )
    kept = [tokens for tokens, _ in sampled]
    cut_off = [cut for _, cut in sampled]
    span = max(len(r) for r in kept)
    response_ids = torch.full((len(kept), span), policy.pad_id, dtype=torch.long)
    response_mask = torch.zeros((len(kept), span))
    for row, r in enumerate(kept):
        response_ids[row, : len(r)] = torch.tensor(r)
        response_mask[row, : len(r)] = 1.0
    full_ids = torch.cat([ids, response_ids], dim=1).to(device)
    full_mask = torch.cat([mask, response_mask.long()], dim=1).to(device)
    return full_ids, full_mask, width, response_mask.to(device), cut_off, kept


def _prompt_order(n_prompts: int, config: PPOConfig) -> list[list[int]]:
    """Prompt indices of every iteration: seeded reshuffles of all prompts, cycled."""
    rng = random.Random(config.seed)
    stream: list[int] = []
    needed = config.steps * config.prompts_per_step
    while len(stream) < needed:
        order = list(range(n_prompts))
        rng.shuffle(order)
        stream += order
    k = config.prompts_per_step
    return [stream[i * k : (i + 1) * k] for i in range(config.steps)]


def train_ppo(
    base_model: str,
    prompts: Sequence[Sequence[Message]],
    score: ScoreFn,
    config: PPOConfig,
    work_dir: Path,
    *,
    init_adapter: Path | None = None,
    cache_dir: str | Path | None = None,
    stage_config: JsonObject | None = None,
) -> StageResult:
    """Train a LoRA with PPO on ``prompts`` scored by ``score``; save it to ``work_dir/adapter``.

    ``init_adapter`` (the SFT stage) is merged into ``base_model`` first: the reference is that
    model. A run the spread guard stopped before any iteration had reward spread saves no
    adapter (the result is skipped, with the reason); one stopped later keeps what it learned
    and says why it stopped. ``stage_config`` is recorded in the result (default: the config).
    """
    import torch
    from peft import get_peft_model

    from ragtrail.train.ppo import objectives as ob

    if not prompts:
        raise ValueError("PPO needs at least one prompt")
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    model, tokenizer = load_trainable(base_model, cache_dir=cache_dir, merge=init_adapter)
    end_ids = end_token_ids(model, tokenizer)
    model = get_peft_model(model, lora_config(model, r=config.lora_r, alpha=config.lora_alpha))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    value_head = torch.nn.Linear(model.config.hidden_size, 1)
    torch.nn.init.zeros_(value_head.weight)
    torch.nn.init.zeros_(value_head.bias)
    model.to(device).eval()
    value_head.to(device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_ids[0]
    policy = _Policy(model, value_head, int(pad_id), config.temperature)
    params = [p for p in model.parameters() if p.requires_grad] + list(value_head.parameters())
    optimizer = torch.optim.AdamW(params, lr=config.lr)
    kl_ctl: ob.AdaptiveKLController | ob.FixedKLController = (
        ob.AdaptiveKLController(config.init_kl_coef, config.target_kl, config.kl_horizon)
        if config.target_kl is not None
        else ob.FixedKLController(config.init_kl_coef)
    )
    encoded = [_prompt_ids(tokenizer, p, config.max_prompt_length) for p in prompts]
    guard = RewardSpreadGuard(config.patience, max_length=config.max_new_tokens)
    history: list[JsonObject] = []
    tokens_seen = 0
    stopped: str | None = None
    for step, indices in enumerate(_prompt_order(len(prompts), config), start=1):
        ids, mask, width, response_mask, cut_off, kept = _rollout(
            policy,
            tokenizer,
            [encoded[i] for i in indices],
            end_ids,
            config,
            sample_seed=config.seed * 100_003 + step,
        )
        texts = [
            tokenizer.decode([t for t in r if t not in end_ids], skip_special_tokens=True)
            for r in kept
        ]
        scored = list(score(indices, texts, cut_off))
        if len(scored) != len(indices):
            raise ValueError(
                f"the score function returned {len(scored)} results for {len(indices)}"
            )
        rewards = [float(s.reward) for s in scored]
        statuses = [str(s.status) for s in scored]
        stopped = guard.observe(rewards, statuses)
        if stopped is not None:
            log.warning("PPO stopped at iteration %d: %s", step, stopped)
            break
        rollout = _Rollout(ids, mask, width, response_mask, torch.tensor(rewards, device=device))
        targets = _targets(policy, rollout, kl_ctl.value, config)
        kl_coef = kl_ctl.value
        stats = _update(
            policy, optimizer, params, rollout, targets, config, seed=config.seed * 7919 + step
        )
        tokens_seen += int(mask.sum()) * config.epochs
        sequence_kl = float(targets.kl.sum(dim=1).mean())
        kl_ctl.update(sequence_kl, len(indices))
        history.append(
            {
                "step": step,
                "reward": sum(rewards) / len(rewards),
                "reward_std": float(torch.tensor(rewards).std(unbiased=False)),
                "kl": sequence_kl,
                "kl_coef": kl_coef,
                "entropy": float(ob.masked_mean(targets.entropy, response_mask)),
                **stats,
                "response_length": float(response_mask.sum(dim=1).mean()),
                "cut_off": sum(cut_off) / len(cut_off),
                "num_tokens": tokens_seen,
                "lr": config.lr,
                **{f"status/{k}": v for k, v in guard.history[-1].items()},
            }
        )
        log.info(
            "PPO iteration %d/%d: reward %.3f (%s), KL %.3f, %.0f s so far",
            step,
            config.steps,
            history[-1]["reward"],
            ", ".join(f"{k} {v}" for k, v in guard.history[-1].items()),
            sequence_kl,
            time.perf_counter() - started,
        )
    record = stage_config if stage_config is not None else config.as_dict()
    if stopped is not None and not guard.saw_spread:
        return StageResult(
            "rl",
            None,
            len(history),
            time.perf_counter() - started,
            tokens_seen,
            len(prompts),
            tuple(history),
            dict(record),
            skipped=f"stopped: {stopped}",
        )
    adapter_dir = work_dir / ADAPTER
    model.save_pretrained(adapter_dir)
    return StageResult(
        name="rl",
        adapter_dir=adapter_dir,
        steps=len(history),
        wall_seconds=time.perf_counter() - started,
        tokens_seen=tokens_seen,
        examples=len(prompts),
        history=tuple(history),
        config=dict(record),
        stopped=stopped,
    )


@dataclass
class _Targets:
    """What one rollout's updates aim at, computed once without grad before them."""

    old_logp: torch.Tensor  # [B, T] log-probs under the policy that sampled
    old_values: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B, T] whitened
    returns: torch.Tensor  # [B, T]
    kl: torch.Tensor  # [B, T] per-token KL estimate to the reference
    entropy: torch.Tensor  # [B, T]


def _targets(policy: _Policy, rollout: _Rollout, kl_coef: float, config: PPOConfig) -> _Targets:
    """Old log-probs and values, reference log-probs (adapter disabled), the per-token rewards,
    GAE advantages (whitened) and returns of one rollout."""
    import torch

    from ragtrail.train.ppo import objectives as ob

    every = torch.arange(rollout.input_ids.shape[0], device=rollout.input_ids.device)
    with torch.no_grad():
        old_logp, entropy, old_values = policy.forward(rollout, every, values=True)
        with policy.model.disable_adapter():
            ref_logp, _, _ = policy.forward(rollout, every, values=False)
    assert old_values is not None
    mask = rollout.response_mask
    rewards, kl = ob.token_rewards(rollout.scores, old_logp, ref_logp, mask, kl_coef)
    advantages, returns = ob.gae(rewards, old_values, mask, gamma=config.gamma, lam=config.lam)
    return _Targets(old_logp, old_values, ob.whiten(advantages, mask), returns, kl, entropy)


def _update(
    policy: _Policy,
    optimizer: Any,
    params: list[Any],
    rollout: _Rollout,
    targets: _Targets,
    config: PPOConfig,
    *,
    seed: int,
) -> dict[str, float]:
    """``epochs`` passes of minibatch updates over one rollout; the means of what they showed."""
    import torch

    from ragtrail.train.ppo import objectives as ob

    n = targets.old_logp.shape[0]
    generator = torch.Generator().manual_seed(seed)
    sums = dict.fromkeys(
        ("loss", "policy_loss", "value_loss", "clip_fraction", "value_clip_fraction", "approx_kl"),
        0.0,
    )
    updates = 0
    for _ in range(config.epochs):
        order = torch.randperm(n, generator=generator).to(targets.old_logp.device)
        for start in range(0, n, config.minibatch_size):
            rows = order[start : start + config.minibatch_size]
            mask = rollout.response_mask[rows]
            logp, _, values = policy.forward(rollout, rows, values=True)
            assert values is not None
            pg = ob.policy_loss(
                logp, targets.old_logp[rows], targets.advantages[rows], mask, config.cliprange
            )
            vf, vf_clip = ob.value_loss(
                values,
                targets.old_values[rows],
                targets.returns[rows],
                mask,
                config.cliprange_value,
            )
            loss = pg.loss + config.vf_coef * vf
            if not torch.isfinite(loss):
                raise RuntimeError(f"PPO update: the loss is {float(loss)}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            sums["loss"] += float(loss.detach())
            sums["policy_loss"] += float(pg.loss.detach())
            sums["value_loss"] += float(vf.detach())
            sums["clip_fraction"] += pg.clip_fraction
            sums["value_clip_fraction"] += vf_clip
            sums["approx_kl"] += pg.approx_kl
            updates += 1
    return {k: v / updates for k, v in sums.items()}
