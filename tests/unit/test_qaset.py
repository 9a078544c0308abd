"""QA-set loading: formats, id parsing and all-at-once error reporting."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ragtrail.testset.qaset import QASetError, load_qa_set

ROWS = [
    {
        "qid": "a",
        "question": "How many days?",
        "label": "fact_single",
        "answer": "5",
        "ground_doc_ids": ["x.md"],
    },
    {
        "qid": "b",
        "question": "Which steps?",
        "label": "summary",
        "answer": "1, 2",
        "ground_doc_ids": ["y.md", "z.md"],
    },
    {
        "qid": "c",
        "question": "Is it allowed?",
        "label": "unanswerable",
        "answer": None,
        "ground_doc_ids": ["x.md"],
        "ground_chunk_ids": [],
    },
]


def test_jsonl_csv_parquet_load_the_same_items(tmp_path):
    jsonl = tmp_path / "qa.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    csv_path = tmp_path / "qa.csv"
    pd.DataFrame(
        [
            {**r, "ground_doc_ids": ";".join(r["ground_doc_ids"]), "ground_chunk_ids": ""}
            for r in ROWS
        ]
    ).to_csv(csv_path, index=False)
    parquet = tmp_path / "qa.parquet"
    pd.DataFrame(ROWS).to_parquet(parquet)
    loaded = [load_qa_set(p)[0] for p in (jsonl, csv_path, parquet)]
    assert loaded[0] == loaded[1] == loaded[2]
    assert loaded[0][1].ground_doc_ids == ("y.md", "z.md")
    assert loaded[0][2].answer == ""


def test_version_is_a_content_hash(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n")
    _, v1 = load_qa_set(path)
    path.write_text(json.dumps({**ROWS[0], "question": "How many weeks?"}) + "\n")
    _, v2 = load_qa_set(path)
    assert v1 != v2 and v1.startswith("qa-")


def test_all_problems_are_reported_at_once(tmp_path):
    bad = [
        {"qid": "a", "question": "", "label": "fact_single", "ground_doc_ids": ["x"]},
        {"qid": "b", "question": "q?", "label": "trivia", "ground_doc_ids": ["x"]},
        {"qid": "c", "question": "q?", "label": "summary"},
        {"qid": "c", "question": "q2?", "label": "summary", "ground_doc_ids": ["x"]},
        {"qid": "c", "question": "q3?", "label": "summary", "ground_doc_ids": ["x"]},
    ]
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in bad))
    with pytest.raises(QASetError) as err:
        load_qa_set(path)
    message = str(err.value)
    assert "4 invalid rows" in message
    for fragment in ("empty question", "'trivia'", "no ground_doc_ids", "duplicate qid 'c'"):
        assert fragment in message


def test_invalid_json_line_names_the_line(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    with pytest.raises(QASetError, match=r"qa.jsonl:2: invalid JSON"):
        load_qa_set(path)


def test_missing_and_unsupported_files(tmp_path):
    with pytest.raises(QASetError, match="not found"):
        load_qa_set(tmp_path / "nope.jsonl")
    other = tmp_path / "qa.xlsx"
    other.write_bytes(b"x")
    with pytest.raises(QASetError, match="unsupported"):
        load_qa_set(other)
