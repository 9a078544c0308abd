"""Every LLM judge of the night calibrated before any step needs its verdicts.

The generation judges (labeller, critiques: :func:`~ragtrail.pipeline.judges.calibrate_missing`)
gate the test set, so the generation's judging waits for them. The evaluation's judges (the
sufficiency raters and the correctness judge, when their steps are enabled) are calibrated by the
first step of the golden sets' evaluation, beside the generation
(:func:`calibrate_missing_evaluation_judges`): the evaluation's branches find them calibrated
instead of each calibrating them in its own chain of model calls (the sufficiency and evidence
branches both need the correctness judge). A step run alone still calibrates what it finds
uncalibrated. Each judge's calibration is independent of the others': an endpoint gets them all
at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.contract import Judge
from ragtrail.llm.together import together
from ragtrail.pipeline.correctness import calibrate_correctness_if_missing, correctness_judge
from ragtrail.pipeline.judges import golden_items, uncalibrated_judges
from ragtrail.pipeline.sufficiency.raters import calibrate_sufficiency_raters, sufficiency_raters
from ragtrail.records import QAItem
from ragtrail.runtime import Runtime
from ragtrail.storage.judge_store import JudgeStore


def _needs_correctness(rt: Runtime) -> bool:
    return rt.settings.sufficiency.enabled or rt.settings.evidence.enabled


def _evaluation_judges(rt: Runtime) -> list[Judge]:
    """The judges of the enabled evaluation steps."""
    judges: list[Judge] = list(sufficiency_raters(rt)) if rt.settings.sufficiency.enabled else []
    if _needs_correctness(rt):
        judges.append(correctness_judge(rt))
    return judges


def uncalibrated_evaluation_judges(rt: Runtime) -> list[str]:
    """The enabled evaluation steps' judges with no calibration for their version yet, by name
    (no model call)."""
    store = JudgeStore(rt.engine)
    return [
        j.spec.name
        for j in _evaluation_judges(rt)
        if store.latest(j.spec.name, j.spec.version) is None
    ]


def uncalibrated_night_judges(rt: Runtime) -> list[str]:
    """The night's judges with no calibration for their version yet, by name (no model call)."""
    return uncalibrated_judges(rt) + uncalibrated_evaluation_judges(rt)


def calibrate_missing_evaluation_judges(rt: Runtime, corpus: str) -> dict[str, JsonObject]:
    """Calibrate each judge of the enabled evaluation steps that has none for its version
    (cached once done); per judge name, its outcome (``status``, and the reason when not
    calibrated)."""
    if not _needs_correctness(rt):  # neither sufficiency nor evidence: no evaluation judge
        return {}
    golden, _ = golden_items(rt, corpus)
    steps: list[Callable[[], dict[str, JsonObject]]] = []
    if rt.settings.sufficiency.enabled:
        steps.append(partial(calibrate_sufficiency_raters, rt, corpus, golden))
    steps.append(partial(_calibrate_correctness, rt, corpus, golden))
    report: dict[str, JsonObject] = {}
    for outcomes in together(steps, concurrent=rt.llm_calls_overlap()):
        report.update(outcomes)
    return report


def _calibrate_correctness(
    rt: Runtime, corpus: str, golden: Sequence[QAItem]
) -> dict[str, JsonObject]:
    return {correctness_judge(rt).spec.name: calibrate_correctness_if_missing(rt, corpus, golden)}
