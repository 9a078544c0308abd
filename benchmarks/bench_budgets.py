"""Budgets: ``ragtrail nightly --dry-run`` against the real night that follows it, and a night
with a small time budget.

Runs ``ragtrail nightly`` as a user would (subprocesses, one fresh ``RAGTRAIL_HOME``, the shipped
sample corpus, the bundled SmolLM2 for every role):

1. night 1 (cold, seed 13): fills the run history (the ``step_usage`` ledger);
2. ``nightly --dry-run --json`` with seed 14, then night 2 with seed 14: the evaluation steps
   sample other questions and mixtures (mostly new model calls), the corpus is unchanged (the
   test-set version and the judges' calibrations are reused). The estimate of each LLM step
   (model calls, minutes) is compared with what night 2 recorded; the target (issue 25) is
   within 30% on the night's model calls and minutes;
3. night 3 with seed 15 and ``budgets.night.max_minutes`` at about half of night 2's wall time:
   it must finish within the budget plus a small margin, the bounded steps marked partial.

    .venv/bin/python -m benchmarks.bench_budgets [--quick] [--write]

``--quick`` (for a loaded machine): no test-set generation (``--no-generate``: the golden sample
set only, so the judges' calibration for generation does not run either) and smaller samples
(:data:`QUICK_ENV`); the budgeted steps are then citations, sufficiency and evidence.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks._common import cli_env, machine_line, run_cli_json, write_section

TARGET_RATIO = 0.30
MARGIN_MIN = 0.5
"""Minutes a budgeted night may run past its budget (the last backend call, the report)."""
STEPS = ("calibration", "generation", "citations", "sufficiency", "evidence")
QUICK_ENV = {
    "RAGTRAIL_CITATIONS__MAX_ITEMS": "2",
    "RAGTRAIL_CITATIONS__SCENARIO_ITEMS": "1",
    "RAGTRAIL_SUFFICIENCY__MAX_ITEMS": "4",
    "RAGTRAIL_EVIDENCE__MAX_ITEMS": "2",
}


def _real_by_step(night: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Model calls and minutes per budgeted step, summed over its instances (the ledger)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0.0, "minutes": 0.0})
    for note in night["budgets"]["steps"]:
        out[note["step"]]["calls"] += note["calls"]
        out[note["step"]]["minutes"] += note["seconds"] / 60.0
    return out


def _estimated_by_step(dry: dict[str, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0.0, "minutes": 0.0})
    for step in dry["steps"]:
        out[step["step"]]["calls"] += step["calls"]
        out[step["step"]]["minutes"] += step["minutes"]
    return out


def _ratio(est: float, real: float) -> str:
    if real == 0:
        return "exact (0)" if est == 0 else "n/a (real 0)"
    return f"{est / real:.2f}"


def _within(est: float, real: float) -> bool:
    return (est == real == 0) or (real > 0 and abs(est - real) / real <= TARGET_RATIO)


def run(quick: bool = False) -> str:
    flags = ("--no-generate",) if quick else ()
    with tempfile.TemporaryDirectory(prefix="ragtrail-bench-budgets-") as tmp:
        home = Path(tmp) / "home"
        env = cli_env(home, **(QUICK_ENV if quick else {}))
        _first, first_s = run_cli_json(env, "nightly", *flags)
        env2 = {**env, "RAGTRAIL_SEED": "14"}
        dry, dry_s = run_cli_json(env2, "nightly", "--dry-run", *flags)
        second, second_s = run_cli_json(env2, "nightly", *flags)
        budget_min = round(second_s / 60.0 / 2.0, 1)
        env3 = {
            **env,
            "RAGTRAIL_SEED": "15",
            "RAGTRAIL_BUDGETS__NIGHT__MAX_MINUTES": str(budget_min),
        }
        third, third_s = run_cli_json(env3, "nightly", *flags)

    est, real = _estimated_by_step(dry), _real_by_step(second)
    rows = [
        "| step | estimated model calls | real | ratio | estimated minutes | real | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for step in STEPS:
        e, r = (
            est.get(step, {"calls": 0.0, "minutes": 0.0}),
            real.get(step, {"calls": 0.0, "minutes": 0.0}),
        )
        rows.append(
            f"| {step} | {e['calls']:.0f} | {r['calls']:.0f} | {_ratio(e['calls'], r['calls'])} | "
            f"{e['minutes']:.2f} | {r['minutes']:.2f} | {_ratio(e['minutes'], r['minutes'])} |"
        )
    est_calls = sum(v["calls"] for v in est.values())
    real_calls = sum(v["calls"] for v in real.values())
    est_llm_min = sum(v["minutes"] for v in est.values())
    real_llm_min = sum(v["minutes"] for v in real.values())
    est_night_min = dry["totals"]["minutes"]
    real_night_min = second_s / 60.0
    rows.append(
        f"| **LLM steps** | {est_calls:.0f} | {real_calls:.0f} | {_ratio(est_calls, real_calls)} | "
        f"{est_llm_min:.2f} | {real_llm_min:.2f} | {_ratio(est_llm_min, real_llm_min)} |"
    )
    night_row = (
        f"| **whole night** (wall, process start included) | | | | "
        f"{est_night_min if est_night_min is not None else float('nan'):.2f} | {real_night_min:.2f} | "
        f"{_ratio(est_night_min or 0.0, real_night_min)} |"
    )
    rows.append(night_row)
    calls_ok = _within(est_calls, real_calls)
    minutes_ok = est_night_min is not None and _within(est_night_min, real_night_min)
    llm_min_ok = _within(est_llm_min, real_llm_min)
    partial = [n for n in third["budgets"]["steps"] if n["partial"]]
    third_min = third_s / 60.0
    within_budget = third_min <= budget_min + MARGIN_MIN
    partial_lines = (
        "\n".join(
            f"- {n['step']} {n['scope']}: n={n['items_done']} of {n['items_planned']} ({n['reason']})"
            for n in partial
        )
        or "- none"
    )
    return (
        "## Budgets — `nightly --dry-run` vs the real night, and a night under a time budget\n\n"
        f"Machine: {machine_line()}; the benchmark ran alone. "
        + (
            "Quick configuration (`--quick`: `--no-generate`, the golden sample set only; "
            + ", ".join(f"`{k}={v}`" for k, v in QUICK_ENV.items())
            + "), which keeps the three nights within about 15 minutes on 2 cores. "
            if quick
            else "Default settings. "
        )
        + "SmolLM2-135M-Instruct on CPU for every role, SQLite; one fresh home; night 1 "
        f"cold with seed 13 ({first_s / 60:.1f} min) fills the history; the dry run (seed 14, "
        f"{dry_s:.0f} s, no model called) then night 2 (seed 14: other questions and mixtures, "
        "same corpus, so generation reuses its version and the generation judges their "
        "calibrations). The `calibration` row also holds the judge calibrations made inside the "
        "sufficiency and evidence steps (raters, correctness judge); the dry run does not estimate "
        "those (see README, Budgets).\n\n"
        + "\n".join(rows)
        + f"\n\nTarget (issue 25): the estimate within {TARGET_RATIO:.0%} of the real model calls "
        f"and minutes — model calls: {'met' if calls_ok else 'NOT met'}; LLM-step minutes: "
        f"{'met' if llm_min_ok else 'NOT met'}; whole-night minutes: "
        f"{'met' if minutes_ok else 'NOT met'}. The whole-night estimate adds the previous "
        "night's non-LLM minutes (ingest, retrieval, report; "
        f"{dry['totals']['other_minutes']} min from night 1, whose ingest was cold).\n\n"
        f"Night 3 (seed 15) with `budgets.night.max_minutes={budget_min}` (about half of night "
        f"2; `budgets.reserve_minutes` 1.0 kept for the non-LLM steps) took {third_min:.2f} min: "
        f"{'within' if within_budget else 'NOT within'} the budget + {MARGIN_MIN} min margin. "
        f"Steps marked partial ({len(partial)}):\n\n{partial_lines}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--quick", action="store_true", help="no generation, smaller samples")
    args = parser.parse_args()
    md = run(quick=args.quick)
    print(md)
    if args.write:
        write_section("budgets", md)


if __name__ == "__main__":
    main()
