"""What every command group shares: the stderr console, the common options, strict JSON output,
clear user errors (exit code 2), the runtime context and the progress bars of long steps."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from ragtrail.progress import ProgressUpdate
from ragtrail.redact import redact
from ragtrail.runtime import Runtime

console = Console(stderr=True)
"""Messages, progress and errors go to stderr; stdout carries only results (tables, JSON)."""

JsonFlag = Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")]
CorpusOpt = Annotated[str, typer.Option("--corpus", help="Corpus name.")]
AllowMassRemovalFlag = Annotated[
    bool,
    typer.Option(
        "--allow-mass-removal",
        help="Let the ingest remove more than ingest.max_removal_share of the corpus (or all "
        "of it); without it such an ingest stops before changing anything (exit code 2).",
    ),
]


def emit(data: Any, what: str = "output") -> None:
    """``data`` as strict JSON on stdout: a NaN or infinity anywhere fails, naming its path."""
    from ragtrail import jsonsafe

    sys.stdout.write(jsonsafe.dumps(data, what, indent=2) + "\n")


DEBUG_ENV = "RAGTRAIL_DEBUG"
_debug = False


def set_debug(enabled: bool) -> None:
    """Turn the tracebacks of user errors on or off (the root ``--debug`` option)."""
    global _debug
    _debug = enabled


def debug_enabled() -> bool:
    """``--debug`` was given or ``RAGTRAIL_DEBUG`` is 1/true/yes/on."""
    return _debug or os.environ.get(DEBUG_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


EXIT_INPUT_ERROR = 2
"""A refused input (file, name, parameter, setting): nothing ran."""
EXIT_FAILED_EVALUATION = 3
"""An evaluation ran and failed: most of its model calls failed (a dead endpoint, a model that
cannot follow the format); its run is stored as failed with the reason."""


@contextmanager
def user_errors() -> Iterator[None]:
    """Errors caused by input (files, names, parameters, settings) end in one clear line and
    exit code 2, an evaluation whose model calls mostly failed in one line and exit code 3; the
    traceback is printed above it only with ``--debug`` / ``RAGTRAIL_DEBUG=1`` (for bug
    reports). Any other exception is a bug and keeps its traceback (exit code 1)."""
    from ragtrail.embed.embedder import ModelLoadError
    from ragtrail.failures import EvaluationFailedError
    from ragtrail.ingest.sources import SourceError

    try:
        yield
    except EvaluationFailedError as exc:
        _one_line_error(exc)
        raise typer.Exit(EXIT_FAILED_EVALUATION) from exc
    except (ValueError, FileNotFoundError, SourceError, ModelLoadError) as exc:
        _one_line_error(exc)
        raise typer.Exit(EXIT_INPUT_ERROR) from exc


def _one_line_error(exc: BaseException) -> None:
    # redacted: a message may quote a model spec, a database or an endpoint URL
    if debug_enabled():
        sys.stderr.write(redact("".join(traceback.format_exception(exc))))
        sys.stderr.flush()
    console.print(f"[red]error:[/red] {redact(str(exc))}", highlight=False, soft_wrap=True)


@contextmanager
def runtime() -> Iterator[Runtime]:
    """A :class:`Runtime` closed on the way out; input errors inside end as :func:`user_errors`."""
    with user_errors(), Runtime() as rt:
        yield rt


def progress_factory(progress: Progress, label: str) -> Callable[[int], Callable[[int], None]]:
    """A ``total -> advance(n)`` factory (the ingest's callback): one bar named ``label``."""

    def factory(total: int) -> Callable[[int], None]:
        task = progress.add_task(label, total=total)
        return lambda n: progress.advance(task, n)

    return factory


def step_progress(progress: Progress) -> Callable[[str, int, int], None]:
    """A bar per mapped step of the night (shards done / shards planned)."""
    bars: dict[str, TaskID] = {}

    def advance(step: str, done: int, total: int) -> None:
        if step not in bars:
            bars[step] = progress.add_task(f"{step} shards", total=total)
        progress.update(bars[step], completed=done)

    return advance


class _RateColumn(ProgressColumn):
    """Units per second of a task ("2.1/s"), blank until rich has measured a speed."""

    def render(self, task: Task) -> Text:
        return Text(
            "" if task.speed is None else f"{task.speed:.1f}/s", style="progress.data.speed"
        )


def _progress(quiet: bool = False) -> Progress:
    """The bars of long steps (on stderr). Disabled with ``quiet`` (``--json``) or when stdout
    or stderr is not a terminal, so piped and scripted runs get their output and nothing else."""
    shown = not quiet and console.is_terminal and sys.stdout.isatty()
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeRemainingColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not shown,
    )


def _bars(progress: Progress) -> Callable[[ProgressUpdate], None]:
    """A :class:`ragtrail.progress.ProgressSink` drawing one bar per task (model calls of each
    stage, retrieval queries, generation shards), cache hits in the description."""
    bars: dict[str, TaskID] = {}

    def update(u: ProgressUpdate) -> None:
        if u.task not in bars:
            bars[u.task] = progress.add_task(u.task, total=u.total)
        hits = f" ({u.cache_hits} cached)" if u.cache_hits else ""
        progress.update(
            bars[u.task], completed=u.done, total=u.total, description=f"{u.task}{hits}"
        )

    return update


@contextmanager
def runtime_with_progress(quiet: bool) -> Iterator[tuple[Runtime, Progress]]:
    """A runtime whose long steps draw bars (see :func:`_progress`) instead of log lines."""
    with runtime() as rt, _progress(quiet) as progress:
        if not progress.disable:
            rt.progress = _bars(progress)
        yield rt, progress
