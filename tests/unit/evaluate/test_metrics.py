"""Hand-computed checks of the metrics registry, evaluation semantics, bootstrap and TREC I/O."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragtrail.evaluate.metrics import (
    REGISTRY,
    MetricRegistry,
    MetricSpec,
    aggregate,
    average_precision,
    evaluate,
    ndcg,
    parse_metric,
    per_query_value,
    precision,
    rank_documents,
    recall,
    reciprocal_rank,
    success,
)
from ragtrail.evaluate.retrieval.trec import TrecFormatError, read_qrels, read_run, write_run
from ragtrail.input_files import InputFileError

# Binary judgments: a, c, e relevant (e is never retrieved), x judged non-relevant.
BINARY = {"a": 1, "c": 1, "e": 1, "x": 0}
RANKING = ["a", "b", "c", "d"]  # relevant at ranks 1 and 3

# Graded judgments for nDCG.
GRADED = {"a": 3, "b": 2, "c": 0, "d": 1}


# ---------------------------------------------------------------------------------------- metrics


def test_recall() -> None:
    # top-2 = {a, b}: 1 of 3 relevant
    assert recall(BINARY, RANKING, 2) == pytest.approx(1 / 3)
    # top-4 = {a, b, c, d}: 2 of 3 relevant (e never retrieved)
    assert recall(BINARY, RANKING, 4) == pytest.approx(2 / 3)
    # k larger than the ranking: same as the whole ranking
    assert recall(BINARY, RANKING, 100) == pytest.approx(2 / 3)
    assert recall(BINARY, RANKING, None) == pytest.approx(2 / 3)


def test_precision_keeps_k_as_denominator() -> None:
    # top-2 = {a, b}: 1 relevant / 2
    assert precision(BINARY, RANKING, 2) == pytest.approx(0.5)
    # top-3 = {a, b, c}: 2 relevant / 3
    assert precision(BINARY, RANKING, 3) == pytest.approx(2 / 3)
    # k = 10 > 4 retrieved: trec_eval still divides by 10 -> 2 / 10
    assert precision(BINARY, RANKING, 10) == pytest.approx(0.2)
    # no cutoff: divide by the ranking length -> 2 / 4
    assert precision(BINARY, RANKING, None) == pytest.approx(0.5)
    assert precision(BINARY, [], None) == 0.0


def test_reciprocal_rank() -> None:
    assert reciprocal_rank(BINARY, RANKING, None) == 1.0  # a at rank 1 -> 1/1
    # b (non-rel), x (judged non-rel), c (rel) -> first relevant at rank 3 -> 1/3
    assert reciprocal_rank(BINARY, ["b", "x", "c"], None) == pytest.approx(1 / 3)
    # with a cutoff of 2 the relevant doc at rank 3 is not seen -> 0
    assert reciprocal_rank(BINARY, ["b", "x", "c"], 2) == 0.0
    assert reciprocal_rank(BINARY, ["b", "d"], None) == 0.0


def test_average_precision() -> None:
    # hits at rank 1 (P@1 = 1/1) and rank 3 (P@3 = 2/3); divided by R = 3 relevant
    # (1 + 2/3) / 3 = 5/9
    assert average_precision(BINARY, RANKING, None) == pytest.approx(5 / 9)
    # map_cut_2: only the hit at rank 1 -> 1 / 3
    assert average_precision(BINARY, RANKING, 2) == pytest.approx(1 / 3)
    # perfect ranking of all relevant docs -> (1/1 + 2/2 + 3/3) / 3 = 1
    assert average_precision(BINARY, ["a", "c", "e"], None) == pytest.approx(1.0)


def test_ndcg_graded() -> None:
    ranking = ["c", "b", "a"]  # grades 0, 2, 3
    # DCG@3  = 0/log2(2) + 2/log2(3) + 3/log2(4) = 0 + 1.2618595 + 1.5 = 2.7618595
    # IDCG@3 = 3/log2(2) + 2/log2(3) + 1/log2(4) = 3 + 1.2618595 + 0.5 = 4.7618595
    assert ndcg(GRADED, ranking, 3) == pytest.approx(2.7618595 / 4.7618595, abs=1e-7)
    # DCG@2  = 0 + 2/log2(3) = 1.2618595 ; IDCG@2 = 3 + 1.2618595 = 4.2618595
    assert ndcg(GRADED, ranking, 2) == pytest.approx(1.2618595 / 4.2618595, abs=1e-7)
    # no cutoff: whole ranking vs all relevant grades (3, 2, 1) -> same as @3 here
    assert ndcg(GRADED, ranking, None) == pytest.approx(2.7618595 / 4.7618595, abs=1e-7)
    # ideal order -> 1; nothing relevant retrieved -> 0
    assert ndcg(GRADED, ["a", "b", "d"], 3) == pytest.approx(1.0)
    assert ndcg(GRADED, ["c", "z"], 2) == 0.0


def test_ndcg_k_larger_than_ranking_uses_full_ideal() -> None:
    # one relevant retrieved at rank 1, but IDCG@5 counts all three relevant grades:
    # DCG = 1/log2(2) = 1 ; IDCG = 3 + 2/log2(3) + 1/log2(4) = 4.7618595
    assert ndcg(GRADED, ["d"], 5) == pytest.approx(1 / 4.7618595, abs=1e-7)


def test_success() -> None:
    assert success(BINARY, ["b", "c"], 1) == 0.0  # top-1 = {b}
    assert success(BINARY, ["b", "c"], 2) == 1.0  # top-2 contains c
    assert success(BINARY, ["b", "c"], 50) == 1.0


def test_no_relevant_docs_scores_zero_everywhere() -> None:
    judged = {"a": 0, "b": 0}
    for name in REGISTRY.names():
        assert REGISTRY.get(name).fn(judged, ["a", "b"], 2) == 0.0, name
        assert REGISTRY.get(name).fn({}, [], None) == 0.0, name


def test_negative_grades_are_not_relevant() -> None:
    judged = {"a": -1, "b": 1}
    # only b counts: recall@1 of [a, b] = 0/1, AP = (1/2) / 1
    assert recall(judged, ["a", "b"], 1) == 0.0
    assert average_precision(judged, ["a", "b"], None) == pytest.approx(0.5)
    assert ndcg(judged, ["a", "b"], None) == pytest.approx(1 / math.log2(3))


def test_every_metric_documents_its_formula() -> None:
    for name in REGISTRY.names():
        mdef = REGISTRY.get(name)
        assert mdef.description and "=" in mdef.description, name
        assert mdef.greater_is_better


# ------------------------------------------------------------------------------------------ ranking


def test_rank_documents_breaks_ties_by_docid_descending() -> None:
    scores = {"a": 1.0, "b": 2.0, "c": 1.0, "d": 1.0}
    # b has the top score; a, c, d tie at 1.0 and go d, c, a (trec_eval comp_sim_docno)
    assert rank_documents(scores) == ["b", "d", "c", "a"]


def test_ties_change_metric_values_as_trec_eval_would() -> None:
    # "z" (relevant) and "m" (non-relevant) tie; "z" > "m" so "z" is ranked first -> RR = 1
    assert evaluate({"q": {"z": 1}}, {"q": {"m": 0.5, "z": 0.5}}, ["mrr"])["q"]["mrr"] == 1.0
    # swap the ids: "a" relevant now sorts after "m" -> rank 2 -> RR = 1/2
    assert evaluate({"q": {"a": 1}}, {"q": {"m": 0.5, "a": 0.5}}, ["mrr"])["q"]["mrr"] == 0.5


def test_rank_documents_rejects_nan() -> None:
    with pytest.raises(ValueError, match="NaN"):
        rank_documents({"a": float("nan")})


# --------------------------------------------------------------------------------------- evaluation

QRELS = {
    "q1": {"a": 1, "b": 0},
    "q2": {"c": 1},
    "q3": {"d": 0},  # judged, but nothing relevant
}
RUN = {
    "q1": {"a": 0.9, "b": 0.8},  # relevant at rank 1
    "q3": {"d": 0.4},
    "q9": {"z": 1.0},  # not in qrels: ignored
}


def test_evaluate_default_uses_queries_in_both() -> None:
    per_query = evaluate(QRELS, RUN, ["recall@1", "mrr"])
    # q2 has no run -> skipped (trec_eval without -c); q9 has no qrels -> ignored;
    # q3 has no relevant doc but is evaluated (trec_eval counts it in num_q) and scores 0
    assert per_query == {
        "q1": {"recall@1": 1.0, "mrr": 1.0},
        "q3": {"recall@1": 0.0, "mrr": 0.0},
    }
    # mean over q1, q3 = (1 + 0) / 2
    assert aggregate(per_query) == {"recall@1": 0.5, "mrr": 0.5}


def test_evaluate_complete_counts_missing_queries_as_zero() -> None:
    per_query = evaluate(QRELS, RUN, ["recall@1"], complete=True)
    assert per_query["q2"] == {"recall@1": 0.0}
    # mean over q1, q2, q3 = (1 + 0 + 0) / 3
    assert aggregate(per_query)["recall@1"] == pytest.approx(1 / 3)


def test_evaluate_uses_canonical_ids_and_deduplicates() -> None:
    per_query = evaluate(
        QRELS, RUN, ["precision@1", "P_1", MetricSpec("ndcg_cut", 1), "recip_rank", "P@1"]
    )
    assert list(per_query["q1"]) == ["P@1", "ndcg@1", "mrr"]
    assert evaluate(QRELS, RUN, "mrr")["q1"] == {"mrr": 1.0}  # a lone id is accepted


def test_per_query_value_scores_a_prebuilt_ranking() -> None:
    # d1 relevant at rank 2: recall@5 = 1/1, RR = 1/2, P@1 = 0/1
    assert per_query_value("recall@5", {"d1": 1}, ["d3", "d1"]) == 1.0
    assert per_query_value("mrr", {"d1": 1}, ["d3", "d1"]) == 0.5
    assert per_query_value(parse_metric("P@1"), {"d1": 1}, ["d3", "d1"]) == 0.0
    with pytest.raises(ValueError, match="unknown metric"):
        per_query_value("nope@1", {"d1": 1}, ["d1"])


def test_evaluate_rejects_unknown_or_empty_metrics() -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate(QRELS, RUN, ["bogus@3"])
    with pytest.raises(ValueError, match="no metrics"):
        evaluate(QRELS, RUN, [])


def test_aggregate_errors_and_selection() -> None:
    with pytest.raises(ValueError, match="no queries"):
        aggregate({})
    per_query = {"q1": {"m": 1.0, "n": 0.0}, "q2": {"m": 0.0}}
    assert aggregate(per_query, ["m"]) == {"m": 0.5}
    with pytest.raises(ValueError, match="q2"):
        aggregate(per_query, ["n"])


# --------------------------------------------------------------------------------- specs & registry


def test_parse_metric_ids() -> None:
    spec = parse_metric("recall@5")
    assert (spec.name, spec.k, str(spec), spec.id) == ("recall", 5, "recall@5", "recall@5")
    assert parse_metric("P@5").id == "P@5"
    assert parse_metric("precision@5") == parse_metric("P@5")
    assert parse_metric("p_5").id == "P@5"
    assert parse_metric("ndcg_cut_10").id == "ndcg@10"
    assert parse_metric("NDCG@10").id == "ndcg@10"
    assert parse_metric("ndcg").k is None
    assert parse_metric("recip_rank").id == "mrr"
    assert parse_metric("mrr@10").id == "mrr@10"
    assert parse_metric("map").id == "map"
    assert parse_metric("map_cut_100").id == "map@100"
    assert parse_metric(" success@1 ").id == "success@1"
    assert "log2" in parse_metric("ndcg@10").description


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("recall@", "malformed"),
        ("@5", "malformed"),
        ("recall@0", "positive integer"),
        ("recall@-1", "positive integer"),
        ("recall@x", "positive integer"),
        ("ndcg@2.5", "positive integer"),
        ("bogus", "unknown metric"),
        ("bogus@5", "unknown metric"),
        ("recall_x", "unknown metric"),
    ],
)
def test_parse_metric_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_metric(text)


def test_metric_spec_is_frozen_and_validated() -> None:
    spec = MetricSpec("recall", 5)
    with pytest.raises(AttributeError):
        spec.k = 10  # type: ignore[misc]
    assert spec == MetricSpec("recall", 5, description="anything")
    assert hash(spec) == hash(parse_metric("recall@5"))
    for bad in (0, -3, True):
        with pytest.raises(ValueError):
            MetricSpec("recall", bad)
    with pytest.raises(ValueError):
        MetricSpec("")


def _constant(relevant, ranking, k) -> float:
    """Always 0.5 = a constant, for registry tests."""
    return 0.5


def test_registry_refuses_silent_overwrite() -> None:
    registry = MetricRegistry()
    registry.register("recall", recall)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("recall", _constant)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("RECALL", _constant)
    assert registry.get("recall").fn is recall
    registry.register("recall", _constant, replace=True)
    assert registry.get("recall").fn is _constant
    assert registry.names() == ["recall"]


def test_registry_aliases_cannot_be_stolen_even_with_replace() -> None:
    registry = MetricRegistry()
    registry.register("mrr", reciprocal_rank, aliases=("recip_rank",))
    with pytest.raises(ValueError, match="other metrics"):
        registry.register("rr2", _constant, aliases=("recip_rank",))
    with pytest.raises(ValueError, match="other metrics"):
        registry.register("recip_rank", _constant, replace=True)
    assert registry.get("recip_rank").fn is reciprocal_rank


def test_registry_unknown_names_and_custom_metric() -> None:
    registry = MetricRegistry()
    with pytest.raises(KeyError, match="unknown metric"):
        registry.get("nope")
    mdef = registry.register("half", _constant, greater_is_better=False)
    assert mdef.description == "Always 0.5 = a constant, for registry tests."
    spec = registry.parse("half@3")
    assert (spec.id, spec.greater_is_better) == ("half@3", False)
    assert evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, [spec], registry=registry) == {
        "q": {"half@3": 0.5}
    }
    registry.unregister("half")
    assert "half" not in registry
    with pytest.raises(ValueError, match="invalid metric name"):
        registry.register("a@b", _constant)


def test_default_registry_contents() -> None:
    assert REGISTRY.names() == ["map", "mrr", "ndcg", "precision", "recall", "success"]
    with pytest.raises(ValueError, match="already registered"):
        REGISTRY.register("ndcg", _constant)


# ------------------------------------------------------------------------------------------ TREC IO


def test_read_qrels_and_run(tmp_path: Path) -> None:
    qrels_path = tmp_path / "qrels.txt"
    qrels_path.write_text("# comment\nq1 0 d1 1\n\nq1 0 d2 0\nq2\t0\td3\t2\n")
    assert read_qrels(qrels_path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
    run_path = tmp_path / "run.txt"
    run_path.write_text("q1 Q0 d1 1 2.5 tag\nq1 Q0 d2 2 -1e-3 tag\n")
    assert read_run(run_path) == {"q1": {"d1": 2.5, "d2": -0.001}}


def test_trec_files_skip_a_bom_and_name_the_line_of_undecodable_bytes(tmp_path: Path) -> None:
    qrels_path = tmp_path / "qrels.txt"
    qrels_path.write_bytes(b"\xef\xbb\xbfq1 0 d1 1\n")
    assert read_qrels(qrels_path) == {"q1": {"d1": 1}}  # not "\ufeffq1"
    run_path = tmp_path / "run.txt"
    run_path.write_bytes(b"q1 Q0 d1 1 2.5 tag\nq1 Q0 d\xe9 2 1.0 tag\n")
    with pytest.raises(InputFileError, match=rf"^{run_path}:2: not UTF-8 text"):
        read_run(run_path)


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ("q1 0 d1 1\nq1 0 d2\n", 2, "expected 4 fields"),
        ("q1 0 d1 yes\n", 1, "must be an integer"),
        ("q1 0 d1 1\n\nq1 0 d1 0\n", 3, "duplicate"),
    ],
)
def test_read_qrels_errors_name_file_and_line(
    tmp_path: Path, content: str, line: int, message: str
) -> None:
    path = tmp_path / "bad.qrels"
    path.write_text(content)
    with pytest.raises(TrecFormatError, match=message) as info:
        read_qrels(path)
    assert info.value.line_no == line
    assert str(info.value).startswith(f"{path}:{line}:")


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ("q1 Q0 d1 1 0.5\n", 1, "expected 6 fields"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 high t\n", 2, "must be a number"),
        ("q1 Q0 d1 1 nan t\n", 1, "NaN"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n", 2, "duplicate"),
    ],
)
def test_read_run_errors_name_file_and_line(
    tmp_path: Path, content: str, line: int, message: str
) -> None:
    path = tmp_path / "bad.run"
    path.write_text(content)
    with pytest.raises(TrecFormatError, match=message) as info:
        read_run(path)
    assert info.value.line_no == line
    assert str(info.value).startswith(f"{path}:{line}:")


def test_write_run_round_trips_in_trec_order(tmp_path: Path) -> None:
    run = {"q2": {"x": 0.1}, "q1": {"a": 1 / 3, "b": 0.7, "c": 1 / 3}}
    path = write_run(run, tmp_path / "run.txt", "mytag")
    lines = path.read_text().splitlines()
    # qids sorted; q1 by score desc, the a/c tie by docid descending (c before a)
    assert [line.split()[:4] for line in lines] == [
        ["q1", "Q0", "b", "1"],
        ["q1", "Q0", "c", "2"],
        ["q1", "Q0", "a", "3"],
        ["q2", "Q0", "x", "1"],
    ]
    assert all(line.endswith(" mytag") for line in lines)
    assert read_run(path) == run  # exact floats survive


def test_write_run_rejects_whitespace_tokens(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tag"):
        write_run({"q": {"d": 1.0}}, tmp_path / "r.txt", "my tag")
    with pytest.raises(ValueError, match="docid"):
        write_run({"q": {"d 1": 1.0}}, tmp_path / "r.txt", "t")
