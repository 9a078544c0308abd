"""Self-sampling preferences on scripted doubles, checked by hand.

The extractor is the real :class:`LLMClient` over a :class:`ScriptedBackend` whose reply is
picked by the request's seed (so the M samples of a prompt differ, some are near copies). The
judge calls a sample faithful when it is a substring of the passages, the scorer gives the gold
answer a higher log-probability when the evidence contains it, and the embedder is a bag of
words over a fixed vocabulary. Every expected score is recomputed here from those rules.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence

import numpy as np
import pytest

from ragtrail.config import EvidenceTrainingSettings
from ragtrail.evaluate.evidence.extraction import completion_of
from ragtrail.evaluate.evidence.weighting import EXPERTS, cov_weights
from ragtrail.failures import EvaluationFailedError
from ragtrail.judges.contract import JudgeInput, Verdict
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.client import LLMClient
from ragtrail.llm.scoring import ScoreRequest
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.train.evidence.data import EvidencePrompt
from ragtrail.train.evidence.preferences import build_preferences

M = 4
FAITHFUL, UNFAITHFUL = 0.9, 0.1
LOGP_CLOSED, LOGP_GOLD, LOGP_NO_GOLD = -4.0, -1.0, -6.0

A = EvidencePrompt(
    qid="a",
    label="fact_single",
    question="Where is the fuel depot?",
    gold="Dock 4",
    passages=("The fuel depot is at Dock 4 near the gate.", "Trucks enter by gate B."),
    doc_ids=("d_fuel", "d_gate"),
)
B = EvidencePrompt(
    qid="b",
    label="fact_single",
    question="Which gate is for trucks?",
    gold="Gate B",
    passages=("Trucks enter by gate B.", "The fuel depot is at Dock 4 near the gate."),
    doc_ids=("d_gate", "d_fuel"),
)
SCRIPT = {
    A.question: [
        "The fuel depot is at Dock 4 near the gate.",  # faithful, has the gold
        "the fuel depot is at dock 4 near the gate",  # the same words: a near duplicate of 0
        "Trucks enter by gate B.",  # faithful, no gold
        "The depot is at Dock 4 by the sea.",  # unfaithful, has the gold
    ],
    B.question: [
        "Trucks use Gate B daily.",
        "Trucks use Gate B often.",  # another sample, scored exactly like 0 (see VOCAB)
        "Trucks use Gate B daily.",  # an exact copy of 0
        "",  # nothing answers
    ],
}
KEPT = [("a", SCRIPT[A.question][i]) for i in (0, 2, 3)] + [
    ("b", SCRIPT[B.question][i]) for i in (0, 1)
]
FULL = {"a": "The fuel depot is at Dock 4.", "b": "Trucks enter by gate B."}
VOCAB = ["the", "fuel", "depot", "is", "at", "dock", "4", "near", "gate", "trucks", "enter"]
VOCAB += ["by", "b", "use", "sea"]  # not "daily" nor "often"


def settings(**kw) -> EvidenceTrainingSettings:
    return EvidenceTrainingSettings(**{"samples": M, "seed": 0, "max_failed_share": 0.5, **kw})


def question_of(request: GenerationRequest) -> str:
    return re.search(r"<question>(.*?)</question>", request.messages[-1]["content"]).group(1)


def responder(failing: Sequence[tuple[str, int]] = ()):
    """Sample ``seed % M`` of the request's question; ``failing`` (question, j) reply the wrong field."""

    def reply(request: GenerationRequest, _number: int) -> str:
        j = request.seed % M
        question = question_of(request)
        if (question, j) in failing:
            return json.dumps({"answer": "Dock 4"})  # the wrong field
        return json.dumps({"evidence": SCRIPT[question][j]})

    return reply


class FakeJudge:
    def __init__(self, fail_on: Sequence[str] = ()) -> None:
        self.fail_on = set(fail_on)
        self.inputs: list[JudgeInput] = []

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        self.inputs.extend(items)
        out = []
        for item in items:
            if item.hypothesis in self.fail_on:
                out.append(Verdict("fake@1", None, error="the judge is down"))
            elif item.hypothesis in item.premise:
                out.append(Verdict("fake@1", "supported", score=FAITHFUL))
            else:
                out.append(Verdict("fake@1", "not_supported", score=UNFAITHFUL))
        return out


class FakeScorer:
    model_id = "fake-scorer"

    def __init__(self) -> None:
        self.calls: list[list[ScoreRequest]] = []

    def log_probs(self, requests: Sequence[ScoreRequest]) -> list[float]:
        self.calls.append(list(requests))
        out = []
        for r in requests:
            content = r.messages[-1]["content"]
            if not content.startswith("Evidence:"):
                out.append(LOGP_CLOSED)
            else:
                evidence = content.split("\n\n")[0].lower()
                out.append(LOGP_GOLD if r.continuation.lower() in evidence else LOGP_NO_GOLD)
        return out


def encode(texts: list[str]) -> np.ndarray:
    rows = []
    for text in texts:
        words = re.findall(r"\w+", text.lower())
        rows.append([float(words.count(v)) for v in VOCAB])
    return np.array(rows)


def run(config: EvidenceTrainingSettings, *, failing=(), judge=None, full=FULL):
    backend = ScriptedBackend(responder(failing))
    judge = judge or FakeJudge()
    scorer = FakeScorer()
    lists, report = build_preferences(
        [A, B],
        LLMClient(backend, max_attempts=1),
        config,
        judge=judge,
        scorer=scorer,
        encode=encode,
        full_answers=full,
        max_new_tokens=64,
    )
    return lists, report, backend, judge, scorer


# ------------------------------------------------------------------------ expected, by hand


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def expected_scores(qid: str, evidence: str) -> dict[str, float]:
    prompt = {"a": A, "b": B}[qid]
    faithful = FAITHFUL if evidence in "\n\n".join(prompt.passages) else UNFAITHFUL
    with_e = LOGP_GOLD if prompt.gold.lower() in evidence.lower() else LOGP_NO_GOLD
    u, v = encode([FULL[qid], evidence])
    cos = float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))
    return {
        "faithfulness": faithful,
        "helpfulness": sigmoid(with_e - LOGP_CLOSED),
        "conciseness": max(0.0, cos),
    }


def test_expected_table_is_what_the_doubles_say() -> None:
    # the hand table itself: a0 faithful + gold, a2 faithful without gold, a3 gold but made up
    a0, a2, a3, b0, b1 = (expected_scores(q, e) for q, e in KEPT)
    assert (a0["faithfulness"], a2["faithfulness"], a3["faithfulness"]) == (0.9, 0.9, 0.1)
    assert a0["helpfulness"] == pytest.approx(sigmoid(3.0))
    assert a2["helpfulness"] == pytest.approx(sigmoid(-2.0))
    assert b0 == b1  # "daily" and "often" are outside the vocabulary


def test_near_duplicates_are_removed_before_scoring() -> None:
    _, report, backend, judge, scorer = run(settings())
    assert len(backend.calls) == 2 * M
    assert sorted(r.seed for r in backend.calls) == list(range(2 * M))  # one seed per sample
    assert all(r.temperature == 1.0 and r.top_k == 80 for r in backend.calls)
    # only the kept samples reach the judge and the scorer
    assert [i.hypothesis for i in judge.inputs] == [e for _, e in KEPT]
    assert [i.premise for i in judge.inputs] == ["\n\n".join(A.passages)] * 3 + [
        "\n\n".join(B.passages)
    ] * 2
    (requests,) = scorer.calls
    with_evidence = [r for r in requests if r.messages[-1]["content"].startswith("Evidence:")]
    assert [r.messages[-1]["content"].split("\n\n")[0] for r in with_evidence] == [
        f"Evidence: {e}" for _, e in KEPT
    ]
    closed = [r for r in requests if not r.messages[-1]["content"].startswith("Evidence:")]
    assert [(r.messages[-1]["content"], r.continuation) for r in closed] == [
        (f"Question: {A.question}\nAnswer briefly.", "Dock 4"),
        (f"Question: {B.question}\nAnswer briefly.", "Gate B"),
    ]
    assert report.kept_after_dedup == len(KEPT) == 5


def test_combined_score_is_the_cov_weighted_sum() -> None:
    config = settings(tau=0.5)
    lists, report, *_ = run(config)
    table = [expected_scores(q, e) for q, e in KEPT]
    columns = {x: [row[x] for row in table] for x in EXPERTS}
    weights = cov_weights(columns, 0.5)
    assert report.weighting == "cov"
    assert report.weights == pytest.approx(weights)
    assert len(set(round(w, 6) for w in weights.values())) == 3  # really unequal weights
    (a,) = lists
    assert a.qid == "a"
    assert a.messages == A.messages()
    assert a.candidates == tuple(completion_of(e) for _, e in KEPT[:3])
    expected = [sum(weights[x] * row[x] for x in EXPERTS) for row in table[:3]]
    assert a.scores == pytest.approx(expected, abs=1e-12)
    # and by hand: faithful with the gold beats unfaithful with the gold and faithful without
    assert a.scores[0] > max(a.scores[1:])
    assert report.per_expert_mean == pytest.approx({x: sum(v) / len(v) for x, v in columns.items()})


def test_equal_weighting_is_the_plain_mean() -> None:
    lists, report, *_ = run(settings(weighting="equal"))
    assert report.weighting == "equal"
    assert report.weights == pytest.approx(dict.fromkeys(EXPERTS, 1 / 3))
    (a,) = lists
    expected = [sum(expected_scores(q, e).values()) / 3 for q, e in KEPT[:3]]
    assert a.scores == pytest.approx(expected, abs=1e-12)


def test_question_whose_samples_all_score_the_same_gives_no_list() -> None:
    lists, report, *_ = run(settings())
    assert [pl.qid for pl in lists] == ["a"]
    assert report.lists == 1


def test_report_counts() -> None:
    _, report, *_ = run(settings())
    assert report.prompts == 2
    assert report.sampled == 2 * M
    assert report.failed_samples == 0
    assert report.kept_after_dedup == 5  # a: 3 of 4 (one near copy); b: 2 (a copy, an empty)
    assert report.empty == 1  # b's empty sample, never scored
    assert report.failed_scores == 0
    assert report.lists == 1
    assert report.pairs_possible == 3  # three distinct scores in a's list: 3 ordered pairs
    assert report.first_error is None
    as_dict = report.as_dict()
    assert as_dict["pairs_possible"] == 3 and json.dumps(as_dict)


def test_failed_samples_below_the_share_are_left_out_and_counted() -> None:
    # a's sample 3 fails: a keeps two samples (0 and 2)
    lists, report, *_ = run(settings(max_failed_share=0.25), failing=[(A.question, 3)])
    assert report.sampled == 2 * M
    assert report.failed_samples == 1
    assert report.first_error is not None and "evidence: Field required" in report.first_error
    assert report.kept_after_dedup == 4
    (a,) = lists
    assert a.candidates == tuple(completion_of(e) for _, e in KEPT[:2])


def test_failed_samples_beyond_the_share_fail_the_step() -> None:
    failing = [(A.question, 0), (A.question, 2), (B.question, 1)]  # 3 of 8 > 0.25
    with pytest.raises(EvaluationFailedError) as err:
        run(settings(max_failed_share=0.25), failing=failing)
    assert "evidence_training.max_failed_share" in str(err.value)
    # the same failures pass a looser threshold
    _, report, *_ = run(settings(max_failed_share=0.4), failing=failing)
    assert report.failed_samples == 3


def test_failed_expert_scores_are_left_out_or_fail_the_step() -> None:
    a3 = SCRIPT[A.question][3]
    lists, report, *_ = run(settings(max_failed_share=0.25), judge=FakeJudge(fail_on=[a3]))
    assert report.failed_scores == 1 and report.first_error == "the judge is down"
    (a,) = lists
    assert completion_of(a3) not in a.candidates and len(a.candidates) == 2
    # b has no full-length answer: its two samples cannot be scored for conciseness
    with pytest.raises(EvaluationFailedError, match="expert scores"):
        run(
            settings(max_failed_share=0.25),
            judge=FakeJudge(fail_on=[a3]),
            full={"a": FULL["a"], "b": None},
        )
    _, report, *_ = run(settings(max_failed_share=0.5), full={"a": FULL["a"]})
    assert report.failed_scores == 2
    assert report.first_error == "no full-length answer for conciseness"
