"""Every judge ragtrail builds, looked up by name.

The pipeline modules that build judges register them in :data:`~ragtrail.judges.registry.JUDGES`
when they are imported: :mod:`ragtrail.pipeline.judges` (the labeller, the critiques, the
entailment judges), :mod:`ragtrail.pipeline.sufficiency.raters` (the sufficiency raters) and
:mod:`ragtrail.pipeline.correctness` (the correctness judge). This module imports all of them, so
its lookups know every judge whichever step ran before; the CLI reads judges through it.
"""

from __future__ import annotations

from ragtrail.generate.judges import LABELLER
from ragtrail.judges.contract import Judge
from ragtrail.judges.registry import JUDGES, CalibrationRequest, JudgeRegistry
from ragtrail.pipeline import correctness, judges  # noqa: F401  (importing registers judges)
from ragtrail.pipeline.judges import labeller_name
from ragtrail.pipeline.sufficiency import raters  # noqa: F401  (importing registers judges)
from ragtrail.runtime import Runtime
from ragtrail.storage.judge_store import CalibrationRecord


def registered_judges() -> JudgeRegistry:
    """The judge registry with every judge of the platform in it."""
    return JUDGES


def judge_by_name(rt: Runtime, name: str) -> Judge:
    """The judge ``name`` as the settings configure it; an unknown name is a ValueError that
    lists the known ones."""
    return JUDGES.build(rt, name)


def calibrate_judge(rt: Runtime, name: str, request: CalibrationRequest) -> list[CalibrationRecord]:
    """Calibrate the judge ``name`` (or every member of a group such as ``critiques``) on the
    request's references and store the results; one record per judge."""
    return JUDGES.calibrate(rt, name, request)


def listed_judges(rt: Runtime) -> tuple[list[Judge], dict[str, str]]:
    """The configured judges ``ragtrail judge list`` shows (the configured labeller, the
    critiques, the configured entailment judge), and, by name, why an optional one (or a
    configured trained labeller with no version yet) could not be built."""
    built: list[Judge] = []
    unavailable: dict[str, str] = {}
    for entry in JUDGES.listed():
        for listed in entry.names:
            name = labeller_name(rt) if listed == LABELLER else listed
            try:
                built.append(JUDGES.build(rt, name))
            except (ValueError, OSError) as exc:
                if not entry.optional and name == listed:
                    raise
                unavailable[name] = str(exc)
    return built, unavailable
