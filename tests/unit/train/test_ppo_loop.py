"""The PPO loop on a tiny Llama built from a config, with a learnable citation reward: prompts
number three passages and the second always holds the marker word ``z``; a completion earns
(P + R) / 2 of the passage numbers it writes against {2}. The mean reward rises over a few dozen
iterations; with a large KL coefficient the policy stays near the reference; the same seed gives
the same history; a reward with no spread stops the loop with a reason and no adapter."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from ragtrail.train.ppo.loop import PPOConfig, train_ppo
from tests.tiny_models import build_tiny_llama

MARKED = 2


@dataclass(frozen=True)
class Scored:
    reward: float
    status: str


def cites_the_marked_passage(
    indices: list[int], texts: list[str], cut_off: list[bool]
) -> list[Scored]:
    out = []
    for text in texts:
        cited = {int(c) for c in text if c in "123"}
        if not cited:
            out.append(Scored(0.0, "no_citations"))
            continue
        precision = (MARKED in cited) / len(cited)
        out.append(Scored((precision + float(MARKED in cited)) / 2, "ok"))
    return out


def _prompts() -> list[list[dict[str, str]]]:
    rng = random.Random(0)

    def passage(marked: bool) -> str:
        words = [rng.choice(["a", "aa", "a a"]) for _ in range(3)]
        if marked:
            words.insert(rng.randrange(4), "z")
        return " ".join(words)

    return [
        [{"role": "user", "content": " ".join(f"[{k}] {passage(k == MARKED)}" for k in (1, 2, 3))}]
        for _ in range(16)
    ]


PROMPTS = _prompts()
CONFIG = PPOConfig(
    steps=40,
    prompts_per_step=8,
    epochs=4,
    minibatch_size=4,
    lr=1e-2,
    init_kl_coef=0.01,
    target_kl=None,
    temperature=1.0,
    max_new_tokens=4,
    lora_r=8,
    lora_alpha=16,
    patience=5,
    seed=1,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama over a 12-token vocabulary (digits among a few tokens, so a random policy
    cites now and then), its output layer wide enough (init std 0.15) to become peaked."""
    corpus = [p[0]["content"] for p in PROMPTS] + ["[1]", "[2]", "[3]"] * 5
    return build_tiny_llama(
        tmp_path_factory.mktemp("ppo-tiny"),
        corpus,
        vocab_size=12,
        max_positions=256,
        initializer_range=0.15,
        byte_alphabet=False,
    )


def _mean(history: tuple[dict, ...], key: str, rows: slice) -> float:
    values = [row[key] for row in history[rows]]
    return sum(values) / len(values)


@pytest.fixture(scope="module")
def learned(tiny: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return train_ppo(
        str(tiny), PROMPTS, cites_the_marked_passage, CONFIG, tmp_path_factory.mktemp("w")
    )


def test_mean_reward_rises(learned) -> None:  # type: ignore[no-untyped-def]
    assert learned.skipped is None and learned.stopped is None
    assert learned.steps == 40 and learned.adapter_dir is not None
    assert (learned.adapter_dir / "adapter_config.json").exists()
    first = _mean(learned.history, "reward", slice(0, 4))  # the base policy, barely moved
    last = _mean(learned.history, "reward", slice(-10, None))
    assert last >= first + 0.4, (first, last)
    assert last >= 0.8
    # the policy got more certain as it learned
    assert _mean(learned.history, "entropy", slice(-10, None)) < _mean(
        learned.history, "entropy", slice(0, 3)
    )


def test_every_iteration_logs_what_ppo_shows(learned) -> None:  # type: ignore[no-untyped-def]
    keys = {"step", "reward", "reward_std", "kl", "kl_coef", "entropy", "loss", "policy_loss"}
    keys |= {"value_loss", "clip_fraction", "value_clip_fraction", "approx_kl", "num_tokens"}
    keys |= {"response_length", "cut_off", "lr"}
    for row in learned.history:
        assert keys <= set(row), keys - set(row)
        assert 0.0 <= row["clip_fraction"] <= 1.0 and row["approx_kl"] >= 0.0
        assert 1.0 <= row["response_length"] <= CONFIG.max_new_tokens
    assert learned.tokens_seen == learned.history[-1]["num_tokens"] > 0
    assert learned.as_dict()["mean_reward"] is not None


def test_a_large_kl_coefficient_keeps_the_policy_near_the_reference(
    tiny: Path,
    learned,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    held = train_ppo(
        str(tiny),
        PROMPTS,
        cites_the_marked_passage,
        replace(CONFIG, init_kl_coef=5.0),
        tmp_path,
    )
    free_kl = _mean(learned.history, "kl", slice(-10, None))
    held_kl = _mean(held.history, "kl", slice(-10, None))
    assert held_kl < 0.35 * free_kl, (held_kl, free_kl)
    assert _mean(held.history, "reward", slice(-10, None)) < _mean(
        learned.history, "reward", slice(-10, None)
    )


def test_the_same_seed_repeats_the_run(tiny: Path, tmp_path: Path) -> None:
    short = replace(CONFIG, steps=3)
    a = train_ppo(str(tiny), PROMPTS, cites_the_marked_passage, short, tmp_path / "a")
    b = train_ppo(str(tiny), PROMPTS, cites_the_marked_passage, short, tmp_path / "b")
    for row_a, row_b in zip(a.history, b.history, strict=True):
        assert row_a == pytest.approx(row_b)


def test_no_reward_spread_stops_with_a_reason_and_no_adapter(tiny: Path, tmp_path: Path) -> None:
    def flat(indices: list[int], texts: list[str], cut_off: list[bool]) -> list[Scored]:
        return [Scored(0.0, "cut_off_before_citation" if c else "unparseable") for c in cut_off]

    result = train_ppo(str(tiny), PROMPTS, flat, replace(CONFIG, patience=2), tmp_path)
    assert result.adapter_dir is None and not (tmp_path / "adapter").exists()
    assert result.skipped is not None
    assert result.skipped.startswith("stopped: no reward spread for 2 iteration(s)")
    assert "token limit 4" in result.skipped  # the cut-off completions are named
    assert result.steps == 1  # one update ran before the second flat rollout stopped it


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="prompts_per_step"):
        PPOConfig(steps=1, prompts_per_step=1)
    with pytest.raises(ValueError, match="cliprange"):
        PPOConfig(steps=1, cliprange=1.5)
    assert PPOConfig(steps=2).as_dict()["trainer"].startswith("ragtrail PPO loop")
