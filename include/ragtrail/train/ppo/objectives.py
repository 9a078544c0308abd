"""The arithmetic of PPO for language models, as tensor functions with no model in them.

Shapes: ``[batch, T]`` over a rollout's response tokens, right-padded; ``mask`` is 1 on real
tokens (a prefix of each row) and 0 on padding. Every mean over tokens is masked.

- :func:`token_rewards` places the rewards: each token pays ``-kl_coef * (logp - ref_logp)``
  (the k1 estimate of the KL to the reference), and the sequence's score is added at its last
  real token.
- :func:`gae`: generalised advantage estimation, ``delta_t = r_t + gamma * V_{t+1} - V_t``,
  ``A_t = delta_t + gamma * lambda * A_{t+1}``, with ``V`` = 0 after the last real token;
  returns ``A + V``.
- :func:`whiten`: advantages shifted to mean 0 and scaled to variance 1 over the real tokens.
- :func:`policy_loss`: the clipped surrogate ``max(-A * ratio, -A * clip(ratio, 1 - eps,
  1 + eps))`` with its clip fraction and the approximate KL ``0.5 * mean((logp - old)^2)``.
- :func:`value_loss`: ``0.5 * max((V - R)^2, (clip(V, V_old - eps_v, V_old + eps_v) - R)^2)``.
- :class:`AdaptiveKLController` (Ziegler et al. 2019): the KL coefficient is multiplied by
  ``1 + clip(KL / target - 1, -0.2, 0.2) * n / horizon`` after each rollout of ``n`` sequences;
  :class:`FixedKLController` keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ERROR_CLIP = 0.2
"""Bound of the adaptive controller's proportional error (Ziegler et al.)."""


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1; an all-zero mask is an error, not a NaN."""
    total = mask.sum()
    if float(total) <= 0:
        raise ValueError("masked_mean over an empty mask")
    return (values * mask).sum() / total


def masked_var(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Unbiased variance of ``values`` where ``mask`` is 1 (at least two entries needed)."""
    count = mask.sum()
    if float(count) < 2:
        raise ValueError("masked_var needs at least two unmasked entries")
    mean = masked_mean(values, mask)
    return masked_mean((values - mean) ** 2, mask) * count / (count - 1)


def whiten(values: torch.Tensor, mask: torch.Tensor, *, eps: float = 1e-8) -> torch.Tensor:
    """``(values - mean) / sqrt(var + eps)`` over the unmasked entries; masked entries are 0."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    return (values - mean) * torch.rsqrt(var + eps) * mask


def token_rewards(
    scores: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards ``[batch, T]`` and the per-token KL estimate (both 0 on padding).

    ``scores`` is one number per sequence, added at the sequence's last real token.
    """
    if scores.shape != (logprobs.shape[0],):
        raise ValueError(f"scores of shape {tuple(scores.shape)} for {logprobs.shape[0]} rows")
    lengths = mask.sum(dim=1).long()
    if bool((lengths < 1).any()):
        raise ValueError("every sequence needs at least one response token")
    kl = (logprobs - ref_logprobs) * mask
    rewards = -kl_coef * kl
    rows = torch.arange(rewards.shape[0], device=rewards.device)
    rewards[rows, lengths - 1] += scores.to(rewards.dtype)
    return rewards, kl


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns ``[batch, T]`` (0 on padding); see the module docstring."""
    rewards, values = rewards * mask, values * mask
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    width = rewards.shape[1]
    for t in reversed(range(width)):
        next_value = values[:, t + 1] if t + 1 < width else torch.zeros_like(running)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = delta + gamma * lam * running
        running = running * mask[:, t]
        advantages[:, t] = running
    returns = (advantages + values) * mask
    return advantages, returns


@dataclass(frozen=True)
class PolicyLoss:
    """The clipped surrogate loss of one update and what it shows."""

    loss: torch.Tensor
    clip_fraction: float
    approx_kl: float


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float,
) -> PolicyLoss:
    """PPO's clipped surrogate (to minimise), its clip fraction and approximate KL."""
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_fraction = masked_mean((clipped > unclipped).float(), mask)
        approx_kl = 0.5 * masked_mean((logprobs - old_logprobs) ** 2, mask)
    return PolicyLoss(loss, float(clip_fraction), float(approx_kl))


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float,
) -> tuple[torch.Tensor, float]:
    """PPO's clipped value loss and the share of tokens where the clipped term won."""
    clipped_values = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    unclipped = (values - returns) ** 2
    clipped = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_fraction = masked_mean((clipped > unclipped).float(), mask)
    return loss, float(clip_fraction)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's next-token distribution (``[..., vocab]`` -> ``[...]``)."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


class FixedKLController:
    """A KL coefficient that never changes."""

    def __init__(self, value: float) -> None:
        if value < 0:
            raise ValueError("the KL coefficient must be >= 0")
        self.value = value

    def update(self, current_kl: float, n_sequences: int) -> None:
        del current_kl, n_sequences


class AdaptiveKLController:
    """The KL coefficient steered towards ``target`` sequence KL (see the module docstring)."""

    def __init__(self, init: float, target: float, horizon: int) -> None:
        if init < 0 or target <= 0 or horizon < 1:
            raise ValueError("need init >= 0, target > 0 and horizon >= 1")
        self.value = init
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, n_sequences: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -ERROR_CLIP), ERROR_CLIP)
        self.value *= 1.0 + error * n_sequences / self.horizon
