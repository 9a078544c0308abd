"""PPO's arithmetic by hand: reward placement, GAE (with padding), whitening, the clipped
surrogate and value losses, and the KL controllers."""

from __future__ import annotations

import math

import pytest
import torch

from ragtrail.train.ppo.objectives import (
    AdaptiveKLController,
    FixedKLController,
    gae,
    masked_mean,
    policy_loss,
    token_entropy,
    token_rewards,
    value_loss,
    whiten,
)


def t(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def close(actual: torch.Tensor, expected: list[list[float]]) -> None:
    torch.testing.assert_close(
        actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-6, rtol=0
    )


def test_rewards_pay_the_kl_per_token_and_the_score_at_the_last_token() -> None:
    # row 0: kl = logp - ref = [0.5, 0, -1]; rewards = -0.1 * kl, + score 1.0 at t=2
    # row 1: two real tokens; kl = [0, 1, (pad)]; score 0.5 lands at t=1, padding stays 0
    rewards, kl = token_rewards(
        torch.tensor([1.0, 0.5], dtype=torch.float64),
        t([-1.0, -2.0, -3.0], [-1.0, -1.0, -7.0]),
        t([-1.5, -2.0, -2.0], [-1.0, -2.0, 0.0]),
        t([1, 1, 1], [1, 1, 0]),
        kl_coef=0.1,
    )
    close(kl, [[0.5, 0.0, -1.0], [0.0, 1.0, 0.0]])
    close(rewards, [[-0.05, 0.0, 1.1], [0.0, 0.4, 0.0]])


def test_reward_placement_refuses_an_empty_response() -> None:
    with pytest.raises(ValueError, match="at least one response token"):
        token_rewards(torch.zeros(1), t([0.0, 0.0]), t([0.0, 0.0]), t([0, 0]), 0.1)
    with pytest.raises(ValueError, match="scores of shape"):
        token_rewards(torch.zeros(3), t([0.0]), t([0.0]), t([1]), 0.1)


def test_gae_on_a_short_sequence() -> None:
    # gamma 1, lambda 0.95, rewards [0, 0, 1], values [0.5, 0.6, 0.7]:
    # t=2: delta = 1 + 0 - 0.7 = 0.3                  A2 = 0.3
    # t=1: delta = 0 + 0.7 - 0.6 = 0.1                A1 = 0.1 + 0.95 * 0.3 = 0.385
    # t=0: delta = 0 + 0.6 - 0.5 = 0.1                A0 = 0.1 + 0.95 * 0.385 = 0.46575
    adv, ret = gae(t([0.0, 0.0, 1.0]), t([0.5, 0.6, 0.7]), t([1, 1, 1]), gamma=1.0, lam=0.95)
    close(adv, [[0.46575, 0.385, 0.3]])
    close(ret, [[0.96575, 0.985, 1.0]])


def test_gae_discounts_and_ignores_padding() -> None:
    # gamma 0.9, lambda 0.5 on the same row:
    # A2 = 0.3; A1 = (0.9 * 0.7 - 0.6) + 0.45 * 0.3 = 0.165; A0 = (0.9 * 0.6 - 0.5) + 0.45 * 0.165
    adv, _ = gae(t([0.0, 0.0, 1.0]), t([0.5, 0.6, 0.7]), t([1, 1, 1]), gamma=0.9, lam=0.5)
    close(adv, [[0.04 + 0.45 * 0.165, 0.165, 0.3]])
    # a padded row: the value 9.0 and reward 5.0 on padding must not leak into the last real token
    # t=1: delta = 1 + 0 - 0.4 = 0.6; t=0: delta = 0.4 - 0.2 = 0.2, A0 = 0.2 + 0.95 * 0.6 = 0.77
    adv, ret = gae(t([0.0, 1.0, 5.0]), t([0.2, 0.4, 9.0]), t([1, 1, 0]), gamma=1.0, lam=0.95)
    close(adv, [[0.77, 0.6, 0.0]])
    close(ret, [[0.97, 1.0, 0.0]])


def test_whiten_over_real_tokens_only() -> None:
    # [1, 2, 3] has mean 2 and (unbiased) variance 1; the padded 100 takes no part and stays 0
    out = whiten(t([1.0, 2.0], [3.0, 100.0]), t([1, 1], [1, 0]))
    close(out, [[-1.0, 0.0], [1.0, 0.0]])


def test_clipped_surrogate_by_hand() -> None:
    # token 1: ratio 1.5, A = +1 -> max(-1.5, -1.2) = -1.2 (clipped)
    # token 2: ratio 0.5, A = -1 -> max(0.5, 0.8) = 0.8 (clipped)
    # token 3: ratio 1.1, A = +2 -> max(-2.2, -2.2) = -2.2 (inside the range)
    new = torch.log(t([1.5, 0.5, 1.1]))
    out = policy_loss(new, torch.zeros_like(new), t([1.0, -1.0, 2.0]), t([1, 1, 1]), 0.2)
    assert float(out.loss) == pytest.approx((-1.2 + 0.8 - 2.2) / 3)
    assert out.clip_fraction == pytest.approx(2 / 3)
    logs = [math.log(1.5), math.log(0.5), math.log(1.1)]
    assert out.approx_kl == pytest.approx(0.5 * sum(x * x for x in logs) / 3)


def test_surrogate_gradient_pushes_towards_positive_advantages() -> None:
    logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    policy_loss(logp, torch.zeros(1, 2), t([1.0, -1.0]), t([1, 1]), 0.2).loss.backward()
    assert logp.grad is not None
    assert logp.grad[0, 0] < 0 < logp.grad[0, 1]  # descent raises token 1, lowers token 2


def test_clipped_value_loss_by_hand() -> None:
    # token 1: V 1.0, old 0.5, R 2.0: clip(V) = 0.7; (1 - 2)^2 = 1 < (0.7 - 2)^2 = 1.69
    # token 2: V 0.0, old 0.5, R 0.0: clip(V) = 0.3; 0 < 0.09
    # token 3 is padding: ignored
    loss, clipped = value_loss(
        t([1.0, 0.0, 50.0]), t([0.5, 0.5, 0.0]), t([2.0, 0.0, 0.0]), t([1, 1, 0]), 0.2
    )
    assert float(loss) == pytest.approx(0.5 * (1.69 + 0.09) / 2)
    assert clipped == pytest.approx(1.0)
    loss, clipped = value_loss(t([0.6]), t([0.5]), t([0.7]), t([1]), 0.2)
    assert float(loss) == pytest.approx(0.5 * 0.01) and clipped == 0.0


def test_adaptive_kl_controller_by_hand() -> None:
    ctl = AdaptiveKLController(0.2, target=6.0, horizon=10_000)
    ctl.update(12.0, 4)  # error clip(12/6 - 1) = +0.2 -> x (1 + 0.2 * 4 / 10000)
    assert ctl.value == pytest.approx(0.2 * 1.00008)
    ctl = AdaptiveKLController(0.2, target=6.0, horizon=10_000)
    ctl.update(6.6, 4)  # error +0.1 -> x 1.00004
    assert ctl.value == pytest.approx(0.2 * 1.00004)
    ctl.update(3.0, 4)  # error clip(-0.5) = -0.2 -> x 0.99992
    assert ctl.value == pytest.approx(0.2 * 1.00004 * 0.99992)
    fixed = FixedKLController(0.3)
    fixed.update(100.0, 8)
    assert fixed.value == 0.3
    with pytest.raises(ValueError):
        AdaptiveKLController(0.1, target=0.0, horizon=10)


def test_entropy_and_masked_mean() -> None:
    uniform = torch.zeros(2, 4, dtype=torch.float64)
    assert token_entropy(uniform).tolist() == pytest.approx([math.log(4)] * 2)
    assert float(masked_mean(t([1.0, 3.0, 9.0]), t([1, 1, 0]))) == 2.0
    with pytest.raises(ValueError, match="empty mask"):
        masked_mean(t([1.0]), t([0]))
