"""Retraining of the citation answerer (issue 11, METHODS §7): data split, reward, SFT targets,
SFT and RL stages, one entry point that writes a model bundle, and the held-out evaluation.

- :mod:`.data`: :func:`split_citation_data` -> :class:`CitationSplit` (by question and document).
- :mod:`.reward`: :func:`citation_reward` and :class:`CitationReward` (TRL signature, the
  latter told which completions were cut off), :func:`score_reply`.
- :mod:`.targets`: :func:`make_targets` (teacher or best-of-N self-distillation).
- :mod:`.sft`, :mod:`.rl`: SFT (TRL SFTTrainer) and RL (PPO of our own, :mod:`ragtrail.train.ppo`,
  or TRL's GRPO / RLOO) with LoRA.
- :mod:`.run`: :func:`train_citation_model` -> :class:`CitationTrainingResult`.
- :mod:`.evaluation`: :func:`evaluate_citation_model` on the split's frozen mixtures.

torch, transformers, peft and TRL are imported inside the stage functions, so importing this
package (e.g. at DAG-parse time) loads none of them.
"""

from __future__ import annotations

from ragtrail.train.citation.config import CitationTrainingConfig
from ragtrail.train.citation.data import (
    CitationPrompt,
    CitationSplit,
    CitationSplitError,
    split_citation_data,
)
from ragtrail.train.citation.evaluation import evaluate_citation_model, headline
from ragtrail.train.citation.reward import (
    CitationReward,
    RewardBreakdown,
    citation_reward,
    score_reply,
)
from ragtrail.train.citation.run import (
    BUNDLE_KIND,
    CitationTrainingResult,
    train_citation_model,
    training_prompts,
)
from ragtrail.train.citation.stage import StageResult
from ragtrail.train.citation.targets import SFTTarget, TargetReport, make_targets

__all__ = [
    "BUNDLE_KIND",
    "CitationPrompt",
    "CitationReward",
    "CitationSplit",
    "CitationSplitError",
    "CitationTrainingConfig",
    "CitationTrainingResult",
    "RewardBreakdown",
    "SFTTarget",
    "StageResult",
    "TargetReport",
    "citation_reward",
    "evaluate_citation_model",
    "headline",
    "make_targets",
    "score_reply",
    "split_citation_data",
    "train_citation_model",
    "training_prompts",
]
