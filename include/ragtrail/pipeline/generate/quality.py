"""Great Expectations checks of a published test-set version."""

from __future__ import annotations

from typing import Any

from ragtrail.generate.critiques import CRITERIA
from ragtrail.jsonsafe import JsonObject
from ragtrail.runtime import Runtime
from ragtrail.summaries.generation_summary import GenerationSummary
from ragtrail.testset.export import to_frame
from ragtrail.testset.store import TestSetStore


def check_testset_quality(
    rt: Runtime, summary: GenerationSummary, out_dir: Any
) -> list[JsonObject]:
    """GX on a test-set version: item invariants (fail) and label balance vs quotas (warn).

    Raises :class:`QualityGateError` when an item invariant fails, so a broken set is never
    announced to evaluation.
    """
    from ragtrail.quality.runner import QualityRunner, enforce
    from ragtrail.quality.suites import (
        balance_frame,
        prepare_testset,
        testset_balance_suite,
        testset_suite,
    )

    testsets = TestSetStore(rt.engine)
    version = summary.version
    if version is None:
        raise ValueError("generation accepted no item: there is no version to check")
    items = testsets.version_items(version)
    frame = to_frame(items, qids=testsets.version_qids(version))
    expected = [sum(crit.applies_to(c) for crit in CRITERIA.values()) for c in items]
    runner = QualityRunner(out_dir)
    results = [
        runner.validate("testset", prepare_testset(frame, expected), testset_suite()),
        runner.validate(
            "testset_balance",
            balance_frame(summary.achieved, summary.targets),
            testset_balance_suite(rt.settings.generation.balance_tolerance),
        ),
    ]
    runner.build_docs()
    enforce(results)
    return [r.as_dict() for r in results]
