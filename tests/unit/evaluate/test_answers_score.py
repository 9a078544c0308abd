"""score_answers / AnswersEvaluator: facets, macro-averages with CIs and n, skipped metrics."""

from __future__ import annotations

import pytest

from ragtrail import jsonsafe
from ragtrail.evaluate.attribution.answer_metrics import NO_RELEVANCE
from ragtrail.evaluate.attribution.cited_answers import AnswerRecord, SourcePassage
from ragtrail.evaluate.attribution.scoring import (
    AnswersEvaluator,
    AttributionConfig,
    score_answers,
)
from ragtrail.evaluate.contract import EVALUATORS
from ragtrail.records import INCLUSIVE
from ragtrail.stats.intervals import wilson_interval
from tests.unit._word_subset_judge import WordSubsetJudge

PASSAGES = (
    SourcePassage("d1", "The ferry leaves at six. Tickets cost three euros."),
    SourcePassage("d3", "Tickets are sold at the kiosk."),
)


def answer(qid: str, text: str, label: str, **fields) -> AnswerRecord:
    return AnswerRecord(qid, "?", text, PASSAGES, label=label, **fields)


# autoais_cit: 1.0, 0.0 (label a) and 0.5 (label b); only a1 has relevance (precision 1.0)
RECORDS = [
    answer("a1", "Tickets cost three euros [1].", "a", relevant_docids=("d1",)),
    answer("a2", "The ferry is free [2].", "a"),
    answer("b1", "Tickets cost three euros [1]. The ferry is free [2].", "b"),
]


def test_the_evaluator_is_registered() -> None:
    assert EVALUATORS.get("attribution") is AnswersEvaluator
    assert AnswersEvaluator.primary_metric == "autoais_cit"
    assert AnswersEvaluator.greater_is_better is True


def test_macro_averages_per_label_and_inclusive_with_ci_and_n() -> None:
    judge = WordSubsetJudge()
    score = score_answers(RECORDS, judge, bootstrap_samples=200, seed=5)
    assert score.judge_ref == judge.spec.ref and score.result.config["judge"] == judge.spec.ref
    a = score.aggregate("autoais_cit", {"label": "a"})
    assert (a.value, a.n) == (0.5, 2)
    assert 0.0 <= a.ci_low <= 0.5 <= a.ci_high <= 1.0
    b = score.aggregate("autoais_cit", {"label": "b"})
    # one value: no interval (never the zero-width [0.5, 0.5] resampling one value would give)
    assert (b.value, b.ci_low, b.ci_high, b.n, b.ci_method) == (0.5, None, None, 1, "none")
    assert "one value" in b.undefined["ci_low"]
    overall = score.aggregate("autoais_cit")
    assert overall.facets == {"label": INCLUSIVE} and (overall.value, overall.n) == (0.5, 3)
    again = score_answers(RECORDS, WordSubsetJudge(), bootstrap_samples=200, seed=5)
    assert again.aggregate("autoais_cit", {"label": "a"}) == a
    # 0/1 values are outcomes: the Wilson interval of 1 in 2
    assert a.ci_method == "wilson"
    assert (a.ci_low, a.ci_high) == pytest.approx(wilson_interval(1, 2))


def test_undefined_values_are_left_out_of_the_mean_and_counted() -> None:
    score = score_answers(RECORDS, None, bootstrap_samples=100)
    precision = score.aggregate("citation_precision")
    assert (precision.value, precision.n) == (1.0, 1)
    none_defined = score.aggregate("citation_precision", {"label": "b"})
    assert none_defined.value is None and none_defined.n == 0
    assert "no answer of the 1" in none_defined.undefined["value"]
    assert score.undefined["citation_precision"] == {NO_RELEVANCE: 2}
    a2 = next(r for r in score.records if r["qid"] == "a2")
    assert a2["citation_precision"] is None
    assert a2["undefined"]["citation_precision"] == NO_RELEVANCE
    queries = [q for q in score.result.queries if q.metric == "citation_precision"]
    assert [q.value for q in queries] == [1.0, None, None]


def test_skipped_metrics_say_why() -> None:
    score = score_answers(RECORDS, None, bootstrap_samples=0)
    assert score.skipped["autoais_cit"] == "entailment metrics: no entailment judge configured"
    assert score.skipped["overlap_precision"].startswith("citation overlap: no record has")
    assert score.skipped["rouge_l_f1"] == "correctness: no record has gold_answers"
    assert "citation_precision" not in score.skipped
    assert set(score.result.metrics()) == {"citation_precision", "citation_recall", "citation_f1"}
    assert score.judge_calls == score.judged_pairs == 0


def test_small_n_intervals_need_no_resampling() -> None:
    agg = score_answers(RECORDS, WordSubsetJudge(), bootstrap_samples=0).aggregate("autoais_cit")
    assert agg.value == 0.5 and agg.ci_method == "t" and agg.ci_low < 0.5 < agg.ci_high


def test_caller_facets_group_the_answers() -> None:
    score = score_answers(
        RECORDS,
        WordSubsetJudge(),
        facets_of=lambda r: {"scenario": "RTG-vanilla", "label": r.label},
        bootstrap_samples=0,
    )
    keys = {a.facet_key for a in score.result.aggregates}
    assert keys == {
        '{"label":"a","scenario":"RTG-vanilla"}',
        '{"label":"b","scenario":"RTG-vanilla"}',
        '{"label":"inclusive","scenario":"RTG-vanilla"}',
    }
    unlabelled = [AnswerRecord("u", "?", "Tickets cost three euros [1].", PASSAGES)]
    alone = score_answers(unlabelled, WordSubsetJudge(), bootstrap_samples=0)
    assert {a.facet_key for a in alone.result.aggregates} == {"{}"}


def test_failed_verdicts_are_counted_with_their_raw_output() -> None:
    judge = WordSubsetJudge(fail_on={"The ferry is free."})
    score = score_answers(RECORDS, judge, bootstrap_samples=0)
    assert score.failed_verdicts == 2  # the sentence against each passage ([2] is also its joint)
    assert {f["raw"][0] for f in score.failures} == {"{verd"}
    cit = score.aggregate("autoais_cit")
    assert (cit.value, cit.n) == (1.0, 1)  # a2 and b1 read a failed verdict: undefined
    assert len(judge.batches) == 1 and score.judge_calls == 1


def test_as_json_is_strict_json() -> None:
    score = score_answers(RECORDS, WordSubsetJudge(), bootstrap_samples=0)
    data = score.as_json()
    text = jsonsafe.dumps(data, "answers")
    assert '"ci_low": null' in text and data["judge"]["name"] == "entailment.test-word-subset"
    assert data["answers"] == 3 and data["citations"] == 4 and data["invalid_citations"] == 0


def test_the_config_must_name_the_judge_given() -> None:
    with pytest.raises(ValueError, match=r"config\.judge"):
        AnswersEvaluator(AttributionConfig(judge="entailment.nli@j-0"), None)
    with pytest.raises(ValueError, match="bootstrap_samples"):
        AnswersEvaluator(AttributionConfig(bootstrap_samples=-1))


def test_the_result_is_stored_with_its_undefined_values(engine) -> None:
    from ragtrail.storage.db import upgrade
    from ragtrail.storage.runs_store import RunStore

    upgrade(engine)
    store = RunStore(engine)
    score = score_answers(RECORDS, WordSubsetJudge(), bootstrap_samples=0)
    store.record_evaluation(
        "r1",
        score.result,
        corpus=None,
        corpus_snapshot="-",
        qa_set_version="log",
        models={},
        judges={"entailment": score.judge_ref},
    )
    (point,) = store.metrics_history(
        "citation_precision", evaluation="attribution", facets={"label": "b"}
    )
    assert point.value is None and point.n == 0 and "no answer" in point.undefined["value"]
    stored = {
        (q.qid, q.metric): q for q in store.query_results("r1", "attribution") if q.qid == "a2"
    }
    assert stored[("a2", "citation_precision")].undefined_reason == NO_RELEVANCE
    assert stored[("a2", "autoais_cit")].value == 0.0
    assert len(store.query_results("r1")) == len(score.result.queries) == 3 * 7
