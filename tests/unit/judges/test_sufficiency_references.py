"""Sufficiency references: the labelled JSONL reader and the golden-item builder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragtrail.judges.references import ReferenceFormatError
from ragtrail.judges.sufficiency_raters import INSUFFICIENT, SUFFICIENT
from ragtrail.judges.sufficiency_references import (
    SufficiencyExample,
    golden_sufficiency_examples,
    load_sufficiency_reference,
)
from ragtrail.records import QAItem


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    )
    return path


def test_reference_file_reads_every_label_form(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "ref.jsonl",
        [
            {"question": "q1", "context": "c1", "label": "Sufficient", "answer": "a1", "id": "x"},
            {"question": "q2", "context": "c2", "label": 0},
            "",
            {"question": "q3", "context": "c3", "label": True},
            {"question": "q4", "context": "c4", "label": "insufficient"},
        ],
    )
    examples = load_sufficiency_reference(path)
    assert examples[0] == SufficiencyExample("x", "q1", "c1", "a1", SUFFICIENT, "file")
    assert [e.label for e in examples] == [SUFFICIENT, INSUFFICIENT, SUFFICIENT, INSUFFICIENT]
    assert [e.example_id for e in examples[1:]] == ["ref.jsonl:2", "ref.jsonl:4", "ref.jsonl:5"]
    assert examples[1].answer == ""


def test_reference_file_lists_every_bad_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "bad.jsonl",
        [
            {"question": "q1", "context": "c1", "label": 1, "id": "a"},
            "{not json",
            {"question": "", "context": "c", "label": "maybe"},
            ["a", "list"],
            {"question": "q", "context": "c", "label": 1, "id": "a"},
            {"question": "q", "context": "c", "answer": 3},
        ],
    )
    with pytest.raises(ReferenceFormatError) as caught:
        load_sufficiency_reference(path)
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == ["line 2", "line 3", "line 4", "line 5", "line 6"]
    assert "not valid JSON" in problems[0]
    assert "question must be a non-empty string" in problems[1] and "'maybe'" in problems[1]
    assert "expected a JSON object" in problems[2]
    assert "already used on line 1" in problems[3]
    assert "answer must be a string" in problems[4] and "label is missing" in problems[4]
    empty = _write(tmp_path / "empty.jsonl", [""])
    with pytest.raises(ReferenceFormatError, match="the file is empty"):
        load_sufficiency_reference(empty)


ITEMS = [
    QAItem("a1", "How many leave days?", "fact_single", "27 days", ("leave.md",)),
    QAItem("a2", "Who approves?", "fact_single", "the manager", ("leave.md",)),
    QAItem("a3", "Why automate?", "reasoning", "to delete on time", ("retention.md",)),
    QAItem("a4", "What is merged?", "summary", "requests", ("review.md",)),
    QAItem("u1", "Who is the CEO?", "unanswerable", "", ("leave.md",)),
    QAItem("u2", "What is the budget?", "unanswerable", "", ("review.md",)),
    QAItem("u3", "Where is HQ?", "unanswerable", "", ("retention.md",)),
]
GROUND = {i.qid: f"ground of {i.qid}" for i in ITEMS if i.qid != "a3"}  # a3: not in the corpus
IRRELEVANT = {i.qid: f"other passages for {i.qid}" for i in ITEMS if i.qid.startswith("a")}


def test_golden_examples_have_the_kind_counts_and_labels() -> None:
    examples = golden_sufficiency_examples(ITEMS, GROUND, IRRELEVANT, per_kind=2, seed=7)
    assert [e.kind for e in examples] == ["ground"] * 2 + ["unanswerable"] * 2 + ["irrelevant"] * 2
    by_kind = {e.kind: e for e in examples}
    assert by_kind["ground"].label == SUFFICIENT
    assert by_kind["unanswerable"].label == INSUFFICIENT
    assert by_kind["irrelevant"].label == INSUFFICIENT
    for e in examples:
        qid = e.example_id.split(":")[1]
        assert e.example_id == f"{e.kind}:{qid}"
        expected = (IRRELEVANT if e.kind == "irrelevant" else GROUND)[qid]
        assert e.context == expected
        item = next(i for i in ITEMS if i.qid == qid)
        assert e.answer == (item.answer if e.kind != "unanswerable" else "")
        assert e.question == item.question
    assert all(e.example_id != "ground:a3" for e in examples)  # no ground context: skipped


def test_golden_examples_take_what_exists_and_are_seed_stable() -> None:
    everything = golden_sufficiency_examples(ITEMS, GROUND, IRRELEVANT, per_kind=10, seed=1)
    counts = {
        k: sum(e.kind == k for e in everything) for k in ("ground", "unanswerable", "irrelevant")
    }
    assert counts == {"ground": 3, "unanswerable": 3, "irrelevant": 4}
    first = golden_sufficiency_examples(ITEMS, GROUND, IRRELEVANT, per_kind=2, seed=3)
    again = golden_sufficiency_examples(ITEMS, GROUND, IRRELEVANT, per_kind=2, seed=3)
    assert first == again
    draws = {
        tuple(
            e.example_id
            for e in golden_sufficiency_examples(ITEMS, GROUND, IRRELEVANT, per_kind=2, seed=s)
        )
        for s in range(10)
    }
    assert len(draws) > 1  # the seed matters
    assert golden_sufficiency_examples(ITEMS, GROUND, IRRELEVANT, per_kind=0, seed=3) == []
    with pytest.raises(ValueError, match="per_kind"):
        golden_sufficiency_examples(ITEMS, GROUND, IRRELEVANT, per_kind=-1, seed=3)
