"""GeneratorTrainingConfig: the typed settings of a fine-tuning run (no model needed)."""

from __future__ import annotations

import dataclasses

import pytest

from ragtrail.train import GeneratorTrainingConfig


def test_defaults_match_the_documented_run() -> None:
    config = GeneratorTrainingConfig()
    assert (config.kind, config.lora_r, config.lora_alpha, config.epochs) == ("auto", 16, 32, 3)
    assert config.answer_token_init == " Answer:" and config.held_out_fraction == 0.2
    assert config.effective_token_lr == pytest.approx(3e-3)  # ten times lr when unset
    assert GeneratorTrainingConfig(lr=1e-2, token_lr=5e-3).effective_token_lr == 5e-3


def test_is_immutable_and_keeps_target_modules_as_a_tuple() -> None:
    names = ["q", "v"]
    config = GeneratorTrainingConfig(target_modules=names)
    names.append("k")
    assert config.target_modules == ("q", "v")
    assert GeneratorTrainingConfig(target_modules="all-linear").target_modules == "all-linear"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.lr = 1.0  # type: ignore[misc]
    assert dataclasses.replace(config, seed=8).seed == 8


@pytest.mark.parametrize(
    "bad", [{"batch_size": 0}, {"epochs": 0}, {"max_steps": 0}, {"kind": "encoder"}]
)
def test_refuses_impossible_settings(bad: dict) -> None:
    with pytest.raises(ValueError, match="must be"):
        GeneratorTrainingConfig(**bad)


def test_hyperparameters_record_resolved_targets_and_token_lr() -> None:
    config = GeneratorTrainingConfig(lr=1e-2, max_steps=30, seed=7)
    hp = config.hyperparameters(["q_proj", "v_proj"])
    assert hp["target_modules"] == ["q_proj", "v_proj"]
    assert hp["token_lr"] == pytest.approx(0.1) and hp["max_steps"] == 30 and hp["seed"] == 7
    assert list(hp) == [
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "target_modules",
        "epochs",
        "lr",
        "token_lr",
        "answer_token_init",
        "batch_size",
        "max_steps",
        "seed",
        "max_source_len",
        "max_target_len",
        "held_out_fraction",
        "weight_decay",
        "max_grad_norm",
        "optimizer",
    ]
