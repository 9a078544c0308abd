"""LPO: the weighted DPO loss and the lambda weights by hand, the warmup + cosine schedule, and a
short run on a tiny random Llama that raises the preferred samples' log-probability margin,
saves a loadable adapter and repeats exactly with the same seed."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ragtrail.train.evidence.lpo import (
    TRAINER,
    LPOConfig,
    PreferenceList,
    _step_plan,
    completion_logps,
    lpo_loss,
    lpo_stage_config,
    preference_margin,
    train_lpo,
    warmup_cosine,
)
from tests.tiny_models import build_tiny_llama


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_loss_by_hand() -> None:
    # pair 1: (pw - rw) - (pl - rl) = (-1 + 1.5) - (-3 + 2.5) = 1.0, z = 0.5 * 1.0 = 0.5
    #         -log sigmoid(0.5) = log(1 + e^-0.5) = 0.474076984
    # pair 2: (-2 + 2) - (-1.5 + 1) = 0.5, z = 0.25, log(1 + e^-0.25) = 0.575939423
    # loss = (0.6 * 0.474076984 + 0.2 * 0.575939423) / (0.6 + 0.2) = 0.499542592
    loss = lpo_loss(t(-1.0, -2.0), t(-3.0, -1.5), t(-1.5, -2.0), t(-2.5, -1.0), t(0.6, 0.2), 0.5)
    expected = (0.6 * math.log1p(math.exp(-0.5)) + 0.2 * math.log1p(math.exp(-0.25))) / 0.8
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    assert float(loss) == pytest.approx(0.499542592, abs=1e-6)


def test_uniform_weights_are_plain_dpo_and_scale_free() -> None:
    gen = torch.Generator().manual_seed(0)
    pw, pl, rw, rl = (torch.randn(5, generator=gen, dtype=torch.float64) for _ in range(4))
    dpo = (-F.logsigmoid(0.1 * ((pw - rw) - (pl - rl)))).mean()
    assert float(lpo_loss(pw, pl, rw, rl, torch.ones(5, dtype=torch.float64), 0.1)) == (
        pytest.approx(float(dpo), abs=1e-9)
    )
    w = torch.full((5,), 3.0, dtype=torch.float64)
    assert float(lpo_loss(pw, pl, rw, rl, w, 0.1)) == pytest.approx(float(dpo), abs=1e-9)


def test_loss_rejects_bad_inputs() -> None:
    one = t(1.0, 2.0)
    with pytest.raises(ValueError, match="sum to 0"):
        lpo_loss(one, one, one, one, t(0.0, 0.0), 0.1)
    with pytest.raises(ValueError, match="one shape"):
        lpo_loss(one, t(1.0), one, one, one, 0.1)
    with pytest.raises(ValueError, match=">= 0"):
        lpo_loss(one, one, one, one, t(1.0, -1.0), 0.1)


def test_warmup_then_cosine() -> None:
    f = warmup_cosine(10, 0.2)  # W = ceil(2.0) = 2 warmup steps
    assert f(0) == pytest.approx(0.5) and f(1) == pytest.approx(1.0)
    assert f(2) == pytest.approx(1.0)  # cosine starts at the full rate
    assert f(3) == pytest.approx(0.5 * (1 + math.cos(math.pi / 8)))
    assert f(6) == pytest.approx(0.5)  # half-way through the 8 decay steps
    assert f(9) == pytest.approx(0.5 * (1 + math.cos(7 * math.pi / 8)))
    assert f(9) > 0  # no step runs at rate 0
    g = warmup_cosine(200, 0.015)  # SEER: 1.5% -> ceil(3.0) = 3 warmup steps
    assert [g(k) for k in range(4)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])
    assert warmup_cosine(4, 0.0)(0) == 1.0


def test_config_validation_and_step_plan() -> None:
    with pytest.raises(ValueError, match="beta"):
        LPOConfig(beta=0)
    with pytest.raises(ValueError, match="weighting"):
        LPOConfig(weighting="mrr")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="warmup_ratio"):
        LPOConfig(warmup_ratio=1.0)
    plan = _step_plan(10, LPOConfig(pairs_per_batch=2, grad_accum=2, epochs=2))
    assert [len(s) for s in plan] == [4, 4, 2, 4, 4, 2]  # ceil(10 / 4) = 3 steps an epoch
    assert sorted(k for step in plan[:3] for k in step) == list(range(10))
    assert len(_step_plan(10, LPOConfig(pairs_per_batch=2, grad_accum=2, max_steps=7))) == 7
    cfg = lpo_stage_config(LPOConfig())
    assert cfg["trainer"] == TRAINER and cfg["lr"] == 1e-5 and cfg["weighting"] == "lambda"
    with pytest.raises(ValueError, match="scores"):
        PreferenceList("q", ({"role": "user", "content": "x"},), ("a", "b"), (0.1,))


# --------------------------------------------------------------------------- learning

CANDIDATES = [
    (
        "The ferry leaves at nine from pier two.",
        "Ferries run on weekdays only.",
        "The harbour cafe sells coffee.",
    ),
    (
        "Tickets cost five euros at the office.",
        "The office opens at eight.",
        "Seagulls nest on the roof.",
    ),
    (
        "The museum closes at six on Sundays.",
        "The museum has a garden.",
        "Parking is free after dark.",
    ),
]
QUESTIONS = [
    "When does the ferry leave?",
    "How much is a ticket?",
    "When does the museum close on Sunday?",
]
CORPUS = [c for group in CANDIDATES for c in group] * 4 + QUESTIONS * 4


def lists() -> list[PreferenceList]:
    out = []
    for i, (question, cands) in enumerate(zip(QUESTIONS, CANDIDATES, strict=True)):
        messages = (
            {"role": "system", "content": "Extract the evidence that answers the question."},
            {"role": "user", "content": f"Question: {question}\nPassages: {' '.join(cands)}"},
        )
        out.append(PreferenceList(f"q{i}", messages, cands, (0.9, 0.5, 0.1)))
    return out


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # initializer_range 0.1 (not 0.02): with near-zero weights a LoRA on q/v barely moves the
    # output distribution in a dozen steps, and the learning signal would drown in the test's noise
    return build_tiny_llama(
        tmp_path_factory.mktemp("llama"), CORPUS, max_positions=256, initializer_range=0.1
    )


CONFIG = LPOConfig(
    beta=0.1, lr=5e-3, warmup_ratio=0.1, pairs_per_batch=4, grad_accum=1, max_steps=12,
    max_length=256, seed=3,
)  # fmt: skip


def test_lpo_raises_the_preference_margin(llama: Path, tmp_path: Path) -> None:
    from peft import PeftModel

    from ragtrail.train.citation.stage import load_trainable

    data = lists()
    base, tokenizer = load_trainable(str(llama))
    before = preference_margin(base, tokenizer, data, beta=1.0, max_length=256)
    before_lambda = preference_margin(
        base, tokenizer, data, beta=1.0, max_length=256, weighting="lambda"
    )

    result = train_lpo(str(llama), data, CONFIG, tmp_path / "run1")
    assert result.name == "lpo" and result.steps == 12 and result.examples == 9
    assert result.adapter_dir is not None and (result.adapter_dir / "adapter_config.json").is_file()
    losses = result.series("loss")
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-4)  # policy == reference at step 1
    assert result.series("margin")[0] == pytest.approx(0.0, abs=1e-4)
    factor = warmup_cosine(12, 0.1)
    assert result.series("lr") == pytest.approx([5e-3 * factor(k) for k in range(12)])
    assert result.series("pairs") == [4, 4, 1] * 4 and result.tokens_seen > 0
    assert result.as_dict()["config"]["trainer"] == TRAINER

    base2, _ = load_trainable(str(llama))
    tuned = PeftModel.from_pretrained(base2, str(result.adapter_dir))
    after = preference_margin(tuned, tokenizer, data, beta=1.0, max_length=256)
    after_lambda = preference_margin(
        tuned, tokenizer, data, beta=1.0, max_length=256, weighting="lambda"
    )
    # measured on CPU: mean margin -0.01 -> 3.33 nats, lambda-weighted -5.39 -> -1.38; 8 of 9
    # pairs rose (the one that fell has lambda 0.1); the untrained margins span -15 to +19 nats
    assert after - before > 2.0, (before, after)
    assert after_lambda - before_lambda > 2.0, (before_lambda, after_lambda)
    assert sum(losses[-4:]) / 4 < math.log(2) - 0.08, losses

    again = train_lpo(str(llama), data, CONFIG, tmp_path / "run2")
    assert again.series("loss") == losses  # same seed, same run

    # a second stage on top: the first adapter is merged, so it is the new reference (step 1's
    # policy equals it again: loss ln 2, margin 0) and training goes on from the tuned model
    short = dataclasses.replace(CONFIG, max_steps=2)
    stacked = train_lpo(str(llama), data, short, tmp_path / "run3", init_adapter=result.adapter_dir)
    assert stacked.series("loss")[0] == pytest.approx(math.log(2), abs=1e-4)
    assert stacked.series("margin")[0] == pytest.approx(0.0, abs=1e-4)


def test_completion_logps_is_differentiable_and_left_truncates(llama: Path) -> None:
    from ragtrail.train.citation.stage import load_trainable

    model, tokenizer = load_trainable(str(llama))
    data = lists()[0]
    prompts = [data.messages] * 2
    values = completion_logps(model, tokenizer, prompts, list(data.candidates[:2]), max_length=256)
    assert values.shape == (2,) and values.requires_grad and bool((values < 0).all())
    values.sum().backward()
    assert model.get_input_embeddings().weight.grad is not None
    cut = completion_logps(model, tokenizer, prompts[:1], [data.candidates[0]], max_length=30)
    assert math.isfinite(float(cut[0].detach()))


def test_no_pairs_is_an_error(llama: Path, tmp_path: Path) -> None:
    flat = PreferenceList("q", lists()[0].messages, ("a", "b"), (0.5, 0.5))
    with pytest.raises(ValueError, match="no preference pairs"):
        train_lpo(str(llama), [flat], CONFIG, tmp_path)
