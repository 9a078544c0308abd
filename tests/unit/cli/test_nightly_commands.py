"""The nightly's one drift line, from the drift step's result."""

from __future__ import annotations

from ragtrail.cli.nightly_commands import _drift_line
from ragtrail.summaries.drift_summary import DriftCheck, DriftedCell, DriftHeadline


def _headline(run: str, baseline: str | None, kind: str | None, fired: bool) -> DriftHeadline:
    drifted = [
        DriftedCell(
            evaluation="retrieval",
            metric="recall@5",
            facets={"label": "inclusive"},
            baseline=0.8,
            current=0.5,
            diff=-0.3,
            ci_low=-0.4,
            ci_high=-0.2,
            p_holm=0.001,
            threshold=0.05,
        )
    ]
    return DriftHeadline(
        decision_id=f"drift-{run}",
        run_id=run,
        qa_set_version="gs-1",
        baseline_run=baseline,
        baseline_kind=kind,
        status="checked" if baseline else "no_baseline",
        fired=fired,
        n_tested=1 if baseline else 0,
        drifted=drifted if fired else [],
    )


def test_the_drift_line_names_each_set_its_verdict_and_baseline() -> None:
    sets = {
        "gold": _headline("n2.gold", "n1.gold", "pinned", True),
        "generated": _headline("n2.generated", "n1.generated", "first", False),
        "team": _headline("n2.team", None, None, False),
    }
    checked = DriftCheck(run_id="n2", snapshot_id="s2", fired=True, sets=sets)
    assert _drift_line(checked) == (
        "drift: gold DRIFT in retrieval:recall@5 vs n1.gold (pinned); "
        "generated no drift vs n1.generated (first); team no baseline"
    )
    skipped = DriftCheck(run_id="n2", fired=False, sets={}, skipped="drift.enabled is false")
    assert _drift_line(skipped) == "drift: skipped (drift.enabled is false)"
    none = DriftCheck(run_id="n2", snapshot_id="s2", fired=False, sets={})
    assert _drift_line(none) == "drift: no run checked"
