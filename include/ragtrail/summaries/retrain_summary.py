"""What the retraining flow's steps hand on: the data split, the trained challenger version and
the champion/challenger gate's outcome."""

from __future__ import annotations

from pydantic import Field

from ragtrail.jsonsafe import JsonObject
from ragtrail.summaries.base import Record, is_none


class TrainingSplit(Record):
    """The split of the corpus's QA sets into training prompts and frozen evaluation mixtures:
    where it is stored, its version, the snapshot it was drawn on and its counts."""

    split_uri: str
    split_version: str
    snapshot_id: str
    items: int
    eval_items: int
    eval_mixtures: int
    eval_items_skipped: int
    train_items: int
    train_prompts: int
    dropped_items: int
    eval_documents: int
    train_documents: int


class ChallengerVersion(Record):
    """The model version trained on a split and registered (``reused``: this run had already
    registered it, so nothing was trained again and the training figures are absent); the RL
    stage's algorithm, mean reward and, where it did not run through, why."""

    model: str
    version: int
    reused: bool
    base_model: str | None = Field(None, exclude_if=is_none)
    wall_seconds: float | None = Field(None, exclude_if=is_none)
    sft_steps: int | None = Field(None, exclude_if=is_none)
    rl_steps: int | None = Field(None, exclude_if=is_none)
    rl_algorithm: str | None = Field(None, exclude_if=is_none)
    rl_mean_reward: float | None = Field(None, exclude_if=is_none)
    rl_note: str | None = Field(None, exclude_if=is_none)
    """Why the RL stage was skipped (no adapter) or stopped early; absent when it ran through."""


class GateOutcome(Record):
    """The promotion gate's decision on a challenger: promoted or kept, why, what it was compared
    with, both models' citation F1 per system and mixture type (the evaluation's headline; None
    when the challenger already served), and the runs it became the drift baseline on."""

    model: str
    version: int
    promoted: bool
    reason: str
    compared_with: str | None = Field(None, exclude_if=is_none)
    current_f1: JsonObject | None = Field(None, exclude_if=is_none)
    challenger_f1: JsonObject | None = Field(None, exclude_if=is_none)
    accepted_on: list[str] | None = Field(None, exclude_if=is_none)


class EvidenceTrainingSplit(Record):
    """The evidence extractor's split: where it is stored, its version, the snapshot, counts."""

    split_uri: str
    split_version: str
    snapshot_id: str
    items: int
    train_prompts: int
    eval_items: int
    dropped: int
    held_out_documents: int


class EvidenceChallenger(Record):
    """The extractor version trained on a split and registered (``reused``: already trained by
    this run, so nothing was trained again and the training figures are absent)."""

    model: str
    version: int
    reused: bool
    base_model: str | None = Field(None, exclude_if=is_none)
    wall_seconds: float | None = Field(None, exclude_if=is_none)
    lpo_steps: int | None = Field(None, exclude_if=is_none)
    preference_lists: int | None = Field(None, exclude_if=is_none)
    expert_weights: dict[str, float] | None = Field(None, exclude_if=is_none)


class EvidenceGateOutcome(Record):
    """The extractor gate's decision: promoted or kept, why, what it was compared with, and
    both extractors' headline on the frozen held-out questions (None when already champion)."""

    model: str
    version: int
    promoted: bool
    reason: str
    compared_with: str | None = Field(None, exclude_if=is_none)
    current: JsonObject | None = Field(None, exclude_if=is_none)
    challenger: JsonObject | None = Field(None, exclude_if=is_none)
