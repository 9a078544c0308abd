"""The nightly's one drift line, from the drift step's result."""

from __future__ import annotations

from ragtrail.cli.nightly_commands import _drift_line


def test_the_drift_line_names_each_set_its_verdict_and_baseline() -> None:
    sets = {
        "gold": {
            "baseline_run": "n1.gold",
            "baseline_kind": "pinned",
            "fired": True,
            "drifted": [{"evaluation": "retrieval", "metric": "recall@5"}],
        },
        "generated": {"baseline_run": "n1.generated", "baseline_kind": "first", "fired": False},
        "team": {"baseline_run": None},
    }
    assert _drift_line({"sets": sets}) == (
        "drift: gold DRIFT in retrieval:recall@5 vs n1.gold (pinned); "
        "generated no drift vs n1.generated (first); team no baseline"
    )
    assert _drift_line({"skipped": "drift.enabled is false"}) == (
        "drift: skipped (drift.enabled is false)"
    )
    assert _drift_line({"sets": {}}) == "drift: no run checked"
