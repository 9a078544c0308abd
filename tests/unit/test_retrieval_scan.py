"""The per-label x per-weight scan on hand-built candidate lists with hand-computed metrics."""

from __future__ import annotations

import math

import pytest

from ragtrail.evaluate.retrieval import ScanConfig, ranking_for, resolve_level, scan
from ragtrail.records import INCLUSIVE, Candidates, QAItem, SearchHit


def hits(*pairs: tuple[str, float]) -> tuple[SearchHit, ...]:
    return tuple(SearchHit(chunk_id=c, doc_id=c.split("#")[0], score=s) for c, s in pairs)


# q1 (fact_single): lexical finds the ground doc A first; dense ranks it third.
C1 = Candidates(
    lexical=hits(("A#0", 9.0), ("B#0", 3.0), ("C#0", 1.0)),
    dense=hits(("B#0", 0.9), ("C#0", 0.8), ("A#0", 0.1)),
)
# q2 (reasoning): dense finds ground doc D first; lexical misses it entirely.
C2 = Candidates(
    lexical=hits(("B#0", 5.0), ("C#0", 4.0)),
    dense=hits(("D#1", 0.95), ("D#0", 0.9), ("B#0", 0.2)),
)
ITEMS = [
    QAItem(qid="q1", question="?", label="fact_single", ground_doc_ids=("A",)),
    QAItem(qid="q2", question="?", label="reasoning", ground_doc_ids=("D",)),
]
CONFIG = ScanConfig(
    text_weights=(0.0, 0.5, 1.0), metrics=("recall@1", "mrr"), bootstrap_samples=200
)


def value(result, label, weight, metric):
    frame = result.metrics
    row = frame[(frame.label == label) & (frame.text_weight == weight) & (frame.metric == metric)]
    assert len(row) == 1
    return float(row.value.iloc[0])


def test_document_level_ranking_dedupes_by_best_chunk():
    assert ranking_for(C2, 0.0, "document", 10) == ["D", "B", "C"]
    assert ranking_for(C2, 0.0, "chunk", 2) == ["D#1", "D#0"]


def test_hand_computed_metrics_per_label_and_weight():
    result = scan(ITEMS, [C1, C2], CONFIG)
    assert result.level == "document"
    # w=0 (dense): q1 ranking B, C, A -> rr 1/3; w=1 (lexical): A first -> rr 1.
    assert value(result, "fact_single", 0.0, "mrr") == pytest.approx(1 / 3)
    assert value(result, "fact_single", 1.0, "mrr") == pytest.approx(1.0)
    # w=0.5: A = 0.5*1 + 0.5*0 = 0.5; B = 0.5*0.25 + 0.5*1 = 0.625; C = 0 + 0.5*0.875 = 0.4375
    assert value(result, "fact_single", 0.5, "mrr") == pytest.approx(0.5)
    # q2: dense puts D first; lexical never retrieves D (only via the dense list at score 0 there)
    assert value(result, "reasoning", 0.0, "recall@1") == 1.0
    assert value(result, "reasoning", 1.0, "recall@1") == 0.0
    # inclusive = mean over both questions
    assert value(result, INCLUSIVE, 0.0, "mrr") == pytest.approx((1 / 3 + 1) / 2)


def test_best_strategy_table_and_relative_gap():
    best = scan(ITEMS, [C1, C2], CONFIG).best.set_index("label")
    # recall@5 of a 3-doc ranking containing the ground doc is 1 at every weight for q1
    assert best.loc["fact_single", "best_recall"] == 1.0
    assert best.loc["fact_single", "best_weight"] == 0.0  # ties go to the smallest weight
    assert best.loc["reasoning", "dense"] == 1.0
    assert best.loc["reasoning", "lexical"] == 1.0  # D still appears via the dense list
    assert (best["gap_to_best"] >= 0).all()


def test_confidence_intervals_contain_the_mean_and_are_reproducible():
    a = scan(ITEMS, [C1, C2], CONFIG).metrics
    b = scan(ITEMS, [C1, C2], CONFIG).metrics
    assert a.equals(b)
    assert ((a.ci_low <= a.value + 1e-12) & (a.value <= a.ci_high + 1e-12)).all()


def test_no_bootstrap_gives_nan_intervals():
    config = ScanConfig(text_weights=(0.0,), metrics=("mrr",), bootstrap_samples=0)
    frame = scan(ITEMS, [C1, C2], config).metrics
    assert all(math.isnan(v) for v in frame.ci_low)


def test_level_resolution():
    chunked = [
        QAItem(
            qid="x", question="?", label="summary", ground_doc_ids=("A",), ground_chunk_ids=("A#0",)
        )
    ]
    assert resolve_level(chunked, "auto") == "chunk"
    assert resolve_level(ITEMS, "auto") == "document"
    assert resolve_level(chunked, "document") == "document"
