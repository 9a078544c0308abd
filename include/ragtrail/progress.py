"""Progress of long steps (model calls, evaluation queries, generation shards) as plain updates.

A step hands ``(task, done, total)`` updates to a :class:`ProgressSink`; it neither knows nor
cares whether they become a terminal bar (the CLI's, built on rich in ``ragtrail.cli.common`` only) or log
lines (:class:`LogProgress`, the default, which Airflow shows in the task log). Counts of one task
only grow; ``total`` may grow too (a retry adds requests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ProgressUpdate:
    """Where one task stands: ``done`` of ``total`` units; ``cache_hits`` of those were served
    from a cache (model calls), so a rate counts them too but they cost nothing."""

    task: str
    done: int
    total: int
    cache_hits: int = 0


class ProgressSink(Protocol):
    def __call__(self, update: ProgressUpdate) -> None: ...


def no_progress(update: ProgressUpdate) -> None:
    """A sink that drops every update."""


@dataclass
class _TaskClock:
    started: float
    last_line: float


class LogProgress:
    """Log lines with rate and ETA: a task's first update, its last (``done == total``), and in
    between at most one line per ``every_s`` seconds, e.g.
    ``model calls generate.question 120/300, 2.1/s, ETA 85 s (12 cache hits)``."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.every_s = every_s
        self.clock = clock
        self._tasks: dict[str, _TaskClock] = {}

    def __call__(self, update: ProgressUpdate) -> None:
        now = self.clock()
        state = self._tasks.get(update.task)
        finished = update.done >= update.total
        if state is None:
            self._tasks[update.task] = _TaskClock(started=now, last_line=now)
        elif not finished and now - state.last_line < self.every_s:
            return
        else:
            state.last_line = now
        if finished:
            self._tasks.pop(update.task, None)
        self.logger.info("%s", progress_line(update, now - (state.started if state else now)))


def progress_line(update: ProgressUpdate, elapsed_s: float) -> str:
    """``"<task> done/total, r/s, ETA n s (h cache hits)"``; rate and ETA once time has passed."""
    parts = [f"{update.task} {update.done}/{update.total}"]
    if elapsed_s > 0 and update.done > 0:
        rate = update.done / elapsed_s
        parts.append(f"{rate:.1f}/s")
        if update.done < update.total:
            parts.append(f"ETA {(update.total - update.done) / rate:.0f} s")
        else:
            parts.append(f"done in {elapsed_s:.0f} s")
    line = ", ".join(parts)
    return f"{line} ({update.cache_hits} cache hits)" if update.cache_hits else line
