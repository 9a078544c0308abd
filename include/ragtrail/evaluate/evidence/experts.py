"""SEER's three experts as functions of the models that judge (METHODS §10), shared by the
nightly evaluation and the self-alignment training.

- faithfulness: the entailment judge's verdict that the premise (the passages, or for silver
  faithfulness the relevant chunk alone) entails the evidence; its score is the judge's
  probability or similarity where it reports one, else 1/0 from its category;
- helpfulness: sigmoid(log p(gold | question + evidence) - log p(gold | question)) under a fixed
  scorer LM; the closed-book log-probability is computed once per question;
- conciseness: the cosine between the embeddings of the full-length answer (question and gold
  answer restated as one sentence) and of the evidence.

Nothing here decides what is undefined for a question (no gold answer, empty evidence): the
callers leave those out and record why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ragtrail.evaluate.evidence.measures import cosine, helpfulness
from ragtrail.judges.contract import SUPPORTED, Judge, JudgeInput, Verdict
from ragtrail.llm.backends.base import Message
from ragtrail.llm.scoring import LogProbScorer, ScoreRequest

Encode = Callable[[list[str]], np.ndarray]


def scorer_messages(question: str, evidence: str | None) -> tuple[Message, ...]:
    """What the scorer reads before the gold answer: the question, with the evidence or not."""
    asked = f"Question: {question}\nAnswer briefly."
    text = asked if evidence is None else f"Evidence: {evidence}\n\n{asked}"
    return ({"role": "user", "content": text},)


def helpfulness_scores(scorer: LogProbScorer, rows: Sequence[tuple[str, str, str]]) -> list[float]:
    """Helpfulness of each ``(question, evidence, gold answer)``, in order (one batched scorer
    call; the closed-book term once per distinct (question, gold))."""
    if not rows:
        return []
    closed = list(dict.fromkeys((q, g) for q, _, g in rows))
    requests = [ScoreRequest(scorer_messages(q, None), g) for q, g in closed] + [
        ScoreRequest(scorer_messages(q, e), g) for q, e, g in rows
    ]
    values = scorer.log_probs(requests)
    without = dict(zip(closed, values[: len(closed)], strict=True))
    return [
        helpfulness(with_evidence, without[(q, g)])
        for (q, _, g), with_evidence in zip(rows, values[len(closed) :], strict=True)
    ]


def conciseness_scores(encode: Encode, pairs: Sequence[tuple[str, str]]) -> list[float | None]:
    """Cosine of each ``(full-length answer, evidence)`` pair (None for a zero embedding)."""
    if not pairs:
        return []
    vectors = encode([t for pair in pairs for t in pair])
    return [cosine(list(vectors[2 * i]), list(vectors[2 * i + 1])) for i in range(len(pairs))]


def faithfulness_verdicts(judge: Judge, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
    """The judge's verdict on each ``(premise, evidence)``: does the premise entail it?"""
    if not pairs:
        return []
    return judge.judge([JudgeInput(premise=p, hypothesis=e) for p, e in pairs])


def verdict_score(verdict: Verdict) -> float | None:
    """A verdict as a faithfulness score in [0, 1] (None when it failed)."""
    if not verdict.ok:
        return None
    if verdict.score is not None:
        return min(1.0, max(0.0, float(verdict.score)))
    return 1.0 if verdict.value == SUPPORTED else 0.0
