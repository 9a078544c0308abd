"""The ``ragtrail`` program: ``python -m ragtrail.cli`` and the ``ragtrail`` script run ``main``."""

from __future__ import annotations

import gc

from ragtrail.cli import app

COLLECTOR_THRESHOLDS = (50_000, 20, 10)
"""Python's cyclic collector runs when allocations minus deallocations pass 50,000 (default: 700).
Objects reach the older generations after 20 such runs (default: 10), and are checked there after
10 runs of the middle generation (the default). A night allocates millions of short-lived objects
(rows, records, model outputs). At the default 700, the collector took 1.2-1.3 s of an 8 s warm
night, and 10 s of a cold night's first four minutes. Most of that was full collections over the
million objects the libraries leave at import (BENCHMARKS.md). Reference counting still frees at
once every object that is not in a cycle; a cycle is freed at the next collection of its
generation."""


def main() -> None:
    """Run the command line as a program, with the collector set for batch work
    (:data:`COLLECTOR_THRESHOLDS`). Only the program sets it: importing ragtrail (an Airflow
    worker, a notebook) leaves the process's collector alone."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    app()


if __name__ == "__main__":
    main()
