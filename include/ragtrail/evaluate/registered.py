"""Every evaluator the nightly stores, imported so that :data:`~ragtrail.evaluate.contract.EVALUATORS`
holds them all (an evaluator registers itself when its module is imported).

The drift check and run comparisons look evaluators up by the name stored with each metric point;
they call :func:`registered_evaluators` first, so a run stored by any of them can be read back
even in a process that never ran that evaluation.
"""

from __future__ import annotations

from ragtrail.evaluate.attribution.scoring import AnswersEvaluator
from ragtrail.evaluate.citations.evaluator import CitationEvaluator
from ragtrail.evaluate.contract import EVALUATORS, EvaluatorRegistry
from ragtrail.evaluate.evidence.evaluator import EvidenceEvaluator
from ragtrail.evaluate.retrieval.evaluator import RetrievalEvaluator
from ragtrail.evaluate.sufficiency.cah import CAHEvaluator
from ragtrail.evaluate.sufficiency.selective import SelectiveEvaluator

NIGHTLY_EVALUATORS = (
    RetrievalEvaluator,
    CitationEvaluator,
    AnswersEvaluator,
    CAHEvaluator,
    SelectiveEvaluator,
    EvidenceEvaluator,
)
"""The evaluators whose results the night stores, in the order a night runs them."""


def registered_evaluators() -> EvaluatorRegistry:
    """The evaluator registry with every nightly evaluator in it."""
    missing = [cls.name for cls in NIGHTLY_EVALUATORS if cls.name not in EVALUATORS]
    if missing:
        raise RuntimeError(f"evaluators {missing} did not register themselves")
    return EVALUATORS
