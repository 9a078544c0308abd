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


# ------------------------------------------------------------------ malformed files, one line each


def _refused(path, pattern: str) -> str:
    """load_qa_set(path) fails with one line matching ``pattern``; the message is returned."""
    with pytest.raises(QASetError, match=pattern) as err:
        load_qa_set(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


@pytest.mark.parametrize(
    ("line", "kind"),
    [("[1, 2]", "an array"), ('"x"', "a string"), ("null", "null"), ("42", "a number"),
     ("true", "a boolean")],
)  # fmt: skip
def test_a_jsonl_line_that_is_not_an_object_names_its_line(tmp_path, line, kind):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + line + "\n")
    _refused(path, rf"qa.jsonl:3: expected a JSON object \(one question per line\), got {kind}$")


def test_deeply_nested_json_is_an_invalid_line(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + "[" * 50_000 + "]" * 50_000 + "\n")
    _refused(path, r"qa.jsonl:2: invalid JSON \(JSON nested too deeply\)")


def test_a_bom_is_skipped_in_jsonl_as_in_csv(tmp_path):
    jsonl = tmp_path / "qa.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + "\n".join(json.dumps(r) for r in ROWS).encode())
    csv_path = tmp_path / "qa.csv"
    frame = pd.DataFrame([{**r, "ground_doc_ids": ";".join(r["ground_doc_ids"])} for r in ROWS])
    csv_path.write_bytes(b"\xef\xbb\xbf" + frame.to_csv(index=False).encode())
    assert load_qa_set(jsonl)[0] == load_qa_set(csv_path)[0]
    assert load_qa_set(jsonl)[0][0].qid == "a"


@pytest.mark.parametrize(
    ("name", "data", "pattern"),
    [
        ("qa.csv", b"", r"qa.csv: empty file, no header row"),
        ("qa.csv", b"qid,question,label,ground_doc_ids\n", r"qa.csv: no questions"),
        ("qa.csv", b"qid,question\n1,Q?\n",
         r"qa.csv: missing column\(s\) label, ground_doc_ids \(the file has: qid, question\)"),
        ("qa.csv", b'question,label,ground_doc_ids\n"Q?,summary\n', r"qa.csv: not a valid CSV"),
        ("qa.csv", "question,label,ground_doc_ids\ncafé?,summary,x\n".encode("latin-1"),
         r"qa.csv: not UTF-8 text \(byte 0xe9"),
        ("qa.csv", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", r"qa.csv: binary data"),
        ("qa.jsonl", b"", r"qa.jsonl: no questions"),
        ("qa.jsonl", '{"question": "café?"}\n'.encode("latin-1"),
         r"qa.jsonl:1: not UTF-8 text \(byte 0xe9"),
        ("qa.jsonl", b"\x7fELF\x02\x01\x01\x00\x00\x00", r"qa.jsonl: binary data"),
        ("qa.jsonl", "\n".join(json.dumps(r) for r in ROWS).encode("utf-16"),
         r"qa.jsonl: UTF-16 text"),
        ("qa.parquet", b"not parquet at all", r"qa.parquet: not a readable Parquet file"),
        ("qa.parquet", b"", r"qa.parquet: not a readable Parquet file"),
    ],
)  # fmt: skip
def test_unreadable_files_name_the_file(tmp_path, name, data, pattern):
    path = tmp_path / name
    path.write_bytes(data)
    _refused(path, pattern)


def test_a_directory_and_a_missing_file_are_named(tmp_path):
    folder = tmp_path / "qa.jsonl"
    folder.mkdir()
    _refused(folder, r"qa.jsonl: is a directory, not a file")
    _refused(tmp_path / "nope.csv", r"QA set not found: .*nope.csv")


def test_a_parquet_file_without_the_columns_is_named(tmp_path):
    path = tmp_path / "qa.parquet"
    pd.DataFrame({"q": ["x"]}).to_parquet(path)
    _refused(path, r"qa.parquet: missing column\(s\) question, label, ground_doc_ids")


def test_values_of_the_wrong_type_are_row_errors(tmp_path):
    base = {"question": "Q?", "label": "summary", "ground_doc_ids": ["x.md"]}
    rows = [
        {**base, "qid": "a", "ground_doc_ids": 5},  # a number where a list belongs
        {**base, "qid": "b", "question": {"text": "Q?"}},
        {**base, "qid": "c", "ground_doc_ids": {"x.md": 1}},
        {**base, "qid": "d", "ground_doc_ids": [["x.md"]]},
        {**base, "qid": "e", "ground_chunk_ids": True},
        {**base, "qid": "f", "answer": ["27", "days"]},
        {**base, "qid": ["g"]},
        {**base, "qid": "h", "label": None},
        {**base, "qid": "i", "ground_doc_ids": "[not json"},
        {**base, "qid": "j", "ground_doc_ids": [None]},
    ]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    message = _refused(path, r"qa.jsonl: 10 invalid rows: ")
    for fragment in (
        "row 1: ground_doc_ids must be a list of ids, not a number (5)",
        "row 2: question must be text, not an object",
        "row 3: ground_doc_ids must be a list of ids, not an object",
        "row 4: ground_doc_ids must hold ids (text), not an array",
        "row 5: ground_chunk_ids must be a list of ids, not a boolean",
        "row 6: answer must be text, not an array",
        "row 7: qid must be text, not an array",
        "row 8: label '' is not one of",
        "row 9: ground_doc_ids is not a JSON list",
        "row 10: ground_doc_ids must hold ids (text), not null",
    ):
        assert fragment in message


def test_numbers_stay_usable_as_ids_and_text(tmp_path):
    rows = [
        {"qid": 1, "question": "Q?", "label": "summary", "answer": 27, "ground_doc_ids": [12, "b"]},
        {"qid": 2, "question": "R?", "label": "summary", "ground_doc_id": 12},
    ]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, second = load_qa_set(path)[0]
    assert (first.qid, first.answer, first.ground_doc_ids) == ("1", "27", ("12", "b"))
    assert second.ground_doc_ids == ("12",)
    parquet = tmp_path / "qa.parquet"
    pd.DataFrame([{**rows[1], "qid": 3}]).to_parquet(parquet)
    assert load_qa_set(parquet)[0][0].ground_doc_ids == ("12",)


def test_an_overlong_line_is_refused(tmp_path, monkeypatch):
    from ragtrail import input_files

    monkeypatch.setattr(input_files, "MAX_LINE_BYTES", 1024)
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({**ROWS[0], "question": "x" * 5000}) + "\n")
    _refused(path, r"qa.jsonl:1: line longer than .* MiB; the QA set takes one record per line")


def test_half_a_surrogate_pair_names_its_line(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({**ROWS[1], "question": "\ud800?"}))
    _refused(path, r"qa.jsonl:2: invalid JSON \(the escape \\ud800 is half a surrogate pair")


def test_hints_for_an_indented_json_file_and_a_semicolon_csv(tmp_path):
    pretty = tmp_path / "qa.jsonl"
    pretty.write_text(json.dumps(ROWS, indent=2))
    _refused(
        pretty, r"qa.jsonl:1: invalid JSON \(.*\); a JSONL file holds one JSON object per line"
    )
    semicolons = tmp_path / "qa.csv"
    semicolons.write_text("qid;question;label;ground_doc_ids\na;Q?;summary;x.md\n")
    _refused(semicolons, r"is it separated by ';' instead of ','\?$")


def test_questions_in_any_script_load_the_same_from_csv_and_jsonl(tmp_path):
    rows = [
        {
            "qid": "fr-1",
            "question": "Quel fichier contient le message de bienvenue affiché au démarrage ?",
            "label": "fact_single",
            "answer": "/etc/motd",
            "ground_doc_ids": "pages/ch01.fr.html",
        },
        {
            "qid": "ja-1",
            "question": "日本の首都はどこですか？",
            "label": "fact_single",
            "answer": "東京",
            "ground_doc_ids": "ja/地理.md",
        },
        {
            "qid": "ru-1",
            "question": "Какой пакет устанавливает apt?",
            "label": "unanswerable",
            "answer": "",
            "ground_doc_ids": "ru/apt.md",
        },
    ]
    csv_path = tmp_path / "qa.csv"
    pd.DataFrame(rows).to_csv(csv_path, index=False, encoding="utf-8")
    jsonl = tmp_path / "qa.jsonl"
    jsonl.write_text(
        "\n".join(json.dumps({**r, "ground_doc_ids": [r["ground_doc_ids"]]}) for r in rows),
        encoding="utf-8",
    )
    from_csv, from_jsonl = load_qa_set(csv_path)[0], load_qa_set(jsonl)[0]
    assert from_csv == from_jsonl
    assert [i.question for i in from_csv] == [r["question"] for r in rows]
    assert from_csv[1].ground_doc_ids == ("ja/地理.md",)
