"""Per-answer attribution metrics against hand-computed values (the judge is a word-subset rule)."""

from __future__ import annotations

import pytest

from ragtrail.evaluate.attribution.answer_metrics import (
    BLEU,
    CITATION_F1,
    CITATION_PRECISION,
    CITATION_RECALL,
    NO_GOLD_ANSWERS,
    NO_PASSAGES,
    NO_RELEVANCE,
    NO_RELEVANT_PASSAGE,
    NO_STATEMENTS,
    NO_VALID_CITATION,
    ROUGE_L_F1,
    ROUGE_L_PRECISION,
    ROUGE_L_RECALL,
    Entailments,
    Score,
    alce_citation_precision,
    alce_citation_recall,
    autoais_cit,
    autoais_pssg,
    choose_gold_answer,
    citation_counts,
    citation_overlap,
    correctness_scores,
    judge_entailments,
    relevance_scores,
)
from ragtrail.evaluate.attribution.cited_answers import (
    AnswerRecord,
    GoldAnswer,
    SourcePassage,
    Statement,
)
from tests.unit._word_subset_judge import WordSubsetJudge

FERRY = "The ferry leaves at six. Tickets cost three euros."
LIGHTHOUSE = "The lighthouse opened in 1998."
KIOSK = "Tickets are sold at the kiosk."
PASSAGES = (
    SourcePassage("d1", FERRY),
    SourcePassage("d2", LIGHTHOUSE),
    SourcePassage("d3", KIOSK),
)


def record(answer: str, passages=PASSAGES, **fields) -> AnswerRecord:
    return AnswerRecord(qid="q", question="?", answer=answer, passages=passages, **fields)


# Four statements: [1] supports s1; s2 cites [1][2] and only [2] supports it; s3 is supported by
# no passage; s4 has no citation but [3] supports it.
MIXED = record(
    "Tickets cost three euros [1]. The lighthouse opened in 1998 [1][2]. "
    "The ferry is free [3]. Tickets are sold at the kiosk."
)


def table() -> Entailments:
    return Entailments(WordSubsetJudge())


def test_the_mixed_answer_parses_as_intended() -> None:
    assert [s.citations for s in MIXED.cited_statements()] == [(1,), (1, 2), (3,), ()]


def test_autoais_cit_takes_the_best_cited_passage_and_scores_uncited_statements_0() -> None:
    # s1: [1] entails; s2: [2] entails; s3: [3] does not; s4: no citation -> 0.
    assert autoais_cit(MIXED, table()) == Score(2 / 4)


def test_autoais_pssg_looks_at_every_passage() -> None:
    # s1 by [1], s2 by [2], s4 by [3]; s3 by none.
    assert autoais_pssg(MIXED, table()) == Score(3 / 4)


def test_alce_recall_judges_the_cited_passages_together() -> None:
    # s1 and s2 (jointly [1]+[2]) supported; s3 not; s4 cites nothing.
    assert alce_citation_recall(MIXED, table()) == Score(2 / 4)
    joint = record("The ferry leaves at six at the kiosk [1][3].")
    # neither [1] nor [3] alone holds every word, together they do
    assert alce_citation_recall(joint, table()) == Score(1.0)
    assert autoais_cit(joint, table()) == Score(0.0)


def test_alce_precision_counts_over_citation_as_0() -> None:
    # 4 citations: s1 [1] counts; s2 [1] is an over-citation ([2] alone still entails), [2]
    # counts; s3's [3] belongs to an unsupported statement.
    assert alce_citation_precision(MIXED, table()) == Score(2 / 4)


def test_alce_precision_keeps_citations_needed_together() -> None:
    # Neither passage entails alone and neither can be dropped: both count.
    joint = record("The ferry leaves at six at the kiosk [1][3].")
    assert alce_citation_precision(joint, table()) == Score(1.0)


def test_alce_precision_with_three_citations_uses_leave_one_out_sets() -> None:
    # [2] entails alone (counts); [1] and [3] do not, and the other two still entail: 1/3.
    three = record("The lighthouse opened in 1998 [1][2][3].")
    assert alce_citation_precision(three, table()) == Score(1 / 3)


def test_out_of_range_citations_cite_nothing_and_are_counted() -> None:
    answer = record("Tickets cost three euros [7]. The lighthouse opened in 1998 [2][9].")
    assert citation_counts(answer) == (3, 2)
    assert autoais_cit(answer, table()) == Score(1 / 2)
    assert alce_citation_recall(answer, table()) == Score(1 / 2)
    assert alce_citation_precision(answer, table()) == Score(1.0)  # [2] is the one valid one
    only_invalid = record("Tickets cost three euros [4].")
    assert alce_citation_precision(only_invalid, table()) == Score.undefined(NO_VALID_CITATION)


def test_empty_answers_and_missing_passages_are_undefined_with_reasons() -> None:
    empty = record("")
    for metric in (autoais_cit, autoais_pssg, alce_citation_recall, alce_citation_precision):
        assert metric(empty, table()) == Score.undefined(NO_STATEMENTS)
    closed_book = record("Tickets cost three euros.", passages=())
    assert autoais_pssg(closed_book, table()) == Score.undefined(NO_PASSAGES)
    assert autoais_cit(closed_book, table()) == Score(0.0)
    assert alce_citation_precision(closed_book, table()) == Score.undefined(NO_VALID_CITATION)


def test_given_statements_are_used_as_they_are() -> None:
    structured = record(
        '{"sentences": "raw structured output"}',
        statements=(Statement("Tickets cost three euros.", (1,)),),
    )
    assert autoais_cit(structured, table()) == Score(1.0)


def test_a_failed_verdict_makes_only_the_metrics_that_read_it_undefined() -> None:
    # s4 has no citation: only AutoAIS_pssg asks the judge about it.
    judge = WordSubsetJudge(fail_on={"Tickets are sold at the kiosk."})
    entailments = Entailments(judge)
    pssg = autoais_pssg(MIXED, entailments)
    assert pssg.value is None and "failed on 3 pair(s)" in str(pssg.reason)
    assert "unparseable" in str(pssg.reason)
    assert autoais_cit(MIXED, entailments) == Score(2 / 4)
    assert alce_citation_recall(MIXED, entailments) == Score(2 / 4)
    assert alce_citation_precision(MIXED, entailments) == Score(2 / 4)
    assert len(entailments.failures()) == 3


def test_a_failed_verdict_of_a_cited_statement_undefines_every_entailment_metric() -> None:
    entailments = Entailments(WordSubsetJudge(fail_on={"The ferry is free."}))
    for metric in (autoais_cit, autoais_pssg, alce_citation_recall, alce_citation_precision):
        assert metric(MIXED, entailments).value is None


def test_an_evaluation_judges_each_pair_once_in_at_most_two_calls() -> None:
    judge = WordSubsetJudge()
    three = record("The lighthouse opened in 1998 [1][2][3].")
    records = [MIXED, three, MIXED]
    entailments = judge_entailments(records, judge)
    assert len(judge.batches) == 2
    assert len(judge.judged) == len(set(judge.judged)) == entailments.judged
    # round two: the leave-one-out sets of the three-citation statement's failing solos, [2]+[3]
    # and [1]+[2]; the latter was judged in round one as MIXED's joint premise of the same
    # sentence, so only one pair is sent
    s = "The lighthouse opened in 1998."
    second = [(i.premise, i.hypothesis) for i in judge.batches[1]]
    assert second == [(f"{LIGHTHOUSE}\n{KIOSK}", s)]
    assert (f"{FERRY}\n{LIGHTHOUSE}", s) in judge.judged[: len(judge.batches[0])]
    before = len(judge.judged)
    assert alce_citation_precision(three, entailments) == Score(1 / 3)
    assert autoais_pssg(MIXED, entailments) == Score(3 / 4)
    assert len(judge.judged) == before  # every metric read from the table


def test_no_second_call_when_no_statement_needs_one() -> None:
    judge = WordSubsetJudge()
    judge_entailments([MIXED], judge)  # s2's leave-one-out set is [2] alone, already judged
    assert len(judge.batches) == 1


# ---------------------------------------------------------------------------- overlap


@pytest.mark.parametrize(
    ("flags", "chosen"),
    [
        ([(False, True), (True, False), (True, True)], 2),
        ([(False, True), (True, None), (True, False)], 1),
        ([(False, False), (None, True), (False, True)], 1),
        ([(False, False), (None, None)], 0),
    ],
)
def test_gold_answer_choice_rule(flags, chosen) -> None:
    golds = [GoldAnswer(f"g{i}", a, b) for i, (a, b) in enumerate(flags)]
    assert choose_gold_answer(golds) is golds[chosen]


OVERLAP_FIELDS = {
    "gold_answers": (
        GoldAnswer("Other [2].", attributable=False, informative=True),
        GoldAnswer("Chosen [1]. Also [2].", attributable=True, informative=True),
    ),
    "gold_passages": (SourcePassage("d1", "g1"), SourcePassage("d9", "g2")),
}


def test_citation_overlap_by_docid() -> None:
    # C_gen = {d1, d3}, C_gold = {d1, d9}: one in common.
    overlap = citation_overlap(record("Alpha [1]. Beta [3].", **OVERLAP_FIELDS))
    assert (overlap.precision, overlap.recall) == (Score(1 / 2), Score(1 / 2))
    assert overlap.generated == {"d1", "d3"} and overlap.gold == {"d1", "d9"}


def test_citation_overlap_defect_compatible_counts_only_citation_1() -> None:
    overlap = citation_overlap(
        record("Alpha [1]. Beta [3].", **OVERLAP_FIELDS), defect_compatible=True
    )
    assert (overlap.precision, overlap.recall) == (Score(1.0), Score(1 / 2))
    only_3 = record("Beta [3].", **OVERLAP_FIELDS)
    corrected = citation_overlap(only_3)
    assert (corrected.precision, corrected.recall) == (Score(0.0), Score(0.0))
    compatible = citation_overlap(only_3, defect_compatible=True)  # C_gen empty: 0, not undefined
    assert (compatible.precision, compatible.recall) == (Score(0.0), Score(0.0))


def test_citation_overlap_undefined_cases() -> None:
    uncited = citation_overlap(record("No citation.", **OVERLAP_FIELDS))
    assert uncited.precision == Score.undefined(NO_VALID_CITATION)
    assert uncited.recall == Score(0.0)
    no_gold = citation_overlap(record("Alpha [1]."))
    assert no_gold.precision == no_gold.recall == Score.undefined(NO_GOLD_ANSWERS)
    gold_uncited = {**OVERLAP_FIELDS, "gold_answers": (GoldAnswer("No marker.", True, True),)}
    assert citation_overlap(record("Alpha [1].", **gold_uncited)).recall.value is None


# ---------------------------------------------------------------------------- correctness


def test_rouge_l_and_bleu_best_over_gold_answers_markers_stripped() -> None:
    answer = record(
        "The cat is on the mat [1].",
        gold_answers=(GoldAnswer("A dog barked [2]."), GoldAnswer("The cat sat on the mat [1].")),
    )
    scores = correctness_scores(answer)
    # LCS "the cat on the mat" = 5 of 6 words on both sides
    assert scores[ROUGE_L_PRECISION].value == pytest.approx(5 / 6)
    assert scores[ROUGE_L_RECALL].value == pytest.approx(5 / 6)
    assert scores[ROUGE_L_F1].value == pytest.approx(5 / 6)
    # 13a tokens (7 each, "." included): 1-4-gram precisions 6/7, 4/6, 2/5, 1/4; no brevity penalty
    assert scores[BLEU].value == pytest.approx((6 / 7 * 4 / 6 * 2 / 5 * 1 / 4) ** 0.25)


def test_correctness_of_an_empty_answer_is_0_and_without_gold_undefined() -> None:
    empty = correctness_scores(record("", gold_answers=(GoldAnswer("The cat sat."),)))
    assert {s.value for s in empty.values()} == {0.0}
    assert set(correctness_scores(record("x")).values()) == {Score.undefined(NO_GOLD_ANSWERS)}


# ---------------------------------------------------------------------- relevance of citations


def test_citation_precision_recall_f1_against_relevance() -> None:
    # valid citations [1] (d1) and [2] (d2), [5] invalid; relevant present: d2, d3 (d9 absent)
    answer = record("Alpha [1][5]. Beta [2].", relevant_docids=("d2", "d3", "d9"))
    scores = relevance_scores(answer)
    assert scores[CITATION_PRECISION] == Score(1 / 2)
    assert scores[CITATION_RECALL] == Score(1 / 2)
    assert scores[CITATION_F1] == Score(1 / 2)


def test_citation_f1_is_0_when_nothing_relevant_is_cited() -> None:
    uncited = relevance_scores(record("No citation.", relevant_docids=("d2",)))
    assert uncited[CITATION_PRECISION] == Score.undefined(NO_VALID_CITATION)
    assert uncited[CITATION_RECALL] == Score(0.0)
    assert uncited[CITATION_F1] == Score(0.0)


def test_citation_recall_undefined_when_no_relevant_passage_was_given() -> None:
    scores = relevance_scores(record("Alpha [1].", relevant_docids=("d9",)))
    assert scores[CITATION_PRECISION] == Score(0.0)
    assert scores[CITATION_RECALL] == scores[CITATION_F1] == Score.undefined(NO_RELEVANT_PASSAGE)
    assert relevance_scores(record("Alpha [1]."))[CITATION_RECALL] == Score.undefined(NO_RELEVANCE)


def test_passages_of_one_document_count_once_in_recall() -> None:
    chunks = (SourcePassage("d1", "part one"), SourcePassage("d1", "part two"))
    scores = relevance_scores(record("Alpha [1][2].", passages=chunks, relevant_docids=("d1",)))
    assert (scores[CITATION_PRECISION], scores[CITATION_RECALL]) == (Score(1.0), Score(1.0))


def test_score_refuses_nan_and_a_value_with_a_reason() -> None:
    with pytest.raises(ValueError):
        Score(float("nan"))
    with pytest.raises(ValueError):
        Score(0.5, "why")
    with pytest.raises(ValueError):
        Score(None)
