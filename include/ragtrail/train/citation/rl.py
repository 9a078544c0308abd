"""RL stage of the citation answerer: PPO (RAGE's recipe), GRPO or RLOO on the citation reward,
with a KL penalty to the SFT model.

Algorithms (``citation_training.rl_algorithm``):

* **ppo** — what RAGE did (METHODS §7): rollouts from the current policy, a value head, the
  sequence reward (P + R) / 2 at the last token and a per-token KL penalty to the SFT model with
  an adaptive coefficient, GAE, clipped surrogate and value losses, several epochs per rollout.
  TRL 1.16 has no PPO trainer (the last, 1.12, takes a reward model), so it is ragtrail's own
  loop (:mod:`ragtrail.train.ppo`). One iteration samples one completion for each of
  ``num_generations`` prompts.
* **grpo** — TRL ``GRPOTrainer``: ``num_generations`` completions of one prompt per step, each
  one's advantage its reward relative to the group (mean-centred, std-scaled); KL to the
  reference weighted by ``beta`` in the loss. No value model.
* **rloo** — TRL ``RLOOTrainer``: the same group, a leave-one-out mean of the others' rewards as
  the baseline, the KL folded into the reward (``beta``). No value model.

All three see the same completions per iteration (``num_generations``), the same learning rate,
temperature, completion limit, KL weight and seed, so a comparison between them is about the
algorithm (BENCHMARKS.md, "Citation RL: PPO vs GRPO vs RLOO").

KL reference = the SFT model. The SFT adapter is merged into the base weights and a fresh LoRA is
trained on top; "adapter disabled" is then exactly the SFT model, and no second copy of the
weights is loaded. The bundle stores the two adapters (``sft`` then ``rl``).

A learning signal first (:mod:`ragtrail.train.reward_signal`): the completion limit is fitted to
what the SFT stage produces — its targets and the answers the SFT model samples for a few prompts
before RL starts (1.5x the longest that ended, capped by ``max_completion_length``; the cap when
none ended) — cut-off completions are
diagnosed by the reward (status ``cut_off`` with half credit for the citations they wrote, or
``cut_off_before_citation``), and the stage stops after ``rl_patience`` iterations in a row
whose rewards have no spread, saying what the completions were. A stage stopped before it ever
saw spread keeps no adapter (it learned nothing); the bundle is then the SFT model alone.

Generation is not schema-guided during RL (evaluation is): an unparseable reply earns 0, so the
policy is pushed towards well-formed JSON too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import RLAlgorithm
from ragtrail.train.citation.config import CitationTrainingConfig
from ragtrail.train.citation.data import CitationPrompt
from ragtrail.train.citation.reward import CitationReward, score_reply
from ragtrail.train.citation.stage import (
    StageResult,
    end_token_ids,
    finished_stage,
    load_tokenizer,
    load_trainable,
    lora_config,
    sample_completions,
    step_history,
    trainer_arguments,
    without_printing,
)
from ragtrail.train.reward_signal import RewardSpreadGuard, fitted_completion_length

TRAINERS = {
    RLAlgorithm.PPO: "ragtrail PPO loop",
    RLAlgorithm.GRPO: "trl.GRPOTrainer",
    RLAlgorithm.RLOO: "trl.RLOOTrainer",
}


PROBE_PROMPTS = 4
"""Training prompts whose answers from the SFT model size the completion limit."""


def probe_answer_lengths(
    base_model: str,
    sft_adapter: Path | None,
    prompts: Sequence[CitationPrompt],
    config: CitationTrainingConfig,
    *,
    cache_dir: str | Path | None = None,
) -> list[int | None]:
    """Token lengths of the answers the model RL starts from (base + SFT adapter) writes to the
    first :data:`PROBE_PROMPTS` prompts, sampled as RL samples them (temperature, seed) with the
    cap as the limit (end token excluded); None for an answer that did not end within the cap."""
    import torch

    from ragtrail.llm.scoring import render_chat_prompt

    model, tokenizer = load_trainable(base_model, cache_dir=cache_dir, merge=sft_adapter)
    model.eval()
    end_ids = end_token_ids(model, tokenizer)
    lengths: list[int | None] = []
    for k, prompt in enumerate(prompts[:PROBE_PROMPTS]):
        text, templated = render_chat_prompt(tokenizer, prompt.messages)
        ids = tokenizer(text, add_special_tokens=not templated, return_tensors="pt")["input_ids"]
        ((tokens, cut_off),) = sample_completions(
            model,
            ids,
            torch.ones_like(ids),
            temperature=config.rl_temperature,
            max_new_tokens=config.max_completion_length,
            end_ids=end_ids,
            pad_id=tokenizer.pad_token_id,
            seed=config.seed + k,
        )
        lengths.append(None if cut_off else len(tokens) - 1)
    return lengths


def completion_limit(
    tokenizer: Any,
    target_completions: Sequence[str],
    probed: Sequence[int | None],
    config: CitationTrainingConfig,
) -> tuple[int, str]:
    """The RL completion limit and where it came from (recorded in lineage): fitted to the
    longest of the SFT targets and of the probed answers that ended (see
    :func:`~ragtrail.train.reward_signal.fitted_completion_length`), the cap when none did."""
    cap = config.max_completion_length
    if not config.fit_completion_length:
        return cap, "max_completion_length (fitting off)"
    targets = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in target_completions]
    ended = [n for n in probed if n is not None]
    parts = []
    if targets:
        parts.append(f"{len(targets)} SFT targets up to {max(targets)} tokens")
    if probed:
        longest = f" up to {max(ended)} tokens" if ended else ""
        parts.append(f"{len(ended)} of {len(probed)} answers of the SFT model ended{longest}")
    if not targets and not ended:
        return cap, f"max_completion_length ({'; '.join(parts) or 'nothing to fit to'})"
    limit = fitted_completion_length(targets + ended, cap)
    return limit, f"fitted to {'; '.join(parts)} (x1.5 + 1, cap {cap})"


def rl_stage_config(
    config: CitationTrainingConfig, completion_tokens: int, basis: str
) -> dict[str, object]:
    """The parameters of the RL stage, as recorded in lineage."""
    algorithm = RLAlgorithm(config.rl_algorithm)
    out: dict[str, object] = {
        "algorithm": algorithm.value,
        "trainer": TRAINERS[algorithm],
        "reward": "(citation precision + citation recall) / 2; cut off: half credit",
        "kl_reference": "SFT model (SFT adapter merged; fresh LoRA on top)",
        "steps": config.rl_steps,
        "completions_per_step": config.num_generations,
        "beta": config.beta,
        "lr": config.rl_lr,
        "lr_schedule": "constant",
        "max_completion_length": completion_tokens,
        "completion_length_basis": basis,
        "temperature": config.rl_temperature,
        "patience": config.rl_patience,
        "lora_r": config.lora_r,
        "lora_alpha": config.lora_alpha,
        "seed": config.seed,
    }
    if algorithm is RLAlgorithm.PPO:
        out |= {
            "prompts_per_step": config.num_generations,
            "kl_control": "adaptive" if config.target_kl is not None else "fixed",
            "target_kl": config.target_kl,
            "kl_horizon": config.kl_horizon,
            "ppo_epochs": config.ppo_epochs,
            "minibatch_size": config.ppo_minibatch_size,
            "cliprange": config.cliprange,
            "cliprange_value": config.cliprange_value,
            "vf_coef": config.vf_coef,
            "gamma": config.gamma,
            "gae_lambda": config.gae_lambda,
            "max_grad_norm": config.max_grad_norm,
        }
    else:
        out |= {
            "prompts_per_step": 1,
            "num_generations": config.num_generations,
            "lora_dropout": config.lora_dropout,
            "loss_type": "dapo" if algorithm is RLAlgorithm.GRPO else "rloo",
        }
    return out


def run_rl(
    base_model: str,
    sft_adapter: Path | None,
    prompts: Sequence[CitationPrompt],
    config: CitationTrainingConfig,
    work_dir: Path,
    *,
    target_completions: Sequence[str] = (),
    cache_dir: str | Path | None = None,
) -> StageResult:
    """Train a LoRA with the configured algorithm on ``prompts`` over the base model with
    ``sft_adapter`` merged (the base alone when SFT was skipped); save it to
    ``work_dir/adapter``. The completion limit is fitted to ``target_completions`` (the SFT
    targets) and to the answers the SFT model writes to a few prompts (:func:`completion_limit`)."""
    if not prompts:
        raise ValueError("the RL stage needs at least one prompt")
    probed = (
        probe_answer_lengths(base_model, sft_adapter, prompts, config, cache_dir=cache_dir)
        if config.fit_completion_length
        else []
    )
    limit, basis = completion_limit(
        load_tokenizer(base_model, cache_dir=cache_dir), target_completions, probed, config
    )
    run = _RLRun(
        base_model,
        sft_adapter,
        tuple(prompts),
        config,
        work_dir,
        limit,
        rl_stage_config(config, limit, basis),
        cache_dir,
    )
    if RLAlgorithm(config.rl_algorithm) is RLAlgorithm.PPO:
        return _run_ppo(run)
    return _run_trl(run)


@dataclass(frozen=True)
class _RLRun:
    """One RL stage's inputs, as both runners take them."""

    base_model: str
    sft_adapter: Path | None
    prompts: tuple[CitationPrompt, ...]
    config: CitationTrainingConfig
    work_dir: Path
    limit: int
    stage_config: JsonObject
    cache_dir: str | Path | None


def _run_ppo(run: _RLRun) -> StageResult:
    from ragtrail.train.ppo.loop import PPOConfig, train_ppo

    config, prompts = run.config, run.prompts
    ppo = PPOConfig(
        steps=config.rl_steps,
        prompts_per_step=config.num_generations,
        epochs=config.ppo_epochs,
        minibatch_size=config.ppo_minibatch_size,
        lr=config.rl_lr,
        init_kl_coef=config.beta,
        target_kl=config.target_kl,
        kl_horizon=config.kl_horizon,
        cliprange=config.cliprange,
        cliprange_value=config.cliprange_value,
        vf_coef=config.vf_coef,
        gamma=config.gamma,
        lam=config.gae_lambda,
        temperature=config.rl_temperature,
        max_new_tokens=run.limit,
        max_prompt_length=config.max_length,
        max_grad_norm=config.max_grad_norm,
        patience=config.rl_patience,
        lora_r=config.lora_r,
        lora_alpha=config.lora_alpha,
        seed=config.seed,
    )

    def score(indices: Sequence[int], texts: Sequence[str], cut_off: Sequence[bool]) -> list[Any]:
        return [
            score_reply(text, prompts[i].relevant, prompts[i].n_passages, cut_off=cut)
            for i, text, cut in zip(indices, texts, cut_off, strict=True)
        ]

    return train_ppo(
        run.base_model,
        [p.messages for p in prompts],
        score,
        ppo,
        run.work_dir,
        init_adapter=run.sft_adapter,
        cache_dir=run.cache_dir,
        stage_config=run.stage_config,
    )


def _spread_callback(guard: RewardSpreadGuard, reward: CitationReward) -> Any:
    """A TRL callback that feeds each step's rewards to ``guard`` and stops training when it
    says so (the reason is kept on the callback as ``stopped``)."""
    from transformers import TrainerCallback

    class SpreadCallback(TrainerCallback):  # type: ignore[misc]
        stopped: str | None = None

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if reward.last and self.stopped is None:
                reason = guard.observe(
                    [b.reward for b in reward.last], [b.status for b in reward.last]
                )
                if reason is not None:
                    self.stopped = reason
                    control.should_training_stop = True
            return control

    return SpreadCallback()


def _run_trl(run: _RLRun) -> StageResult:
    from datasets import Dataset

    config = run.config
    algorithm = RLAlgorithm(config.rl_algorithm)
    if algorithm is RLAlgorithm.GRPO:
        from trl import GRPOConfig as TrainerConfig
        from trl import GRPOTrainer as Trainer
    else:
        from trl import RLOOConfig as TrainerConfig
        from trl import RLOOTrainer as Trainer

    started = time.perf_counter()
    model, tokenizer = load_trainable(
        run.base_model, cache_dir=run.cache_dir, merge=run.sft_adapter
    )
    ends = [*end_token_ids(model, tokenizer), tokenizer.pad_token_id]
    reward = CitationReward([i for i in ends if i is not None])
    guard = RewardSpreadGuard(config.rl_patience, max_length=run.limit)
    callback = _spread_callback(guard, reward)
    rows = [
        {"prompt": p.messages, "relevant": list(p.relevant), "n_passages": p.n_passages}
        for p in run.prompts
    ]
    args = TrainerConfig(
        **trainer_arguments(config, run.work_dir / "trainer"),
        max_steps=config.rl_steps,
        per_device_train_batch_size=config.num_generations,
        gradient_accumulation_steps=1,
        num_generations=config.num_generations,
        max_completion_length=run.limit,
        temperature=config.rl_temperature,
        beta=config.beta,
        learning_rate=config.rl_lr,
    )
    trainer = Trainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora_config(
            model, r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout
        ),
        callbacks=[callback],
    )
    without_printing(trainer).train()
    record = {**run.stage_config, "reward_statuses": dict(sorted(reward.status_totals.items()))}
    if callback.stopped is not None and not guard.saw_spread:
        history = step_history(trainer.state.log_history)
        return StageResult(
            "rl",
            None,
            int(trainer.state.global_step),
            time.perf_counter() - started,
            0,
            len(rows),
            history,
            record,
            skipped=f"stopped: {callback.stopped}",
        )
    return finished_stage(
        "rl",
        trainer,
        run.work_dir,
        started=started,
        examples=len(rows),
        config=record,
        stopped=callback.stopped,
    )
