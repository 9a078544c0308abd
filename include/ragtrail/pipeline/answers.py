"""``ragtrail eval answers``: score a file of answers brought from a production log (or a HAGRID
conversion) with the configured entailment judge, and say whether that judge may be trusted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragtrail.evaluate.attribution.scoring import AnswersScore, load_answers, score_answers
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.gate import GateDecision
from ragtrail.pipeline.judges import entailment_judge, gate_decisions
from ragtrail.records import EntailmentJudgeName
from ragtrail.runtime import Runtime

NO_JUDGE = "none"
"""The judge name that turns the entailment metrics off (they are then listed as skipped)."""


@dataclass(frozen=True)
class AnswersReport:
    """The score of one answers file and the gate decision of the judge behind its entailment
    metrics (None without a judge)."""

    source: str
    score: AnswersScore
    decision: GateDecision | None

    def as_json(self) -> JsonObject:
        return {
            "source": self.source,
            **self.score.as_json(),
            "judge_decision": None if self.decision is None else self.decision.as_dict(),
        }


def score_answer_file(
    rt: Runtime,
    path: Path | str,
    *,
    judge: str = EntailmentJudgeName.CONFIGURED,
    bootstrap_samples: int = 1000,
) -> AnswersReport:
    """Validate ``path`` (every problem at once, before any model loads), then score it.

    ``judge`` is ``entailment`` (the configured one), ``entailment.nli``,
    ``entailment.embedding``, ``entailment.llm`` or ``none``.
    """
    records = load_answers(path)
    entail = None if judge == NO_JUDGE else entailment_judge(rt, judge)
    decision = None if entail is None else gate_decisions(rt, [entail])[entail.spec.name]
    score = score_answers(
        records, entail, bootstrap_samples=bootstrap_samples, seed=rt.settings.seed
    )
    return AnswersReport(source=str(path), score=score, decision=decision)
