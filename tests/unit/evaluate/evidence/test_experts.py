"""SEER's three experts on counting doubles: helpfulness asks the closed-book term once per
(question, gold) in one scorer call, conciseness pairs embeddings in order, and a verdict maps
to a faithfulness score in [0, 1]."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from ragtrail.evaluate.evidence.experts import (
    conciseness_scores,
    faithfulness_verdicts,
    helpfulness_scores,
    scorer_messages,
    verdict_score,
)
from ragtrail.judges.contract import JudgeInput, Verdict
from ragtrail.llm.scoring import ScoreRequest

# sigmoid(2) = 1 / (1 + e^-2), sigmoid(-1) = 1 / (1 + e), sigmoid(0.5), by hand
SIGMOID_2 = 0.8807970779778823
SIGMOID_MINUS_1 = 0.2689414213699951
SIGMOID_HALF = 0.6224593312018546


class TableScorer:
    """Log-probabilities looked up by (user message, continuation); counts calls."""

    model_id = "table"

    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        self.table = table
        self.calls: list[list[ScoreRequest]] = []

    def log_probs(self, requests: Sequence[ScoreRequest]) -> list[float]:
        self.calls.append(list(requests))
        return [self.table[(r.messages[-1]["content"], r.continuation)] for r in requests]


def closed(q: str) -> str:
    return f"Question: {q}\nAnswer briefly."


def opened(q: str, e: str) -> str:
    return f"Evidence: {e}\n\nQuestion: {q}\nAnswer briefly."


def test_scorer_messages() -> None:
    assert scorer_messages("Who?", None) == ({"role": "user", "content": closed("Who?")},)
    assert scorer_messages("Who?", "Ana runs it.") == (
        {"role": "user", "content": opened("Who?", "Ana runs it.")},
    )


def test_helpfulness_asks_the_closed_book_term_once_per_question() -> None:
    q1, q2 = "Where is the depot?", "Which gate?"
    scorer = TableScorer(
        {
            (closed(q1), "Dock 4"): -3.0,
            (closed(q2), "Gate B"): -2.0,
            (closed(q1), "Dock 5"): -4.0,  # the same question with another gold: its own term
            (opened(q1, "at Dock 4"), "Dock 4"): -1.0,  # +2
            (opened(q1, "near the sea"), "Dock 4"): -4.0,  # -1
            (opened(q2, "gate B"), "Gate B"): -1.5,  # +0.5
            (opened(q1, "by the gate"), "Dock 4"): -3.0,  # 0
            (opened(q1, "at Dock 4"), "Dock 5"): -5.0,  # -1
        }
    )
    rows = [
        (q1, "at Dock 4", "Dock 4"),
        (q1, "near the sea", "Dock 4"),
        (q2, "gate B", "Gate B"),
        (q1, "by the gate", "Dock 4"),
        (q1, "at Dock 4", "Dock 5"),
    ]
    values = helpfulness_scores(scorer, rows)
    assert values == pytest.approx([SIGMOID_2, SIGMOID_MINUS_1, SIGMOID_HALF, 0.5, SIGMOID_MINUS_1])
    assert len(scorer.calls) == 1  # one batched call
    (requests,) = scorer.calls
    asked = [(r.messages[-1]["content"], r.continuation) for r in requests]
    closed_asked = [a for a in asked if a[0].startswith("Question:")]
    assert closed_asked == [(closed(q1), "Dock 4"), (closed(q2), "Gate B"), (closed(q1), "Dock 5")]
    assert len(requests) == 3 + len(rows)
    assert [a for a in asked if a[0].startswith("Evidence:")] == [
        (opened(q, e), g) for q, e, g in rows
    ]


def test_helpfulness_of_nothing_calls_no_scorer() -> None:
    scorer = TableScorer({})
    assert helpfulness_scores(scorer, []) == []
    assert scorer.calls == []


def test_conciseness_pairs_full_answer_and_evidence_in_order() -> None:
    vectors = {
        "full a": [1.0, 0.0, 0.0],
        "ev a": [1.0, 1.0, 0.0],  # cos = 1 / sqrt 2
        "full b": [0.0, 2.0, 0.0],
        "ev b": [0.0, 5.0, 0.0],  # cos = 1
        "full c": [1.0, 0.0, 0.0],
        "ev c": [-1.0, 0.0, 0.0],  # cos = -1: not clamped here
        "full d": [1.0, 1.0, 1.0],
        "ev d": [0.0, 0.0, 0.0],  # zero embedding: None
    }
    seen: list[list[str]] = []

    def encode(texts: list[str]) -> np.ndarray:
        seen.append(list(texts))
        return np.array([vectors[t] for t in texts])

    pairs = [("full a", "ev a"), ("full b", "ev b"), ("full c", "ev c"), ("full d", "ev d")]
    values = conciseness_scores(encode, pairs)
    assert values[0] == pytest.approx(2**-0.5)
    assert values[1] == pytest.approx(1.0)
    assert values[2] == pytest.approx(-1.0)
    assert values[3] is None
    assert seen == [["full a", "ev a", "full b", "ev b", "full c", "ev c", "full d", "ev d"]]
    assert conciseness_scores(encode, []) == [] and len(seen) == 1


def test_faithfulness_verdicts_ask_premise_entails_evidence() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.calls: list[list[JudgeInput]] = []

        def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
            self.calls.append(list(items))
            return [Verdict("fake@1", "supported") for _ in items]

    judge = Recorder()
    verdicts = faithfulness_verdicts(judge, [("passages 1", "ev 1"), ("passages 2", "ev 2")])
    assert len(verdicts) == 2
    assert judge.calls == [
        [
            JudgeInput(premise="passages 1", hypothesis="ev 1"),
            JudgeInput(premise="passages 2", hypothesis="ev 2"),
        ]
    ]
    assert faithfulness_verdicts(judge, []) == [] and len(judge.calls) == 1


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        (Verdict("fake@1", "supported"), 1.0),
        (Verdict("fake@1", "not_supported"), 0.0),
        (Verdict("fake@1", "something_else"), 0.0),
        (Verdict("fake@1", "supported", score=0.42), 0.42),
        (Verdict("fake@1", "not_supported", score=0.3), 0.3),  # the score wins over the category
        (Verdict("fake@1", "supported", score=1.7), 1.0),  # clamped
        (Verdict("fake@1", "not_supported", score=-0.2), 0.0),  # clamped
        (Verdict("fake@1", None, error="judge down"), None),
        (Verdict("fake@1", "supported", score=0.9, error="cut off"), None),  # failed: no score
        (Verdict("fake@1", None), None),
    ],
)
def test_verdict_score(verdict: Verdict, expected: float | None) -> None:
    value = verdict_score(verdict)
    if expected is None:
        assert value is None
    else:
        assert value == pytest.approx(expected) and 0.0 <= value <= 1.0
