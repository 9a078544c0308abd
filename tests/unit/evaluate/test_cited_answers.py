"""Citation markers, cited statements and the answering prompts' schemas."""

from __future__ import annotations

import pytest

from ragtrail.evaluate.attribution.cited_answers import (
    CITED_ANSWER_PROMPT,
    CitedAnswerInput,
    CitedAnswerOutput,
    CitedSentence,
    Statement,
    all_citations,
    answer_words,
    parse_citation_markers,
    parse_statements,
    render_answer,
    statements_of,
    strip_citation_markers,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris [1].", [1]),
        ("Paris [1][2].", [1, 2]),
        ("Paris [1, 2].", [1, 2]),
        ("Paris [1,2] and Rome [2].", [1, 2, 2]),
        ("Paris [ 3 ].", [3]),
        ("no citation", []),
        ("not citations: [a] [1-2] [] [x1]", []),
        ("out of range [0][17]", [0, 17]),
    ],
)
def test_parse_citation_markers_accepts_the_four_forms(text: str, expected: list[int]) -> None:
    assert parse_citation_markers(text) == expected


def test_strip_markers_tidies_spaces() -> None:
    assert strip_citation_markers("Paris is big [1][2] . It is old [3, 4]") == (
        "Paris is big. It is old"
    )


def test_statements_credit_leading_markers_to_the_sentence_before() -> None:
    answer = "Paris is the capital.[1][3] It is big. [2] It is old [1,2]"
    assert parse_statements(answer) == [
        Statement("Paris is the capital.", (1, 3)),
        Statement("It is big.", (2,)),
        Statement("It is old", (1, 2)),
    ]


def test_statements_keep_out_of_range_numbers_and_drop_repeats() -> None:
    (s,) = parse_statements("Rome was founded in 753 BC [9][2][9].")
    assert s.citations == (9, 2)
    assert all_citations(parse_statements("A [1]. B [2][1]. C.")) == (1, 2)


def test_uncited_answers_and_empty_answers_are_results() -> None:
    assert parse_statements("") == []
    assert parse_statements("I do not know.") == [Statement("I do not know.", ())]
    assert answer_words(parse_statements("One two three [1]. Four.")) == 4


def test_render_round_trips_through_the_parser() -> None:
    statements = [Statement("Paris is big.", (1, 2)), Statement("It is old.", ())]
    assert render_answer(statements) == "Paris is big [1][2]. It is old."
    assert parse_statements(render_answer(statements)) == statements


def test_structured_output_reads_markers_written_into_the_text() -> None:
    out = CitedAnswerOutput(
        sentences=[
            CitedSentence(text="Tickets cost 3 euros [2].", citations=[]),
            CitedSentence(text="Sold on board.", citations=[1, 3, 1]),
            CitedSentence(text="  [4] ", citations=[4]),
        ]
    )
    assert statements_of(out) == [
        Statement("Tickets cost 3 euros.", (2,)),
        Statement("Sold on board.", (1, 3)),
    ]


def test_guided_schema_admits_only_in_range_citations() -> None:
    schema = CITED_ANSWER_PROMPT.guided_schema(
        CitedAnswerInput(question="q", passages=["a", "b", "c", "d"])
    )
    cites = schema["properties"]["sentences"]["items"]["properties"]["citations"]
    assert (cites["items"]["minimum"], cites["items"]["maximum"]) == (1, 4)
    assert (cites["minItems"], cites["maxItems"]) == (1, 3)


def test_passages_render_as_numbered_documents() -> None:
    messages = CITED_ANSWER_PROMPT.render(CitedAnswerInput(question="q?", passages=["x", "y"]))
    user = messages[-1]["content"]
    assert 'index="1"' in user and 'index="2"' in user
