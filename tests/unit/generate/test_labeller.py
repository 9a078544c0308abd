"""LLM labeller over candidates, and the agreement statistics (Fleiss' kappa)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from ragtrail.generate.labeller import (
    agreement_vs_majority,
    fleiss_kappa,
    fleiss_kappa_from_counts,
    label_candidates,
)
from ragtrail.llm.cache import MemoryLLMCache
from ragtrail.llm.client import LLMClient
from ragtrail.records import CandidateStatus, QACandidate
from tests.unit.generate import calls_by_prompt, routed_backend, sample_contexts


def candidates() -> list[QACandidate]:
    ctx = sample_contexts()
    return [
        QACandidate(
            candidate_id=f"c{i}",
            context=ctx[i],
            statement_kind="fact",
            requested_label="fact_single",
            question=q,
        )
        for i, q in enumerate(
            [
                "How many annual leave days do staff get?",
                "What happens to carried-over days after 30 June?",
                "Which label is this? QUIRK",
            ]
        )
    ]


def label(f: dict[str, Any]) -> str:
    if "QUIRK" in f["question"]:
        return '{"label_name": "multi_hop", "reason": "invented"}'
    if "carried-over" in f["question"]:
        return json.dumps({"label_name": "reasoning", "reason": "inferred from the deadline"})
    return json.dumps({"label_name": "fact_single", "reason": "one number"})


def test_label_candidates_fills_labels_and_records_failures() -> None:
    backend = routed_backend({"label": label})
    cands = candidates()
    cands.append(
        QACandidate(
            candidate_id="nq", context=cands[0].context, statement_kind="fact", requested_label=""
        )
    )  # no question yet: not labelled
    label_candidates(LLMClient(backend, MemoryLLMCache()), cands)
    assert backend.generate_calls <= 3  # one batch per attempt round
    a, b, bad, nq = cands
    assert (a.observed_label, a.label_reason) == ("fact_single", "one number")
    assert b.observed_label == "reasoning" and b.status is CandidateStatus.PENDING
    assert bad.status is CandidateStatus.FAILED and bad.observed_label is None
    assert bad.failure_cause == "label_failed:validation_error"
    assert len(bad.raw_outputs) == 3 and "multi_hop" in bad.raw_outputs[0]
    assert nq.observed_label is None and nq.status is CandidateStatus.PENDING
    seen = calls_by_prompt(backend)["label"]
    label_candidates(LLMClient(backend, MemoryLLMCache()), cands)  # labelled ones are skipped
    assert calls_by_prompt(backend)["label"] == seen


# Wikipedia's worked example for Fleiss' kappa: 10 subjects, 14 raters, 5 categories.
WIKI_COUNTS = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_matches_hand_computed_example() -> None:
    # By hand: column totals (20, 28, 39, 21, 32) of 140 ratings, so
    # P_e = (400 + 784 + 1521 + 441 + 1024) / 140^2 = 4170 / 19600 = 0.21276;
    # P_i = (sum_j n_ij^2 - 14) / (14 * 13) per subject, averaging to P_bar = 0.37802;
    # kappa = (0.37802 - 0.21276) / (1 - 0.21276) = 0.2099 (Wikipedia: 0.210).
    categories = ["c1", "c2", "c3", "c4", "c5"]
    ratings = [
        [c for c, n in zip(categories, row, strict=True) for _ in range(n)] for row in WIKI_COUNTS
    ]
    p_bar = sum((sum(x * x for x in row) - 14) / (14 * 13) for row in WIKI_COUNTS) / 10
    assert p_bar == pytest.approx(0.37802, abs=1e-5)
    expected = (p_bar - 4170 / 19600) / (1 - 4170 / 19600)
    assert fleiss_kappa(ratings, categories) == pytest.approx(expected)
    assert round(fleiss_kappa(ratings, categories), 3) == 0.210
    assert fleiss_kappa_from_counts(WIKI_COUNTS) == pytest.approx(expected)


def test_fleiss_kappa_edges() -> None:
    assert fleiss_kappa([["summary", "summary"], ["reasoning", "reasoning"]]) == pytest.approx(1.0)
    assert math.isnan(fleiss_kappa([["summary", "summary"], ["summary", "summary"]]))
    # systematic disagreement is below chance
    assert fleiss_kappa([["summary", "reasoning"], ["reasoning", "summary"]]) < 0
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([["summary", "summary"], ["summary"]])
    with pytest.raises(ValueError, match="not one of"):
        fleiss_kappa([["summary", "other"]])
    with pytest.raises(ValueError, match="at least two"):
        fleiss_kappa([["summary"]])


def test_agreement_vs_majority_of_the_others() -> None:
    # columns: three humans and the LLM
    ratings = [
        ["fact_single", "fact_single", "fact_single", "fact_single"],
        ["summary", "summary", "fact_single", "fact_single"],
        ["reasoning", "reasoning", "reasoning", "unanswerable"],
        ["unanswerable", "unanswerable", "unanswerable", "unanswerable"],
        ["summary", "reasoning", "fact_single", "summary"],
    ]
    results = agreement_vs_majority(ratings)
    assert [r.annotator for r in results] == [0, 1, 2, 3]
    llm = results[3]
    # LLM vs the humans' majority: items 0-3 (item 4 has a three-way tie among the humans)
    # -> pairs (fs,fs) (fs,summary) (unans,reasoning) (unans,unans)
    assert (llm.n_items, llm.n_ties) == (4, 1)
    pairs = [
        ["fact_single", "fact_single"],
        ["fact_single", "summary"],
        ["unanswerable", "reasoning"],
        ["unanswerable", "unanswerable"],
    ]
    assert llm.kappa == pytest.approx(fleiss_kappa(pairs))
    # annotator 0 vs majority of (1, 2, LLM): item 4 majority is "summary" ... (reasoning,
    # fact_single, summary) is a tie too
    assert results[0].n_ties == 1
    with pytest.raises(ValueError):
        agreement_vs_majority([["summary"]])
