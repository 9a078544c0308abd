"""The answers JSONL format: validation of every line at once, round trip, duplicates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragtrail.evaluate.attribution.cited_answers import AnswerRecord, GoldAnswer, SourcePassage
from ragtrail.evaluate.attribution.scoring import (
    AnswersFormatError,
    load_answers,
    parse_answers,
    record_as_json,
    write_answers,
)
from ragtrail.input_files import InputFileError

FULL = {
    "qid": "q1",
    "question": "How much is the ferry?",
    "answer": "Three euros [1].",
    "passages": [{"docid": "d1", "text": "A ticket costs three euros."}],
    "relevant_docids": ["d1", "d1"],
    "gold_answers": [{"text": "It costs three euros [1].", "attributable": True}],
    "gold_passages": [{"docid": "d1", "text": "A ticket costs three euros."}],
    "label": "fact_single",
}
MINIMAL = {"qid": "q2", "question": "?", "answer": "", "passages": []}


def lines(*rows: object) -> list[str]:
    return [row if isinstance(row, str) else json.dumps(row) for row in rows]


def test_a_full_and_a_minimal_line() -> None:
    full, minimal = parse_answers(lines(FULL, "", "   ", MINIMAL))
    assert full == AnswerRecord(
        qid="q1",
        question="How much is the ferry?",
        answer="Three euros [1].",
        passages=(SourcePassage("d1", "A ticket costs three euros."),),
        relevant_docids=("d1",),
        gold_answers=(GoldAnswer("It costs three euros [1].", True, None),),
        gold_passages=(SourcePassage("d1", "A ticket costs three euros."),),
        label="fact_single",
    )
    assert minimal.passages == () and minimal.gold_answers is None
    assert minimal.relevant_docids is None and minimal.label is None


def test_an_integer_qid_is_read_as_text() -> None:
    (record,) = parse_answers(lines({**MINIMAL, "qid": 7}))
    assert record.qid == "7"


def test_every_problem_is_reported_with_its_line_number() -> None:
    bad = lines(
        "{not json",  # 1
        {k: v for k, v in FULL.items() if k != "answer"},  # 2: missing answer
        {**MINIMAL, "qid": "q3", "gold_answer": []},  # 3: misspelt field
        "",  # 4: blank, ignored
        MINIMAL,  # 5
        MINIMAL,  # 6: duplicate of line 5
        {**MINIMAL, "qid": "q4", "passages": [{"docid": "", "text": "x"}]},  # 7
        {**MINIMAL, "qid": "q5", "gold_answers": []},  # 8: an empty list of gold answers
        [1, 2],  # 9: not an object
    )
    with pytest.raises(AnswersFormatError) as caught:
        parse_answers(bad, "log.jsonl")
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == [
        "line 1",
        "line 2",
        "line 3",
        "line 6",
        "line 7",
        "line 8",
        "line 9",
    ]
    assert "answer" in problems[1] and "gold_answer" in problems[2]
    assert "already used on line 5" in problems[3]
    assert "passages.0.docid" in problems[4]
    message = str(caught.value)
    assert message.startswith("log.jsonl: 7 problem(s):") and isinstance(caught.value, ValueError)


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(AnswersFormatError, match="empty"):
        load_answers(path)


def test_write_then_load_gives_the_same_records(tmp_path: Path) -> None:
    records = parse_answers(lines(FULL, MINIMAL))
    path = tmp_path / "out" / "answers.jsonl"
    assert write_answers(records, path) == 2
    assert load_answers(path) == records
    assert record_as_json(records[1]) == MINIMAL


def test_load_answers_skips_a_bom_and_names_undecodable_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(MINIMAL).encode() + b"\n")
    assert [r.qid for r in load_answers(path)] == ["q2"]
    path.write_bytes(json.dumps(MINIMAL).encode() + b"\n\xff\n")
    with pytest.raises(InputFileError, match=rf"^{path}:2: not UTF-8 text"):
        load_answers(path)


@pytest.mark.parametrize(
    ("line", "kind"),
    [("[1, 2]", "an array"), ('"x"', "a string"), ("null", "null"), ("42", "a number")],
)
def test_a_line_that_is_not_an_object_is_a_line_problem(line: str, kind: str) -> None:
    with pytest.raises(AnswersFormatError) as caught:
        parse_answers([json.dumps(MINIMAL), line], "log.jsonl")
    assert caught.value.problems == [f"line 2: expected a JSON object, got {kind}"]


def test_deeply_nested_json_is_a_line_problem() -> None:
    with pytest.raises(AnswersFormatError) as caught:
        parse_answers(["[" * 50_000 + "]" * 50_000], "log.jsonl")
    assert caught.value.problems == ["line 1: not valid JSON (JSON nested too deeply)"]


def test_a_file_of_garbage_lists_twenty_problems_and_counts_the_rest() -> None:
    with pytest.raises(AnswersFormatError) as caught:
        parse_answers(["a,b,c"] * 500, "log.csv")
    message = str(caught.value)
    assert len(caught.value.problems) == 500 and message.startswith("log.csv: 500 problem(s):")
    assert message.count("not valid JSON") == 20 and message.endswith("\n  (+480 more)")
