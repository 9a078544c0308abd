"""Critique perturbations on a fixed example, seeded sampling, and foreign picks across documents."""

from __future__ import annotations

import logging
import random

import pytest

from ragtrail.judges.calibration import ContrastPair
from ragtrail.judges.contract import JudgeInput
from ragtrail.judges.contrasts import (
    CRITERION_FIELDS,
    PERTURBATIONS,
    ContrastSource,
    build_contrasts,
    criterion_input,
    statements,
)

LEAVE = ContrastSource(
    source_id="g1",
    doc_id="leave.md",
    context="Employees accrue four hours of leave per pay period. Leave requests go to the "
    "supervisor at least two weeks ahead.",
    question="How much leave do employees accrue per pay period?",
    answer="Four hours per pay period.",
)
TRAVEL = ContrastSource(
    source_id="g2",
    doc_id="travel.md",
    context="Travel must be booked through the agency portal. Receipts are filed within five "
    "days of return.",
    question="Where must travel be booked?",
    answer="Through the agency portal.",
)


def _first_pair(criterion: str, sources: list[ContrastSource], seed: int = 0) -> ContrastPair:
    pairs = [p for p in build_contrasts(criterion, sources, n=10, seed=seed) if p.source_id == "g1"]
    assert len(pairs) == 1
    return pairs[0]


def test_every_criterion_has_a_documented_perturbation() -> None:
    assert set(PERTURBATIONS) == set(CRITERION_FIELDS)
    for criterion, perturbation in PERTURBATIONS.items():
        assert perturbation.criterion == criterion
        assert len(perturbation.description) > 40


def test_criterion_fields_match_the_critique_prompts() -> None:
    critiques = pytest.importorskip("ragtrail.generate.critiques")
    assert {k: v.needs for k, v in critiques.CRITERIA.items()} == CRITERION_FIELDS


def test_intact_input_holds_only_the_fields_the_criterion_reads() -> None:
    assert criterion_input("qa_tautology", LEAVE) == JudgeInput(
        question=LEAVE.question, answer=LEAVE.answer
    )
    assert criterion_input("c_clarity", LEAVE) == JudgeInput(context=LEAVE.context)


def test_stand_alone_refers_to_a_passage() -> None:
    pair = _first_pair("stand_alone", [LEAVE])
    assert pair.intact == JudgeInput(question=LEAVE.question)
    assert pair.perturbed.question == (
        "According to the passage above, how much leave do employees accrue per pay period?"
    )
    acronym = ContrastSource("g1", "d", "c", "PTO rules: who approves them?", "a")
    assert _first_pair("stand_alone", [acronym]).perturbed.question == (
        "According to the passage above, PTO rules: who approves them?"
    )


def test_qa_tautology_answers_with_the_question() -> None:
    pair = _first_pair("qa_tautology", [LEAVE])
    assert pair.perturbed == JudgeInput(question=LEAVE.question, answer=LEAVE.question)


def test_foreign_context_for_both_question_criteria() -> None:
    for criterion in ("q_to_c_groundedness", "q_feasibility"):
        pair = _first_pair(criterion, [LEAVE, TRAVEL])
        assert pair.intact == JudgeInput(context=LEAVE.context, question=LEAVE.question)
        assert pair.perturbed == JudgeInput(context=TRAVEL.context, question=LEAVE.question)


def test_a_to_c_answer_is_a_sentence_of_another_document() -> None:
    pair = _first_pair("a_to_c_groundedness", [LEAVE, TRAVEL])
    assert pair.perturbed.context == LEAVE.context
    assert pair.perturbed.answer in {
        "Travel must be booked through the agency portal.",
        "Receipts are filed within five days of return.",
    }


def test_a_to_c_never_borrows_a_sentence_the_own_context_holds() -> None:
    boilerplate = "This page is maintained by the handbook team."
    own = ContrastSource("g1", "a.md", f"Leave accrues monthly for staff. {boilerplate}", "q", "x")
    other = ContrastSource("g2", "b.md", f"Travel is booked in the portal. {boilerplate}", "q", "y")
    for seed in range(10):
        pair = _first_pair("a_to_c_groundedness", [own, other], seed=seed)
        assert pair.perturbed.answer == "Travel is booked in the portal."
    # the other document holds nothing new for "own" (only the boilerplate), so only "lonely"
    # gets a pair; with "own" alone nothing can be borrowed at all
    lonely = ContrastSource("g2", "b.md", boilerplate, "q", "y")
    (pair,) = build_contrasts("a_to_c_groundedness", [own, lonely], n=2, seed=0)
    assert (pair.source_id, pair.perturbed.answer) == ("g2", "Leave accrues monthly for staff.")
    with pytest.raises(ValueError, match="another document to borrow from"):
        build_contrasts("a_to_c_groundedness", [own], n=1, seed=0)


def test_q_usefulness_keeps_a_vague_fragment() -> None:
    pair = _first_pair("q_usefulness", [LEAVE])
    assert pair.perturbed.question == "How much leave?"
    short = ContrastSource("g1", "d", "c", "Why leave?", "a")
    with pytest.raises(ValueError, match="vague_fragment"):
        build_contrasts("q_usefulness", [short], n=1, seed=0)


def test_c_usefulness_is_an_alphabetical_word_list() -> None:
    source = ContrastSource("g1", "d", "The cat sat. The dog sat!", "q", "a")
    pair = _first_pair("c_usefulness", [source])
    assert pair.perturbed.context == "cat dog sat the"


def test_c_clarity_shuffles_the_words_by_seed() -> None:
    pair = _first_pair("c_clarity", [LEAVE], seed=4)
    words = LEAVE.context.split()
    shuffled = pair.perturbed.context.split()
    assert sorted(shuffled) == sorted(words) and shuffled != words
    assert _first_pair("c_clarity", [LEAVE], seed=4) == pair
    # the shuffle a seed gives is the one random.Random(f"{seed}:c_clarity") gives after sampling
    rng = random.Random("4:c_clarity")
    rng.sample([LEAVE], 1)
    expected = list(words)
    rng.shuffle(expected)
    assert shuffled == expected
    # a two-word context whose shuffle would keep the order is rotated instead
    tiny = ContrastSource("g1", "d", "alpha beta", "q", "a")
    assert {_first_pair("c_clarity", [tiny], seed=s).perturbed.context for s in range(8)} == {
        "beta alpha"
    }


def _corpus(n_docs: int = 3, per_doc: int = 4) -> list[ContrastSource]:
    return [
        ContrastSource(
            source_id=f"d{d}-i{i}",
            doc_id=f"doc{d}",
            context=f"Document {d} passage {i} says something specific about topic {d}. "
            f"It adds a second statement about item {i} of file {d}.",
            question=f"What does passage {i} of document {d} say about topic {d}?",
            answer=f"Something specific about topic {d}.",
        )
        for d in range(n_docs)
        for i in range(per_doc)
    ]


def test_sampling_is_seeded_and_independent_of_input_order() -> None:
    sources = _corpus()
    first = build_contrasts("q_to_c_groundedness", sources, n=5, seed=11)
    again = build_contrasts("q_to_c_groundedness", list(reversed(sources)), n=5, seed=11)
    other = build_contrasts("q_to_c_groundedness", sources, n=5, seed=12)
    assert first == again
    assert first != other
    assert len({p.source_id for p in first}) == 5


@pytest.mark.parametrize(
    "criterion", ["q_to_c_groundedness", "q_feasibility", "a_to_c_groundedness"]
)
def test_foreign_picks_never_come_from_the_same_document(criterion: str) -> None:
    sources = _corpus()
    by_id = {s.source_id: s for s in sources}
    for seed in range(20):
        for pair in build_contrasts(criterion, sources, n=12, seed=seed):
            own_doc = by_id[pair.source_id].doc_id
            borrowed = (
                pair.perturbed.answer if criterion.startswith("a_") else pair.perturbed.context
            )
            lenders = {s.doc_id for s in sources if borrowed in s.context}
            assert lenders and own_doc not in lenders


def test_one_document_gives_no_foreign_pairs() -> None:
    same_doc = [s for s in _corpus() if s.doc_id == "doc0"]
    with pytest.raises(ValueError, match="another document to borrow from"):
        build_contrasts("q_to_c_groundedness", same_doc, n=2, seed=0)


def test_shortfall_gives_fewer_pairs_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    no_answer = ContrastSource("g9", "doc9", "Some context here.", "A question here?", "  ")
    with caplog.at_level(logging.WARNING):
        pairs = build_contrasts("qa_tautology", [LEAVE, TRAVEL, no_answer], n=4, seed=0)
    assert sorted(p.source_id for p in pairs) == ["g1", "g2"]
    assert "4 pair(s) requested, only 2 of 3 source(s) eligible" in caplog.text


def test_bad_arguments() -> None:
    with pytest.raises(KeyError, match="unknown criterion"):
        build_contrasts("nope", [LEAVE], n=1, seed=0)
    with pytest.raises(ValueError, match="duplicate"):
        build_contrasts("stand_alone", [LEAVE, LEAVE], n=1, seed=0)
    with pytest.raises(ValueError, match="n must be"):
        build_contrasts("stand_alone", [LEAVE], n=0, seed=0)


def test_statements_are_whole_sentences_of_five_to_forty_words() -> None:
    text = "Too short. This sentence has exactly six words.\n\nAnother one follows here, fine."
    assert statements(text) == [
        "This sentence has exactly six words.",
        "Another one follows here, fine.",
    ]
