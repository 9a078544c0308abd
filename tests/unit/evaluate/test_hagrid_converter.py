"""The HAGRID CSV -> AnswerRecord converter on small hand-written CSVs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ragtrail.evaluate.attribution.cited_answers import GoldAnswer, SourcePassage
from ragtrail.evaluate.attribution.hagrid import hagrid_to_jsonl, read_hagrid
from ragtrail.evaluate.attribution.scoring import AnswersFormatError, load_answers

ROW = {
    "query": "When did ITV start?",
    "query_id": "17",
    "quotes": repr(
        [
            {"docid": "a#1", "text": "ITV began in 1955.", "title": "ITV"},
            {"docid": "b#0", "text": "BBC began in 1922.", "title": "BBC"},
        ]
    ),
    "output": "ITV began in 1955 [1].",
    "answers": repr(
        [
            {"answer": "ITV began in 1955 [1].", "attributable": None, "informative": 1},
            {"answer": "In 1955 [2].", "attributable": 1, "informative": 0},
        ]
    ),
    "gold_quotes": repr(
        [
            {"idx": 0, "docid": "a#1", "text": "ITV began in 1955."},
            {"idx": 1, "docid": "c#2", "text": "It launched in September 1955."},
        ]
    ),
    "scores": "[0.1, 0.2]",
}


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(ROW))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_row_becomes_a_record_with_positional_gold_quotes(tmp_path: Path) -> None:
    (record,) = read_hagrid(write_csv(tmp_path / "h.csv", [ROW]))
    assert record.qid == "17" and record.question == "When did ITV start?"
    assert record.answer == "ITV began in 1955 [1]."
    assert record.passages == (
        SourcePassage("a#1", "ITV began in 1955."),
        SourcePassage("b#0", "BBC began in 1922."),
    )
    # idx counts from 0 here, yet [2] in a gold answer is the second gold quote
    assert [p.docid for p in record.gold_passages or ()] == ["a#1", "c#2"]
    assert record.gold_answers == (
        GoldAnswer("ITV began in 1955 [1].", None, True),
        GoldAnswer("In 1955 [2].", True, False),
    )
    assert record.relevant_docids == ("a#1", "c#2")


def test_bad_rows_are_all_reported_with_row_numbers(tmp_path: Path) -> None:
    rows = [
        ROW,
        {**ROW, "query_id": "18", "quotes": "[{'docid': 'x'"},
        {**ROW, "query_id": "19", "gold_quotes": repr([{"idx": 3, "docid": "d", "text": "t"}])},
        {**ROW, "query_id": "20", "answers": repr([{"answer": "a", "attributable": 2}])},
        ROW,
    ]
    with pytest.raises(AnswersFormatError) as caught:
        read_hagrid(write_csv(tmp_path / "h.csv", rows))
    assert [p.split(":")[0] for p in caught.value.problems] == [f"row {n}" for n in (3, 4, 5, 6)]
    assert "already on row 2" in caught.value.problems[-1]


def test_missing_columns_are_named(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("query,query_id\nq,1\n")
    with pytest.raises(AnswersFormatError, match="missing columns"):
        read_hagrid(path)


def test_the_jsonl_conversion_loads_back_unchanged(tmp_path: Path) -> None:
    source = write_csv(tmp_path / "h.csv", [ROW, {**ROW, "query_id": "18"}])
    out = tmp_path / "answers.jsonl"
    assert hagrid_to_jsonl(source, out) == 2
    assert load_answers(out) == read_hagrid(source)
