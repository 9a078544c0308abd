"""The RL stage's learning-signal guards: the completion limit fitted to the SFT targets, and the
guard that stops after iterations whose rewards have no spread (with what the completions were)."""

from __future__ import annotations

import pytest

from ragtrail.train.reward_signal import (
    RewardSpreadGuard,
    describe_statuses,
    fitted_completion_length,
)


def test_completion_length_is_fitted_to_the_targets() -> None:
    assert fitted_completion_length([60, 90, 75], cap=256) == 136  # ceil(90 * 1.5) + 1
    assert fitted_completion_length([200], cap=256) == 256  # capped
    assert fitted_completion_length([4], cap=256) == 16  # at least 16
    assert fitted_completion_length([], cap=128) == 128  # nothing to fit to: the cap
    with pytest.raises(ValueError):
        fitted_completion_length([-1], cap=128)


def test_guard_stops_after_patience_flat_iterations() -> None:
    guard = RewardSpreadGuard(patience=2, max_length=96)
    cut = ["cut_off_before_citation"] * 4
    assert guard.observe([0.0] * 4, cut) is None  # one flat iteration: not yet
    reason = guard.observe([0.0] * 4, cut)
    assert reason is not None
    assert "no reward spread for 2 iteration(s)" in reason
    assert "4 of 4 cut_off_before_citation (token limit 96)" in reason
    assert not guard.saw_spread


def test_spread_resets_the_count_and_is_remembered() -> None:
    guard = RewardSpreadGuard(patience=2)
    assert guard.observe([0.0, 0.0], ["ok", "ok"]) is None
    assert guard.observe([0.0, 0.5], ["ok", "ok"]) is None  # spread: count back to 0
    assert guard.observe([1.0, 1.0], ["ok", "ok"]) is None
    reason = guard.observe([1.0, 1.0], ["ok", "ok"])
    assert reason is not None and "earned 1.000 (2 of 2 ok)" in reason
    assert guard.saw_spread  # converged after learning, not a stage that never learned
    assert guard.history[-1] == {"ok": 2}


def test_guard_checks_its_input() -> None:
    with pytest.raises(ValueError):
        RewardSpreadGuard(patience=0)
    with pytest.raises(ValueError, match="statuses"):
        RewardSpreadGuard(patience=1).observe([0.0], [])
    assert describe_statuses(["ok", "unparseable", "ok"]) == "2 of 3 ok, 1 of 3 unparseable"
