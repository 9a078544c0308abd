"""Shared helpers for benchmarks: timing, percentiles, shared-data lookup, BENCHMARKS.md updates."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ragtrail.paths import REPO_ROOT, shared_dir

BENCH_FILE = REPO_ROOT / "BENCHMARKS.md"


class SkipBenchmark(Exception):
    """Raised when a benchmark's input data is absent (e.g. ../shared is not mounted)."""


def require_shared(*parts: str) -> Path:
    root = shared_dir()
    path = root.joinpath(*parts) if root else None
    if path is None or not path.exists():
        raise SkipBenchmark(f"shared data not found: {'/'.join(parts)} (set RAGTRAIL_SHARED_DIR)")
    return path


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``ragtrail`` subprocess run as a user would: its own home, offline
    model hubs, no tokenizer thread pools."""
    return {
        **os.environ,
        "RAGTRAIL_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }


def run_cli_json(env: dict[str, str], *args: str) -> tuple[dict[str, Any], float]:
    """One ``ragtrail <args> --json`` subprocess: its JSON and wall seconds (raises with the end
    of its stderr when it fails)."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ragtrail.cli", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"ragtrail {args[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout), wall


@contextmanager
def timer() -> Iterator[Callable[[], float]]:
    start = time.perf_counter()
    elapsed: list[float] = []
    yield lambda: elapsed[0] if elapsed else time.perf_counter() - start
    elapsed.append(time.perf_counter() - start)


def percentiles_ms(samples: list[float]) -> tuple[float, float]:
    arr = np.asarray(samples) * 1000.0
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 95))


def machine_line() -> str:
    import os

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_section(name: str, markdown: str) -> None:
    """Replace the section between `<!-- bench:name -->` markers in BENCHMARKS.md (or append it)."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{markdown.strip()}\n{end}"
    text = BENCH_FILE.read_text() if BENCH_FILE.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else f"{text.rstrip()}\n\n{block}\n"
    )
    BENCH_FILE.write_text(text)


def section_main(name: str, run: Callable[[], str], description: str) -> None:
    """The command line of a benchmark without options of its own: print its section and, with
    ``--write``, put it into BENCHMARKS.md under ``name``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    section = run()
    print(section)
    if args.write:
        write_section(name, section)
