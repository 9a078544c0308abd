"""The configured correctness judge and its calibration on golden QA items (METHODS §9).

The judge runs on the JUDGE model role. Its references come from the corpus's golden items
(:func:`~ragtrail.judges.correctness.correctness_examples`: an item's own gold answer is a
correct candidate, another item's gold answer an incorrect one); the calibration (Cohen's kappa
with a bootstrap interval, accuracy, precision and recall of "correct") is stored with the
judge's exact version like every other judge's, and the gate decision reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ragtrail.config import ModelRole
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.calibration import calibrate_categorical
from ragtrail.judges.contract import Judge, JudgeRole
from ragtrail.judges.correctness import (
    CORRECT,
    JUDGE_NAME,
    LlmCorrectnessJudge,
    correctness_examples,
)
from ragtrail.judges.registry import CalibrationRequest, register_judge
from ragtrail.llm.client import GenerationParams
from ragtrail.pipeline.judges import (
    CalibrationError,
    gate_decision,
    reference_id,
    store_calibration_run,
)
from ragtrail.records import QAItem
from ragtrail.runtime import Runtime
from ragtrail.storage.judge_store import CalibrationRecord, JudgeStore
from ragtrail.testset.qaset import load_qa_set

log = logging.getLogger(__name__)

JUDGE_MAX_NEW_TOKENS = 128
"""A reason of up to 120 characters (guided) and the verdict, with room for the whitespace a small
model puts between them: at 64, 5 of the sample night's 33 verdicts were cut off and retried."""


def correctness_judge(rt: Runtime) -> LlmCorrectnessJudge:
    """The correctness judge on the JUDGE role's model: greedy, seeded by the settings."""
    params = GenerationParams(
        max_new_tokens=JUDGE_MAX_NEW_TOKENS, temperature=0.0, seed=rt.settings.seed
    )
    return LlmCorrectnessJudge(rt.llm(ModelRole.JUDGE), params)


def calibrate_correctness(
    rt: Runtime, items: Sequence[QAItem], *, n: int | None = None
) -> CalibrationRecord:
    """Kappa, accuracy and precision/recall of "correct" on references built from ``items``.

    ``n`` correct and ``n`` incorrect references at most (default
    ``settings.sufficiency.calibration_per_kind``); fewer than two references, or references of
    one class only, cannot measure agreement and raise :class:`CalibrationError`.
    """
    settings = rt.settings
    judge = correctness_judge(rt)
    examples = correctness_examples(
        items, n=n or settings.sufficiency.calibration_per_kind, seed=settings.seed
    )
    if len({e.label for e in examples}) < 2:
        raise CalibrationError(
            "the correctness judge needs golden items with at least two different gold "
            f"answers to build correct and incorrect references; got {len(examples)} reference(s)"
        )
    calibration, verdicts = calibrate_categorical(
        judge,
        [e.judge_input() for e in examples],
        [e.label for e in examples],
        positive=CORRECT,
        n_resamples=settings.judges.bootstrap_samples,
        seed=settings.seed,
        item_ids=[e.id for e in examples],
    )
    details = [
        {
            "item": e.id,
            "question": e.question,
            "candidate": e.candidate,
            "golds": list(e.golds),
            "reference": e.label,
            **v.as_dict(),
        }
        for e, v in zip(examples, verdicts, strict=True)
    ]
    reference = reference_id("correctness", [(e.id, e.candidate, e.label) for e in examples])
    return store_calibration_run(rt, judge, calibration, reference, details)


def calibrate_correctness_if_missing(
    rt: Runtime, corpus: str, items: Sequence[QAItem]
) -> JsonObject:
    """Calibrate the correctness judge unless its version already has a calibration.

    Returns ``status`` (``calibrated`` / ``cached`` / ``not calibrated`` with the ``reason``),
    the judge ref, the headline ``metric``, ``value`` and ``n`` when there is a calibration, and
    the ``gate`` decision dict. Model calls go through the cache, so a rerun costs nothing.
    """
    judge = correctness_judge(rt)
    spec = judge.spec
    store = JudgeStore(rt.engine)
    record = store.latest(spec.name, spec.version)
    out: JsonObject = {"judge": spec.ref, "corpus": corpus}
    if record is not None:
        out["status"] = "cached"
    else:
        try:
            record = calibrate_correctness(rt, items)
        except ValueError as exc:  # CalibrationError included
            log.warning("%s not calibrated on %r: %s", spec.ref, corpus, exc)
            out.update(status="not calibrated", reason=str(exc))
        else:
            log.info(
                "%s calibrated: %s %s on n=%d", spec.ref, record.metric, record.value, record.n
            )
            out["status"] = "calibrated"
    if record is not None:
        out.update(metric=record.metric, value=record.value, n=record.n)
    out["gate"] = gate_decision(rt, spec, record).as_dict()
    return out


def _correctness(rt: Runtime, name: str) -> Judge:
    return correctness_judge(rt)


def _calibrate(
    rt: Runtime, names: Sequence[str], request: CalibrationRequest
) -> list[CalibrationRecord]:
    """``ragtrail judge calibrate correctness.llm``: references from the QA set's items."""
    items, _ = load_qa_set(request.reference)
    return [calibrate_correctness(rt, items)]


register_judge(JUDGE_NAME, JudgeRole.CORRECTNESS, _correctness, calibrate=_calibrate)


__all__ = [
    "calibrate_correctness",
    "calibrate_correctness_if_missing",
    "correctness_judge",
]
