"""The failure threshold of steps that call models (ragtrail.failures)."""

from __future__ import annotations

import pytest

from ragtrail.failures import (
    EvaluationFailedError,
    FailedStepsError,
    FailureCount,
    check_failures,
    combined,
    one_line,
)


def test_counts_take_the_first_error_on_one_line() -> None:
    count = FailureCount.of("answers", [None, "boom\n  at line 3", None, "second"])
    assert (count.failed, count.total, count.first_error) == (2, 4, "boom at line 3")
    assert count.share == 0.5
    assert count.text() == "2 of 4 answers failed (first error: boom at line 3)"
    assert FailureCount.of("answers", [None, None]).text() == "0 of 2 answers failed"
    assert FailureCount.of("answers", ["", None]).first_error == "failed"
    assert len(one_line("x" * 1000)) == 200 and one_line("x" * 1000).endswith("...")


@pytest.mark.parametrize(
    ("failed", "total", "max_share", "fails"),
    [
        (3, 6, 0.5, False),  # exactly half: not more than half
        (4, 6, 0.5, True),
        (1, 1, 0.5, True),
        (0, 0, 0.5, False),  # nothing tried fails nothing
        (1, 10, 0.0, True),  # 0: any failure fails
        (10, 10, 1.0, False),  # 1: never
    ],
)
def test_more_than_the_share_fails(failed: int, total: int, max_share: float, fails: bool) -> None:
    assert FailureCount("answers", failed, total).exceeds(max_share) is fails


def test_the_error_names_the_evaluation_the_counts_and_the_setting() -> None:
    counts = [
        FailureCount("mixture answers", 6, 6, "connection refused"),
        FailureCount("verdicts", 1, 6, "bad json"),
    ]
    with pytest.raises(EvaluationFailedError) as failed:
        check_failures(
            "citation evaluation",
            counts,
            max_share=0.5,
            setting="citations.max_failed_share",
            run_id="n.gold",
        )
    assert str(failed.value) == (
        "citation evaluation of run n.gold failed: 6 of 6 mixture answers failed (first error: "
        "connection refused); a step fails when more than 50% of its items fail "
        "(citations.max_failed_share=0.5)"
    )
    assert isinstance(failed.value, ValueError)  # tolerated where bad input is
    assert failed.value.failures == (counts[0],)
    check_failures("x", counts[1:], max_share=0.5, setting="s")  # below: quiet


def test_several_failures_combine_into_one_line() -> None:
    errors = [
        EvaluationFailedError("e", [FailureCount("a", 2, 2)], max_share=0.5, setting="s", run_id=r)
        for r in ("n.x", "n.y")
    ]
    assert combined(errors[:1]) is errors[0]
    both = combined(errors)
    assert isinstance(both, FailedStepsError) and isinstance(both, EvaluationFailedError)
    assert str(both) == f"{errors[0]} | {errors[1]}"
    assert len(both.failures) == 2 and both.setting == "s"
