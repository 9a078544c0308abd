"""Contract: the GX suites accept good frames, name the broken invariant on bad ones, and the
runner's fail/warn gate and Data Docs site behave as the nightly run relies on.

One QualityRunner (one GX context) is shared by the module: creating contexts is the slow part.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ragtrail.quality.runner import QualityGateError, QualityResult, QualityRunner, enforce
from ragtrail.quality.suites import (
    DEFAULT_MAX_CHUNK_CHARS,
    FAIL,
    WARN,
    chunks_suite,
    citation_metrics_suite,
    citation_queries_suite,
    documents_suite,
    golden_set_suite,
    long_word_share,
    prepare_chunks,
    prepare_citation_metrics,
    prepare_golden_set,
    prepare_retrieval_results,
    quarantine_suite,
    retrieval_results_suite,
)
from ragtrail.records import INCLUSIVE, LABELS, sha256_text

MAX_BYTES = 1_000_000
MAX_TOKENS = 200
MAX_TABLE_TOKENS = 400
ALL_LABELS = (*LABELS, INCLUSIVE)
WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)
MIN_QUESTIONS = 5


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("report")


@pytest.fixture(scope="module")
def runner(report_dir: Path) -> QualityRunner:
    return QualityRunner(report_dir)


# ------------------------------------------------------------------------------------------------
# fixtures: good frames
# ------------------------------------------------------------------------------------------------


def good_documents() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "doc_id": ["guide.md", "faq.html", "spec.pdf"],
            "title": ["Guide", "FAQ", "Spec"],
            "format": ["markdown", "html", "pdf"],
            "content_hash": [sha256_text(t) for t in ("a", "b", "c")],
            "size_bytes": [1200, 5400, 90_000],
            "n_chunks": [2, 1, 7],
            "text_chars": [1100, 3000, 40_000],
        }
    )


def good_chunks() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "chunk_id": ["guide.md#0", "guide.md#1", "spec.pdf#0"],
            "doc_id": ["guide.md", "guide.md", "spec.pdf"],
            "ordinal": [0, 1, 0],
            "text": ["Install it.", "Run it.", "| a | b |"],
            "n_tokens": [120, MAX_TOKENS, 350],  # the table may exceed max_tokens
            "kind": ["text", "text", "table"],
        }
    )


def good_metrics() -> pd.DataFrame:
    rows = []
    for i, label in enumerate(ALL_LABELS):
        for weight in WEIGHTS:
            for metric in ("recall@5", "mrr"):
                value = 0.8 - 0.1 * i + 0.05 * weight
                rows.append(
                    {
                        "label": label,
                        "text_weight": weight,
                        "metric": metric,
                        "value": value,
                        "ci_low": value - 0.04,
                        "ci_high": value + 0.04,
                        "n_questions": 40,
                    }
                )
    return pd.DataFrame(rows)


def good_quarantine() -> pd.DataFrame:
    return pd.DataFrame(
        {"reason": ["empty", "too_large"], "detail": ["0 bytes", "25 MB > 20 MB"]},
    )


def validate_documents(runner: QualityRunner, df: pd.DataFrame) -> QualityResult:
    return runner.validate("documents", df, documents_suite(MAX_BYTES))


def validate_chunks(runner: QualityRunner, df: pd.DataFrame) -> QualityResult:
    return runner.validate("chunks", prepare_chunks(df), chunks_suite(MAX_TOKENS, MAX_TABLE_TOKENS))


def validate_metrics(runner: QualityRunner, df: pd.DataFrame) -> QualityResult:
    suite = retrieval_results_suite(ALL_LABELS, WEIGHTS, MIN_QUESTIONS)
    return runner.validate("retrieval_results", prepare_retrieval_results(df), suite)


def failed(result: QualityResult, fragment: str) -> bool:
    return any(fragment in f for f in result.failures)


# ------------------------------------------------------------------------------------------------
# suites as code
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "suite",
    [
        documents_suite(MAX_BYTES),
        chunks_suite(MAX_TOKENS, MAX_TABLE_TOKENS),
        retrieval_results_suite(ALL_LABELS, WEIGHTS, MIN_QUESTIONS),
        quarantine_suite(),
        golden_set_suite(),
        citation_queries_suite(),
        citation_metrics_suite(0.05),
    ],
    ids=lambda s: s.name,
)
def test_every_expectation_declares_a_policy(suite) -> None:
    assert suite.expectations
    for expectation in suite.expectations:
        assert expectation.meta["severity"] in (FAIL, WARN)
        assert expectation.meta["rationale"]


def test_good_frames_pass(runner: QualityRunner) -> None:
    results = [
        validate_documents(runner, good_documents()),
        validate_chunks(runner, good_chunks()),
        validate_metrics(runner, good_metrics()),
        runner.validate("quarantine", good_quarantine(), quarantine_suite()),
    ]
    for result in results:
        assert result.success, result.failures
        assert result.failures == [] and result.warnings == []
        assert result.statistics["evaluated"] == result.statistics["successful"] > 0
    assert enforce(results) == []


def test_duplicate_doc_id_fails(runner: QualityRunner) -> None:
    docs = good_documents()
    docs.loc[1, "doc_id"] = "guide.md"
    result = validate_documents(runner, docs)
    assert not result.success
    assert failed(result, "expect_column_values_to_be_unique(doc_id)")
    assert failed(result, "'guide.md'")  # the observed duplicate is shown


def test_unknown_format_and_bad_hash_fail(runner: QualityRunner) -> None:
    docs = good_documents()
    docs.loc[0, "format"] = "rtf"
    docs.loc[2, "content_hash"] = "abc"
    result = validate_documents(runner, docs)
    assert failed(result, "expect_column_values_to_be_in_set(format)")
    assert failed(result, "'rtf'")
    assert failed(result, "expect_column_value_lengths_to_equal(content_hash)")


def test_oversized_document_fails(runner: QualityRunner) -> None:
    docs = good_documents()
    docs.loc[0, "size_bytes"] = MAX_BYTES + 1
    docs.loc[1, "n_chunks"] = 0
    result = validate_documents(runner, docs)
    assert failed(result, "expect_column_values_to_be_between(size_bytes)")
    assert failed(result, "expect_column_values_to_be_between(n_chunks)")


def test_text_chunk_over_max_tokens_fails(runner: QualityRunner) -> None:
    chunks = good_chunks()
    chunks.loc[0, "n_tokens"] = MAX_TOKENS + 1
    result = validate_chunks(runner, chunks)
    assert not result.success
    assert failed(result, "expect_column_values_to_be_between(n_tokens) where kind == 'text'")
    assert len(result.failures) == 1  # the 350-token table chunk is fine


def test_chunk_problems_fail(runner: QualityRunner) -> None:
    chunks = good_chunks()
    chunks.loc[1, "chunk_id"] = "guide.md#0"
    chunks.loc[2, "kind"] = "image"
    chunks.loc[2, "n_tokens"] = MAX_TABLE_TOKENS + 1
    chunks.loc[0, "text"] = ""
    result = validate_chunks(runner, chunks)
    for fragment in (
        "expect_column_values_to_be_unique(chunk_id)",
        "expect_column_values_to_be_in_set(kind)",
        "expect_column_values_to_be_between(n_tokens) expecting min_value=1, max_value=400",
        "expect_column_value_lengths_to_be_between(text)",
    ):
        assert failed(result, fragment), (fragment, result.failures)


def test_too_many_chunks_per_document_only_warns(runner: QualityRunner) -> None:
    chunks = pd.DataFrame(
        {
            "chunk_id": [f"big#{i}" for i in range(501)],
            "doc_id": "big",
            "ordinal": range(501),
            "text": "x",
            "n_tokens": 10,
            "kind": "text",
        }
    )
    result = validate_chunks(runner, chunks)
    assert result.success
    assert any("chunks_in_doc" in w for w in result.warnings)


def test_chunk_longer_than_the_character_bound_fails(runner: QualityRunner) -> None:
    chunks = good_chunks()
    chunks.loc[0, "text"] = "install " * 600  # 4,800 characters of ordinary words
    result = validate_chunks(runner, chunks)
    assert not result.success
    assert failed(
        result,
        f"expect_column_value_lengths_to_be_between(text) expecting max_value={DEFAULT_MAX_CHUNK_CHARS}",
    ), result.failures
    assert len(result.failures) == 1
    assert not any("long_word_share" in w for w in result.warnings)


def test_chunks_made_of_long_tokens_only_warn(runner: QualityRunner) -> None:
    chunks = good_chunks()
    chunks.loc[1, "text"] = "data: " + "eyJhIjoxLCJiIjpbMiwzXX0" * 40  # a 920-character run
    result = validate_chunks(runner, chunks)
    assert result.success
    assert any("long_word_share" in w for w in result.warnings), result.warnings


def test_long_word_share() -> None:
    assert long_word_share("") == 0.0
    assert long_word_share("plain prose with https://example.org/a/short/link in it") == 0.0
    assert long_word_share("x" * 51) == 1.0
    assert long_word_share("ab " + "x" * 98) == 0.98


def test_metric_value_above_one_fails(runner: QualityRunner) -> None:
    metrics = good_metrics()
    metrics.loc[3, ["value", "ci_low", "ci_high"]] = [1.3, 1.2, 1.4]
    result = validate_metrics(runner, metrics)
    assert not result.success
    assert failed(result, "expect_column_values_to_be_between(value)")
    assert failed(result, "1.3")


def test_missing_label_and_weight_fail(runner: QualityRunner) -> None:
    metrics = good_metrics()
    metrics = metrics[(metrics["label"] != "reasoning") & (metrics["text_weight"] != 0.5)]
    result = validate_metrics(runner, metrics)
    assert failed(result, "expect_column_distinct_values_to_contain_set(label)")
    assert failed(result, "missing ['reasoning']")
    assert failed(result, "expect_column_distinct_values_to_contain_set(text_weight)")
    assert failed(result, "missing [0.5]")


def test_ci_must_contain_value_but_may_be_absent(runner: QualityRunner) -> None:
    metrics = good_metrics()
    metrics.loc[0, ["ci_low", "ci_high"]] = [None, None]  # no interval: fine
    assert validate_metrics(runner, metrics).success
    metrics.loc[1, ["ci_low", "ci_high"]] = [0.1, 0.2]  # value 0.8 outside
    result = validate_metrics(runner, metrics)
    assert failed(result, "expect_column_values_to_be_in_set(ci_contains_value)")


def test_float_noise_in_weights_is_tolerated(runner: QualityRunner) -> None:
    metrics = good_metrics()
    metrics["text_weight"] = metrics["text_weight"] + 1e-12
    assert validate_metrics(runner, metrics).success


def test_quarantine_suite(runner: QualityRunner) -> None:
    bad = pd.DataFrame({"reason": ["empty", "gremlins"], "detail": ["0 bytes", None]})
    result = runner.validate("quarantine", bad, quarantine_suite())
    assert failed(result, "expect_column_values_to_be_in_set(reason)")
    assert failed(result, "'gremlins'")
    assert failed(result, "expect_column_values_to_not_be_null(detail)")
    empty = pd.DataFrame({"reason": pd.Series([], dtype=str), "detail": pd.Series([], dtype=str)})
    assert runner.validate("quarantine", empty, quarantine_suite()).success


def test_missing_column_is_a_failure_not_a_crash(runner: QualityRunner) -> None:
    result = runner.validate("quarantine", pd.DataFrame({"reason": ["empty"]}), quarantine_suite())
    assert not result.success
    assert failed(result, "expect_table_columns_to_match_set")
    assert failed(result, "could not be evaluated")


# ------------------------------------------------------------------------------------------------
# gate and runner
# ------------------------------------------------------------------------------------------------


def test_warnings_do_not_fail_the_gate(runner: QualityRunner) -> None:
    docs = good_documents()
    docs.loc[0, "title"] = None
    docs.loc[1, "text_chars"] = 0
    metrics = good_metrics()
    metrics.loc[metrics["label"] == "reasoning", "n_questions"] = 2
    results = [validate_documents(runner, docs), validate_metrics(runner, metrics)]
    assert all(r.success for r in results)
    assert any("(title)" in w for w in results[0].warnings)
    assert any("(text_chars)" in w for w in results[0].warnings)
    assert any("(n_questions)" in w for w in results[1].warnings)
    warnings = enforce(results)
    assert len(warnings) == 3
    assert warnings[0].startswith("documents: [warn]")


def test_enforce_raises_readable_error(runner: QualityRunner) -> None:
    docs = good_documents()
    docs.loc[1, "doc_id"] = "guide.md"
    good = runner.validate("quarantine", good_quarantine(), quarantine_suite())
    bad = validate_documents(runner, docs)
    with pytest.raises(QualityGateError) as err:
        enforce([good, bad])
    message = str(err.value)
    assert "1 of 2 validation(s)" in message
    assert "- documents:" in message
    assert "expect_column_values_to_be_unique(doc_id)" in message
    assert err.value.results == [bad]


def test_same_name_and_suite_can_be_validated_twice(runner: QualityRunner) -> None:
    suite = quarantine_suite()
    first = runner.validate("twice", good_quarantine(), suite)
    second = runner.validate("twice", good_quarantine(), suite)
    assert first.success and second.success
    assert first.name == second.name == "twice"
    assert first.validation_name != second.validation_name
    assert first.suite_name == "quarantine"
    # an explicit name that looks like a generated one does not collide either
    third = runner.validate(second.validation_name, good_quarantine(), suite)
    fourth = runner.validate("twice", good_quarantine(), suite)
    assert len({r.validation_name for r in (first, second, third, fourth)}) == 4


def test_result_as_dict_is_json_safe(runner: QualityRunner) -> None:
    metrics = good_metrics()
    metrics.loc[0, "value"] = 1.3
    payload = validate_metrics(runner, metrics).as_dict()
    decoded = json.loads(json.dumps(payload))
    assert decoded["success"] is False
    assert set(decoded) >= {"name", "success", "failures", "warnings", "statistics"}
    assert set(decoded["statistics"]) >= {"evaluated", "successful"}


def test_data_docs_are_built_into_the_report_dir(runner: QualityRunner, report_dir: Path) -> None:
    runner.validate("documents", good_documents(), documents_suite(MAX_BYTES))
    index = runner.build_docs()
    assert index == report_dir / "data_docs" / "index.html"
    assert index.is_file()
    assert "documents" in index.read_text(encoding="utf-8")
    assert any((report_dir / "data_docs" / "validations").rglob("*.html"))


def test_null_intervals_with_reasons_from_metrics_json_pass(runner: QualityRunner) -> None:
    """Records as metrics.json holds them after a scan without bootstrap: null CI + reason."""
    records = good_metrics().to_dict("records")
    for record in records:
        record["ci_low"] = record["ci_high"] = None
        record["undefined"] = {"ci_low": "no bootstrap", "ci_high": "no bootstrap"}
    frame = pd.DataFrame(json.loads(json.dumps(records)))
    assert validate_metrics(runner, frame).success


# ------------------------------------------------------------------------------------------------
# golden sets
# ------------------------------------------------------------------------------------------------


def good_golden_set() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "qid": ["g1", "g2", "g3", "g4"],
            "question": ["How many days?", "Summarise it.", "Why so?", "Who is on Mars?"],
            "label": ["fact_single", "summary", "reasoning", "unanswerable"],
            "answer": ["5", "short", "because", ""],
            "ground_doc_ids": [["a.md"], ["a.md", "b.md"], [], ["b.md"]],
            "ground_chunk_ids": [[], [], ["b.md#1"], []],
        }
    )


def validate_golden(runner: QualityRunner, frame: pd.DataFrame) -> QualityResult:
    return runner.validate("golden_set", prepare_golden_set(frame), golden_set_suite())


def test_good_golden_set_passes_without_warnings(runner: QualityRunner) -> None:
    result = validate_golden(runner, good_golden_set())
    assert result.success and result.failures == [] and result.warnings == []
    assert result.statistics["evaluated"] == len(golden_set_suite().expectations)


def test_golden_set_broken_invariants_fail(runner: QualityRunner) -> None:
    frame = good_golden_set()
    frame.loc[1, "qid"] = "g1"
    frame.loc[2, "label"] = "trivia"
    frame.loc[3, "question"] = "   "
    frame.at[0, "ground_doc_ids"] = []
    result = validate_golden(runner, frame)
    assert not result.success
    failed = " ".join(result.failures)
    assert "expect_column_values_to_be_unique(qid)" in failed
    assert "expect_column_values_to_be_in_set(label)" in failed
    assert "question_chars" in failed and "n_ground_ids" in failed
    assert len(result.failures) == 4


def test_golden_set_smells_only_warn(runner: QualityRunner) -> None:
    frame = good_golden_set().iloc[:3].copy()  # no unanswerable question
    frame.loc[0, "answer"] = " "  # answerable without an answer
    frame.loc[1, "question"] = "how many DAYS?"  # same dedup key as row 0
    result = validate_golden(runner, frame)
    assert result.success and result.failures == []
    warned = " ".join(result.warnings)
    assert len(result.warnings) == 3
    assert "answer_ok" in warned and "question_key" in warned
    assert "expect_column_distinct_values_to_contain_set(label)" in warned


# ------------------------------------------------------------------------------------------------
# citations
# ------------------------------------------------------------------------------------------------


def good_citation_queries() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "qid": ["q1", "q1", "q1", "q2"],
            "label": ["summary", "summary", "summary", "unanswerable"],
            "mixture": ["all", "all", "relevant+irrelevant", "all"],
            "system": ["model", "random", "model", "model"],
            "precision": [0.5, 0.25, None, None],
            "recall": [1.0, 0.4, 0.0, None],
            "f1": [2 / 3, 0.3, 0.0, None],
        }
    )


def good_citation_metrics() -> pd.DataFrame:
    rows = [
        ("citation_f1", 0.5, 0.3, 0.7, 5),
        ("answer_words", 14.0, 11.0, 17.0, 5),
        ("invalid_citation_rate", 0.0, 0.0, 0.0, 5),
        ("citation_precision", None, None, None, 0),
    ]
    return pd.DataFrame(
        [
            {
                "evaluation": "citations",
                "metric": m,
                "value": v,
                "ci_low": lo,
                "ci_high": hi,
                "n": n,
            }
            for m, v, lo, hi, n in rows
        ]
    )


def test_good_citation_frames_pass_without_warnings(runner: QualityRunner) -> None:
    queries = runner.validate("cq.good", good_citation_queries(), citation_queries_suite())
    metrics = runner.validate(
        "cm.good", prepare_citation_metrics(good_citation_metrics()), citation_metrics_suite(0.05)
    )
    for result in (queries, metrics):
        assert result.success and result.failures == [] and result.warnings == []


def test_citation_rows_must_be_unique_and_in_range(runner: QualityRunner) -> None:
    frame = good_citation_queries()
    frame.loc[2, "mixture"] = "all"  # q1/all/model twice
    frame.loc[0, "f1"] = 1.5
    frame.loc[1, "system"] = "oracle"
    result = runner.validate("cq.bad", frame, citation_queries_suite())
    failed = " ".join(result.failures)
    assert "expect_compound_columns_to_be_unique" in failed
    assert "be_between(f1)" in failed and "be_in_set(system)" in failed
    assert len(result.failures) == 3


def test_citation_metric_range_interval_and_invalid_share(runner: QualityRunner) -> None:
    frame = good_citation_metrics()
    frame.loc[0, "value"] = 0.9  # outside its interval [0.3, 0.7]
    frame.loc[1, "value"] = -1.0  # a negative count
    frame.loc[2, ["value", "ci_low", "ci_high"]] = [0.2, 0.1, 0.3]
    result = runner.validate(
        "cm.bad", prepare_citation_metrics(frame), citation_metrics_suite(0.05)
    )
    failed = " ".join(result.failures)
    assert "value_in_range" in failed and "ci_contains_value" in failed
    assert len(result.failures) == 2
    assert len(result.warnings) == 1 and "invalid_citation_rate" in result.warnings[0]
