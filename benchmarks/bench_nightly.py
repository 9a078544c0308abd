"""The default nightly end to end: the README's main job, cold and then warm, in one run.

Runs ``ragtrail nightly --json`` twice as a user would (subprocesses, one fresh ``RAGTRAIL_HOME``):
a cold night (empty caches: ingest, golden set, judge calibration, generation with the bundled
SmolLM2, evaluation of both sets) and a warm night right after it (unchanged corpus: no new
snapshot, calibrations and the test-set version reused, every model call cached). Reports each
night's wall time, peak RSS and new model calls (rows added to the LLM cache), the warm/cold
ratio, the verdicts the cold night's judge calibration asked for, and each step's wall time in
both nights. Target (issue 29): the cold night under 5 minutes after setup on 2 CPU cores.

    .venv/bin/python -m benchmarks.bench_nightly [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from benchmarks._common import cli_env, machine_line, write_section
from ragtrail.config import load_settings
from ragtrail.hardware import resolve_model_dtype

TARGET_S = 300.0


def _night(env: dict[str, str]) -> tuple[dict[str, Any], float, float]:
    """One ``ragtrail nightly --json``: its result, wall seconds and peak RSS (MiB); a failed
    night raises with the end of its stderr."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragtrail.cli", "nightly", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        stdout = proc.stdout.read() if proc.stdout else ""
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            stderr.seek(0)
            tail = stderr.read()[-4000:]
            raise RuntimeError(f"ragtrail nightly failed (status {status}):\n{tail}")
    return json.loads(stdout), wall, usage.ru_maxrss / 1024  # Linux: ru_maxrss in KiB


def _scalar(home: Path, sql: str) -> Any:
    engine = create_engine(f"sqlite:///{home / 'ragtrail.db'}")
    with engine.connect() as conn:
        value = conn.execute(text(sql)).all()
    engine.dispose()
    return value


def _cached_calls(home: Path) -> int:
    """Model replies in the content-addressed LLM cache: one per distinct model call ever made."""
    return int(_scalar(home, "SELECT count(*) FROM llm_cache")[0][0])


def _calibration_verdicts(home: Path) -> tuple[int, int]:
    """(verdicts the calibrations asked for, calibrations stored) in the home's database."""
    rows = _scalar(home, "SELECT kind, n FROM judge_calibrations")
    # a categorical calibration judges n items; a contrast judges n intact + n perturbed
    return sum(n if kind == "categorical" else 2 * n for kind, n in rows), len(rows)


def run(keep_json: Path | None = None) -> str:
    with tempfile.TemporaryDirectory(prefix="ragtrail-bench-nightly-") as tmp:
        home = Path(tmp) / "home"
        env = cli_env(home)
        cold, cold_s, cold_rss = _night(env)
        cold_cached = _cached_calls(home)
        warm, warm_s, warm_rss = _night(env)
        warm_new = _cached_calls(home) - cold_cached
        verdicts, calibrations = _calibration_verdicts(home)
        dtype = _llm_dtype(home)
    if keep_json is not None:
        keep_json.mkdir(parents=True, exist_ok=True)
        for name, result in (("cold", cold), ("warm", warm)):
            (keep_json / f"{name}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    generation = cold["generation"] or {}
    accepted = generation.get("accepted") or {}
    sets = ", ".join(
        f"{name} ({s['n_questions']} questions)" for name, s in cold["evaluation"]["sets"].items()
    )
    warm_generation = warm["generation"] or {}
    reused = warm_generation.get("regenerated") is False
    rows = [
        "| night | wall | peak RSS | new model calls (cache rows added) | test-set version |",
        "|---|---|---|---|---|",
        f"| cold (fresh home) | {cold_s:.0f} s | {cold_rss:.0f} MiB | {cold_cached} | "
        f"{generation.get('version')} (new) |",
        f"| warm (unchanged corpus, right after) | {warm_s:.0f} s | {warm_rss:.0f} MiB | "
        f"{warm_new} | {warm_generation.get('version')} "
        f"({'reused' if reused else 'regenerated'}) |",
    ]
    steps = [
        "| step | cold | warm |",
        "|---|---|---|",
        *(
            f"| {name} | {seconds:.1f} s | {warm['step_seconds'].get(name, 0.0):.1f} s |"
            for name, seconds in cold["step_seconds"].items()
        ),
    ]
    stepped = sum(cold["step_seconds"].values())
    verdict = "met" if cold_s < TARGET_S else "NOT met"
    return (
        "## Nightly end to end — `ragtrail nightly` on the shipped sample corpus\n\n"
        f"Machine: {machine_line()}. Default settings: embedded index, all-MiniLM-L6-v2 on the "
        "default embedding backend (OpenVINO, bf16 where the CPU has the units), "
        f"SmolLM2-135M-Instruct (local transformers, CPU, {dtype}) for every LLM role, "
        "SQLite; both nights "
        "in one run, one after the other, nothing else running.\n\n"
        + "\n".join(rows)
        + f"\n\nWarm / cold wall-time ratio: {warm_s / cold_s:.2f}. Target: the cold night under "
        f"{TARGET_S / 60:.0f} minutes after setup — {verdict} ({cold_s / 60:.1f} min). The cold "
        f"night calibrated {calibrations} judges (the labeller, 8 critiques, the sufficiency "
        "raters and the correctness judge), asking for "
        f"{verdicts} verdicts (before de-duplication and the cache); it evaluated {sets}; the "
        f"generated version holds {sum(accepted.values())} items {accepted}; the generation reported "
        f"{generation.get('model_calls')} model calls (retries included; "
        f"{generation.get('cache_hits')} cache hits).\n\n"
        f"Per step (the steps' sum is {stepped:.0f} s of the cold night's {cold_s:.0f} s; the rest "
        "is the process start, imports and model loading outside the steps):\n\n"
        + "\n".join(steps)
        + "\n"
    )


def _llm_dtype(home: Path) -> str:
    """The nights' LLM dtype as their settings give it (the environment and ``home``)."""
    setting = load_settings(home=home).generation.llm_dtype
    resolved = resolve_model_dtype(setting)
    return f"llm_dtype {setting}: {resolved}" if setting == "auto" else resolved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--keep-json", type=Path, help="write both nights' --json results here")
    args = parser.parse_args()
    section = run(args.keep_json)
    print(section)
    if args.write:
        write_section("nightly", section)


if __name__ == "__main__":
    main()
