"""The per-label x per-weight scan on hand-built candidate lists with hand-computed metrics."""

from __future__ import annotations

import math

import pytest

from ragtrail import jsonsafe
from ragtrail.evaluate.contract import EVALUATORS, facet_key, parse_facet_key
from ragtrail.evaluate.retrieval.evaluator import (
    UNDEFINED_REASONS,
    RetrievalEvaluator,
    RetrievalInputs,
    ScanConfig,
    ranking_for,
    resolve_level,
    scan,
    undefined_as_null,
)
from ragtrail.records import INCLUSIVE, Candidates, QAItem, SearchHit
from ragtrail.stats.intervals import NO_BOOTSTRAP


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
    defined = a.dropna(subset=["ci_low"])
    assert ((defined.ci_low <= defined.value + 1e-12) & (defined.value <= defined.ci_high)).all()
    assert (a[a.ci_low.isna()].ci_method == "none").all()  # null only where no CI is valid


def test_level_resolution():
    chunked = [
        QAItem(
            qid="x", question="?", label="summary", ground_doc_ids=("A",), ground_chunk_ids=("A#0",)
        )
    ]
    assert resolve_level(chunked, "auto") == "chunk"
    assert resolve_level(ITEMS, "auto") == "document"
    assert resolve_level(chunked, "document") == "document"


# -- undefined values: null plus a reason, never NaN --------------------------------------------

# q3 asks for a document no candidate list contains: every metric is 0 at every weight.
C_MISS = Candidates(lexical=hits(("B#0", 2.0)), dense=hits(("C#0", 0.5)))
MISSING = [QAItem(qid="q3", question="?", label="summary", ground_doc_ids=("Z",))]


def test_all_zero_recall_leaves_the_gap_undefined_with_a_reason():
    result = scan(MISSING, [C_MISS], CONFIG)
    assert (result.best["best_recall"] == 0.0).all()
    records = result.best_records()
    assert [r["label"] for r in records] == ["summary", INCLUSIVE]
    for record in records:
        assert record["gap_to_best"] is None
        assert record["undefined"] == {"gap_to_best": UNDEFINED_REASONS["gap_to_best"]}
        assert record["dense"] == 0.0 and record["lexical"] == 0.0
    jsonsafe.dumps(records)  # strict JSON: would raise on a NaN


def test_scan_without_weights_zero_and_one_leaves_dense_and_lexical_undefined():
    config = ScanConfig(text_weights=(0.5,), metrics=("mrr",), bootstrap_samples=50)
    records = {r["label"]: r for r in scan(ITEMS, [C1, C2], config).best_records()}
    fact = records["fact_single"]
    assert fact["dense"] is None and fact["lexical"] is None
    assert fact["undefined"] == {
        "dense": "the scan has no text weight 0 (dense only)",
        "lexical": "the scan has no text weight 1 (lexical only)",
    }
    assert fact["best_weight"] == 0.5 and fact["best_recall"] == 1.0
    assert fact["gap_to_best"] == 0.0


def test_every_interval_names_its_method_and_one_value_gets_none():
    config = ScanConfig(text_weights=(0.0, 1.0), metrics=("mrr",), bootstrap_samples=50)
    result = scan(ITEMS, [C1, C2], config)
    records = {
        (r["label"], r["text_weight"]): r for r in result.metric_records() if r["metric"] == "mrr"
    }
    # q1 alone at weight 0: its MRR is 1/3, one value that is not a 0/1 outcome -> no interval
    alone = records[("fact_single", 0.0)]
    assert alone["value"] == pytest.approx(1 / 3) and alone["ci_method"] == "none"
    assert alone["ci_low"] is None and "one value" in alone["undefined"]["ci_low"]
    # q2 alone at weight 0: MRR 1, a 0/1 outcome -> Wilson, which keeps its width at n = 1
    found = records[("reasoning", 0.0)]
    assert found["ci_method"] == "wilson" and found["ci_low"] < 0.25 and found["ci_high"] == 1.0
    for record in result.metric_records() + result.best_records():
        assert record["ci_method"] in {"wilson", "t", "none"}
        assert "ci_reason" not in record
    evaluation = RetrievalEvaluator(config).result_of(result)
    assert {a.ci_method for a in evaluation.aggregates} <= {"wilson", "t", "none"}


def test_no_bootstrap_leaves_only_the_bootstrap_intervals_null():
    items = [
        QAItem(qid=f"q{i}", question="?", label="fact_single", ground_doc_ids=("A",))
        for i in range(20)
    ]
    config = ScanConfig(text_weights=(0.0,), metrics=("mrr",), bootstrap_samples=0)
    candidates = [C1 if i % 3 else C2 for i in range(20)]  # MRR 1/3 or 0: not 0/1 outcomes
    result = scan(items, candidates, config)
    mrr = [r for r in result.metric_records() if r["metric"] == "mrr"]
    assert mrr and all(r["ci_low"] is None for r in mrr)
    assert all(r["undefined"]["ci_low"] == NO_BOOTSTRAP for r in mrr)
    # Recall@5 per question is a 0/1 outcome: its Wilson interval needs no resampling
    recall = [r for r in result.metric_records() if r["metric"] == "recall@5"]
    assert recall and all(r["ci_method"] == "wilson" for r in recall)
    evaluation = RetrievalEvaluator(config).result_of(result)
    assert all(
        a.undefined["ci_high"] == NO_BOOTSTRAP for a in evaluation.aggregates if a.metric == "mrr"
    )


def test_an_unexplained_nan_is_a_bug_not_a_null():
    frame = scan(ITEMS, [C1, C2], CONFIG).metrics.assign(value=math.nan)
    with pytest.raises(ValueError, match="unexpected undefined 'value'"):
        undefined_as_null(frame)


# -- the evaluator contract -----------------------------------------------------------------------


def test_retrieval_evaluator_reports_the_scan_numbers_unchanged():
    evaluator = RetrievalEvaluator(CONFIG)
    inputs = RetrievalInputs(items=ITEMS, candidates=[C1, C2])
    result = evaluator.evaluate(inputs)
    frame = scan(ITEMS, [C1, C2], CONFIG).metrics
    assert result.evaluator == "retrieval" and result.primary_metric == "recall@5"
    assert result.greater_is_better is True
    assert result.config["text_weights"] == [0.0, 0.5, 1.0]
    assert len(result.aggregates) == len(frame)
    for agg, row in zip(result.aggregates, frame.itertuples(), strict=True):
        assert agg.facets == {"label": row.label, "text_weight": row.text_weight}
        assert (agg.metric, agg.value, agg.ci_low, agg.ci_high, agg.n, agg.ci_method) == (
            row.metric,
            row.value,
            None if math.isnan(row.ci_low) else row.ci_low,
            None if math.isnan(row.ci_high) else row.ci_high,
            row.n_questions,
            row.ci_method,
        )
    # per-query: 2 questions x 3 weights x 3 metrics (recall@1, mrr, and the primary recall@5)
    assert len(result.queries) == 18
    q1_dense_mrr = [
        q
        for q in result.queries
        if q.qid == "q1" and q.metric == "mrr" and q.facets["text_weight"] == 0.0
    ]
    assert [q.value for q in q1_dense_mrr] == [pytest.approx(1 / 3)]
    assert q1_dense_mrr[0].facets["label"] == "fact_single"


def test_evaluator_registry_refuses_silent_overwrite():
    assert EVALUATORS.get("retrieval") is RetrievalEvaluator

    class Impostor(RetrievalEvaluator):
        name = "retrieval"

    with pytest.raises(ValueError, match="already registered"):
        EVALUATORS.register(Impostor)
    assert EVALUATORS.get("retrieval") is RetrievalEvaluator
    EVALUATORS.register(RetrievalEvaluator)  # the same class again is not an overwrite
    with pytest.raises(KeyError, match="unknown evaluator"):
        EVALUATORS.get("nope")


def test_facet_keys_are_canonical():
    assert facet_key({"text_weight": 0.1, "label": "summary"}) == facet_key(
        {"label": "summary", "text_weight": 0.1 + 1e-12}
    )
    assert facet_key({"label": "x", "text_weight": 0.5}) == '{"label":"x","text_weight":0.5}'
    assert parse_facet_key(facet_key({"b": 1, "a": None})) == {"a": None, "b": 1}
    with pytest.raises(ValueError):
        facet_key({"w": math.nan})
    with pytest.raises(ValueError):
        facet_key({"w": [1]})


def test_the_language_facet_averages_each_languages_questions_at_one_weight():
    import pandas as pd

    from ragtrail.evaluate.retrieval.evaluator import ScanConfig, facet_table

    per_query = pd.DataFrame(
        [
            {"qid": q, "text_weight": w, "recall@5": v}
            for q, w, v in [
                ("a", 0.5, 1.0),
                ("b", 0.5, 0.0),
                ("c", 0.5, 1.0),
                ("a", 1.0, 0.0),
                ("b", 1.0, 0.0),
                ("c", 1.0, 0.0),
            ]
        ]
    )
    config = ScanConfig(text_weights=(0.5, 1.0), bootstrap_samples=200)
    table = facet_table(per_query, {"a": "fr", "b": "fr", "c": "en"}, weight=0.5, config=config)
    rows = table.to_dict("records")
    assert [(r["facet"], r["n_questions"], r["value"]) for r in rows] == [
        ("fr", 2, 0.5),
        ("en", 1, 1.0),
    ]
    assert rows[0]["ci_low"] <= 0.5 <= rows[0]["ci_high"]
    assert all(r["text_weight"] == 0.5 and r["metric"] == "recall@5" for r in rows)
    again = facet_table(per_query, {"a": "fr", "b": "fr", "c": "en"}, weight=0.5, config=config)
    assert again.equals(table)  # seeded
