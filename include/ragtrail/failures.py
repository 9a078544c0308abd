"""When a step's model calls mostly failed, the step failed (README: "What ragtrail refuses and
why").

Every step that calls an LLM and stores what came back counts, per kind of item, how many items
failed (an error from the endpoint, a reply that did not parse, one cut off at the token limit)
and how many it tried. A failed item is left out of the metrics and counted, as it always was;
but when more than the step's ``max_failed_share`` of one kind failed (a dead endpoint, a model
that cannot follow the format), what is left is no measurement: the step raises
:class:`EvaluationFailedError` instead of storing numbers that pose as one. The message is one
line: which evaluation, how many of how many failed, the first error, and the setting that
moves the threshold.

This module is at the bottom of the package so that the pipeline, training and the command line
can all name the error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_MAX_FAILED_SHARE = 0.5
"""More than half of a kind of items failed: the step failed."""
MAX_ERROR_CHARS = 200
"""The first error is quoted up to this many characters (endpoint errors can be pages long)."""


def one_line(text: str, limit: int | None = MAX_ERROR_CHARS) -> str:
    """``text`` on one line (whitespace runs folded), cut at ``limit`` characters (None: not
    cut)."""
    folded = " ".join(str(text).split())
    return folded if limit is None or len(folded) <= limit else folded[: limit - 3] + "..."


@dataclass(frozen=True)
class FailureCount:
    """How many items of one kind failed, of how many tried, and the first error."""

    what: str
    failed: int
    total: int
    first_error: str | None = None

    @classmethod
    def of(cls, what: str, errors: Iterable[str | None]) -> FailureCount:
        """Count ``errors``: one entry per item tried, None for an item that worked, else why it
        failed (an empty reason counts as a failure too)."""
        failed = total = 0
        first: str | None = None
        for error in errors:
            total += 1
            if error is not None:
                failed += 1
                if first is None:
                    first = one_line(error) or "failed"
        return cls(what, failed, total, first)

    @property
    def share(self) -> float:
        return self.failed / self.total if self.total else 0.0

    def exceeds(self, max_share: float) -> bool:
        """More than ``max_share`` of the items failed (nothing tried never fails)."""
        return self.total > 0 and self.failed > max_share * self.total

    def text(self) -> str:
        head = f"{self.failed} of {self.total} {self.what} failed"
        return head if self.first_error is None else f"{head} (first error: {self.first_error})"


class EvaluationFailedError(ValueError):
    """A step whose model calls failed beyond its threshold: nothing it measured may be used.

    A ValueError, so that code which tolerates a bad input (a judge that cannot be calibrated is
    reported and advises) tolerates a failed calibration the same way; the command line exits
    with code 3 for it (2 is a refused input, 1 a bug).
    """

    def __init__(
        self,
        evaluation: str,
        failures: Sequence[FailureCount],
        *,
        max_share: float,
        setting: str,
        run_id: str | None = None,
    ) -> None:
        self.evaluation = evaluation
        self.failures = tuple(failures)
        self.max_share = max_share
        self.setting = setting
        self.run_id = run_id
        where = f" of run {run_id}" if run_id else ""
        counts = "; ".join(f.text() for f in self.failures)
        super().__init__(
            f"{evaluation}{where} failed: {counts}; a step fails when more than "
            f"{max_share:.0%} of its items fail ({setting}={max_share:g})"
        )


class FailedStepsError(EvaluationFailedError):
    """Several instances of one mapped step failed (one per QA set of a night, say): every
    message, in order, in one line."""

    def __init__(self, errors: Sequence[EvaluationFailedError]) -> None:
        first = errors[0]
        self.errors = tuple(errors)
        self.evaluation = first.evaluation
        self.failures = tuple(f for e in errors for f in e.failures)
        self.max_share = first.max_share
        self.setting = first.setting
        self.run_id = first.run_id
        ValueError.__init__(self, " | ".join(str(e) for e in errors))


def check_failures(
    evaluation: str,
    counts: Iterable[FailureCount],
    *,
    max_share: float,
    setting: str,
    run_id: str | None = None,
) -> None:
    """Raise :class:`EvaluationFailedError` naming every kind of item of which more than
    ``max_share`` failed; return quietly otherwise (the failures stay counted where they are)."""
    over = [c for c in counts if c.exceeds(max_share)]
    if over:
        raise EvaluationFailedError(
            evaluation, over, max_share=max_share, setting=setting, run_id=run_id
        )


def combined(errors: Sequence[EvaluationFailedError]) -> EvaluationFailedError:
    """One error for several (the first alone when there is one)."""
    return errors[0] if len(errors) == 1 else FailedStepsError(errors)
