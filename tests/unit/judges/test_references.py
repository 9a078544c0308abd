"""Entailment references: the JSONL format (round trip, every bad line reported) and HAGRID."""

from __future__ import annotations

import ast
import csv
import json
import sys
from pathlib import Path

import pytest

from ragtrail.input_files import InputFileError
from ragtrail.judges.contract import NOT_SUPPORTED, SUPPORTED
from ragtrail.judges.references import (
    EntailmentExample,
    ReferenceFormatError,
    cited_quotes,
    hagrid_attribution_pairs,
    load_entailment_reference,
    read_hagrid_attribution,
    strip_citations,
    write_entailment_reference,
)

HAGRID = ("reference", "hagrid-attributed-ir", "llama13_RTG_vanilla.csv")


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_labels_and_default_ids(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "ref.jsonl",
        [
            json.dumps({"premise": "P1", "hypothesis": "H1", "label": 1}),
            "",
            json.dumps({"premise": "P2", "hypothesis": "H2", "label": False, "source_id": "x"}),
            json.dumps({"premise": "P3", "hypothesis": "H3", "label": " Not_Supported "}),
            json.dumps({"premise": "P4", "hypothesis": "H4", "label": "supported"}),
            json.dumps({"premise": "P5", "hypothesis": "H5", "label": True}),
        ],
    )
    examples = load_entailment_reference(path)
    assert [e.label for e in examples] == [
        SUPPORTED,
        NOT_SUPPORTED,
        NOT_SUPPORTED,
        SUPPORTED,
        SUPPORTED,
    ]
    assert [e.source_id for e in examples] == [
        "ref.jsonl:1",
        "x",
        "ref.jsonl:4",
        "ref.jsonl:5",
        "ref.jsonl:6",
    ]
    assert examples[0] == EntailmentExample("P1", "H1", SUPPORTED, "ref.jsonl:1")


def test_every_bad_line_is_reported(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "bad.jsonl",
        [
            json.dumps({"premise": "P", "hypothesis": "H", "label": 1, "source_id": "a"}),
            "{not json",
            json.dumps({"premise": "", "hypothesis": "H", "label": 2}),
            json.dumps(["a list"]),
            json.dumps({"premise": "P", "hypothesis": "H"}),
            json.dumps({"premise": "P", "hypothesis": "H", "label": "maybe"}),
            json.dumps({"premise": "P", "hypothesis": "H", "label": 0, "source_id": "a"}),
            json.dumps({"premise": "P", "hypothesis": "H", "label": 0}),
        ],
    )
    with pytest.raises(ReferenceFormatError) as info:
        load_entailment_reference(path)
    problems = info.value.problems
    assert [p.split(":")[0] for p in problems] == [f"line {n}" for n in (2, 3, 4, 5, 6, 7)]
    assert "not valid JSON" in problems[0]
    assert "premise must be a non-empty string" in problems[1] and "label 2" in problems[1]
    assert "expected a JSON object" in problems[2]
    assert "label is missing" in problems[3]
    assert "'maybe'" in problems[4]
    assert "already used on line 1" in problems[5]
    assert "6 problem(s)" in str(info.value)


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ReferenceFormatError, match="no examples"):
        load_entailment_reference(_write_lines(tmp_path / "e.jsonl", [""]))


def test_write_then_load_round_trips(tmp_path: Path) -> None:
    examples = [
        EntailmentExample("Prämisse «x».", "H1", SUPPORTED, "q1:a0:s0"),
        EntailmentExample("P2\n\nsecond quote", "H2", NOT_SUPPORTED, "q1:a0:s1"),
    ]
    path = tmp_path / "out" / "pairs.jsonl"
    assert write_entailment_reference(examples, path) == 2
    assert load_entailment_reference(path) == examples
    assert json.loads(path.read_text(encoding="utf-8").splitlines()[1])["label"] == "not_supported"
    assert [p.name for p in path.parent.iterdir()] == ["pairs.jsonl"]  # no temp file left
    with pytest.raises(ValueError, match="label must be"):
        EntailmentExample("P", "H", "yes", "id")


def test_citation_markers() -> None:
    assert cited_quotes("A [2]. B [1, 2]. C [1-3] and [2 and 4] [1, 3, and 4].") == [2, 1, 3, 4]
    assert cited_quotes("[Online]. [Accessed: 14- May- 2021]. [1-100] [Context 1]") == []
    assert strip_citations("Paris is big [1]. It is old [1, 2] .") == "Paris is big. It is old."
    assert strip_citations("Kept [Online] [1-100] text [3-5].") == "Kept [Online] [1-100] text."


def _hagrid_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["query", "gold_quotes", "answers", "query_id"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_hagrid_rules_on_a_small_file(tmp_path: Path) -> None:
    quotes = [{"idx": 1, "text": "Q one."}, {"idx": 2, "text": "Q two."}]
    sentences = [
        {"text": "Both [1, 2].", "index": 0, "attributable": 1},
        {"text": "Second [2].", "index": 1, "attributable": 0},
        {"text": "No citation.", "index": 2, "attributable": 1},
        {"text": "No flag [1].", "index": 3, "attributable": None},
        {"text": "Unknown [3].", "index": 4, "attributable": 1},
    ]
    row = {
        "query": "q",
        "gold_quotes": repr(quotes),
        "answers": repr([{"answer": "...", "sentences": sentences}]),
        "query_id": "77",
    }
    pairs = read_hagrid_attribution(_hagrid_csv(tmp_path / "h.csv", [row]))
    assert pairs.sentences == 5
    assert pairs.skipped == {"no_citation": 1, "no_attributable_flag": 1, "unknown_quote": 1}
    assert pairs.examples == [
        EntailmentExample("Q one.\n\nQ two.", "Both.", SUPPORTED, "77:a0:s0"),
        EntailmentExample("Q two.", "Second.", NOT_SUPPORTED, "77:a0:s1"),
    ]


def test_hagrid_bad_rows_are_listed(tmp_path: Path) -> None:
    good = {"query": "q", "gold_quotes": "[]", "answers": "[]", "query_id": "1"}
    bad_literal = {**good, "gold_quotes": "[{'idx': 1, 'text': 'x'"}
    bad_shape = {**good, "answers": "{'a': 1}"}
    with pytest.raises(ReferenceFormatError) as info:
        read_hagrid_attribution(_hagrid_csv(tmp_path / "h.csv", [good, bad_literal, bad_shape]))
    assert [p.split(":")[0] for p in info.value.problems] == ["row 3", "row 4"]
    assert "'gold_quotes' is not a Python literal" in info.value.problems[0]
    assert "'answers' is not a list of dicts" in info.value.problems[1]


def test_real_hagrid_file(shared_dir: Path) -> None:
    path = shared_dir.joinpath(*HAGRID)
    if not path.is_file():
        pytest.skip(f"HAGRID reference not present: {path}")
    pairs = read_hagrid_attribution(path)
    assert pairs.sentences == 2388
    assert pairs.skipped == {"no_citation": 100, "no_attributable_flag": 203, "unknown_quote": 1}
    examples = pairs.examples
    assert len(examples) == 2084 == pairs.sentences - sum(pairs.skipped.values())
    assert sum(e.supported for e in examples) == 1595  # 76.5% attributable
    assert len({e.source_id for e in examples}) == len(examples)
    assert hagrid_attribution_pairs(path) == examples
    # spot check: query 3120, answer 0, sentence 0 cites gold quote idx 2
    first = examples[0]
    assert first.source_id == "3120:a0:s0" and first.label == SUPPORTED
    assert first.hypothesis.endswith("Christian Restorationist minister Charles Taze Russell.")
    csv.field_size_limit(sys.maxsize)
    with path.open(encoding="utf-8", newline="") as fh:
        row = next(csv.DictReader(fh))
    quote_2 = next(q for q in ast.literal_eval(row["gold_quotes"]) if q["idx"] == 2)
    assert first.premise == quote_2["text"]
    second = examples[1]  # cites [1, 2]: both quotes, in citation order
    assert second.premise.count("\n\n") == 1 and second.premise.endswith(quote_2["text"])


def test_a_reference_jsonl_with_a_bom_deep_nesting_or_latin1(tmp_path: Path) -> None:
    row = {"premise": "P.", "hypothesis": "H.", "label": 1, "source_id": "s1"}
    path = tmp_path / "ref.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row).encode() + b"\n")
    assert [e.source_id for e in load_entailment_reference(path)] == ["s1"]
    path.write_text(json.dumps(row) + "\n" + "[" * 50_000 + "\n")
    with pytest.raises(ReferenceFormatError) as info:
        load_entailment_reference(path)
    assert info.value.problems == ["line 2: not valid JSON (JSON nested too deeply)"]
    path.write_bytes(json.dumps(row).encode() + b"\n" + '{"premise": "é"}'.encode("latin-1"))
    with pytest.raises(InputFileError, match=rf"^{path}:2: not UTF-8 text \(byte 0xe9"):
        load_entailment_reference(path)


def test_a_hagrid_csv_with_a_bom_latin1_or_deep_literals(tmp_path: Path) -> None:
    good = {"query": "q", "gold_quotes": "[]", "answers": "[]", "query_id": "1"}
    path = _hagrid_csv(tmp_path / "h.csv", [good])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert read_hagrid_attribution(path).sentences == 0  # the BOM is not part of "query"
    deep = {**good, "answers": "[" * 100_000}
    with pytest.raises(ReferenceFormatError) as info:
        read_hagrid_attribution(_hagrid_csv(tmp_path / "deep.csv", [deep]))
    assert info.value.problems[0].startswith("row 2: ValueError: column 'answers'")
    latin = tmp_path / "latin.csv"
    latin.write_bytes("query,gold_quotes,answers,query_id\ncafé,[],[],1\n".encode("latin-1"))
    with pytest.raises(InputFileError, match=rf"^{latin}: not UTF-8 text"):
        read_hagrid_attribution(latin)
