"""Making sure an RL stage has a learning signal before it spends its budget.

Every on-policy algorithm (PPO, GRPO, RLOO) learns from differences between rewards: when every
completion of a rollout earns the same reward, the advantages are all zero and a step changes
nothing but the KL term. Two things caused that in practice, and this module guards against both:

* **completions cut off by the token limit.** A limit shorter than the answers the SFT stage
  taught cuts every completion before it closes its JSON, so every reward is 0.
  :func:`fitted_completion_length` sizes the limit from the SFT targets instead;
* **no spread at all.** :class:`RewardSpreadGuard` watches each iteration's rewards and stops the
  stage after ``patience`` iterations in a row without spread, with a reason that says what the
  completions were (e.g. "8 of 8 cut off at 96 tokens before any citation").

Statuses are the reward function's own words for each completion (``ok``, ``unparseable``,
``cut_off``, ...), counted per iteration so a reader sees why a reward was what it was.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

LENGTH_HEADROOM = 1.5
"""Completions may run this many times the longest SFT target's token count."""
MIN_COMPLETION_LENGTH = 16
SPREAD_EPSILON = 1e-6
"""Rewards whose population standard deviation is below this have no spread."""


def fitted_completion_length(
    target_lengths: Sequence[int], cap: int, *, headroom: float = LENGTH_HEADROOM
) -> int:
    """The RL completion limit: ``headroom`` times the longest SFT target (in tokens), plus one
    token for the end of turn, at least :data:`MIN_COMPLETION_LENGTH`, at most ``cap``; the cap
    itself when there is no target to size from."""
    if cap < 1:
        raise ValueError("cap must be >= 1")
    if not target_lengths:
        return cap
    if min(target_lengths) < 0:
        raise ValueError("target lengths must be >= 0")
    wanted = math.ceil(max(target_lengths) * headroom) + 1
    return min(cap, max(MIN_COMPLETION_LENGTH, wanted))


def status_counts(statuses: Sequence[str]) -> dict[str, int]:
    """How many completions had each status, in a stable (sorted) order."""
    return dict(sorted(Counter(statuses).items()))


def describe_statuses(statuses: Sequence[str], *, max_length: int | None = None) -> str:
    """One phrase for what the completions were, e.g. ``"8 of 8 cut_off_before_citation (at 96
    tokens)"`` or ``"3 of 4 ok, 1 of 4 unparseable"``."""
    total = len(statuses)
    parts = [f"{n} of {total} {status}" for status, n in status_counts(statuses).items()]
    text = ", ".join(parts) or "no completion"
    if max_length is not None and any(s.startswith("cut_off") for s in statuses):
        text += f" (token limit {max_length})"
    return text


@dataclass
class RewardSpreadGuard:
    """Stops an RL stage whose rewards have had no spread for ``patience`` iterations in a row.

    :meth:`observe` takes one iteration's rewards and statuses and returns the reason to stop,
    or None. :attr:`saw_spread` says whether any iteration so far had spread: a stage that never
    had one learned nothing (its adapter is worth nothing), one whose rewards converged (all 1)
    did learn and simply has nothing left to gain.
    """

    patience: int
    max_length: int | None = None
    saw_spread: bool = False
    flat_iterations: int = 0
    history: list[dict[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError("patience must be >= 1")

    def observe(self, rewards: Sequence[float], statuses: Sequence[str]) -> str | None:
        if len(rewards) != len(statuses):
            raise ValueError(f"{len(rewards)} rewards but {len(statuses)} statuses")
        if not rewards:
            raise ValueError("an iteration without rewards")
        self.history.append(status_counts(statuses))
        mean = sum(rewards) / len(rewards)
        spread = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        if spread >= SPREAD_EPSILON:
            self.saw_spread = True
            self.flat_iterations = 0
            return None
        self.flat_iterations += 1
        if self.flat_iterations < self.patience:
            return None
        what = describe_statuses(statuses, max_length=self.max_length)
        return (
            f"no reward spread for {self.flat_iterations} iteration(s) in a row: every completion "
            f"earned {mean:.3f} ({what}); the advantages are all zero, so further steps would "
            "not learn"
        )
