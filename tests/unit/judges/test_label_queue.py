"""The label-queue CSV: written for a person, read back as a reference."""

from __future__ import annotations

import csv

import pytest

from ragtrail.judges.label_queue import (
    QueueRow,
    is_label_queue,
    parse_kind_label,
    read_label_queue,
    write_label_queue,
)
from ragtrail.judges.reference_files import entailment_examples, entailment_pairs
from ragtrail.judges.references import ReferenceFormatError
from ragtrail.judges.trained import TRAINED_KINDS

ENTAILMENT = TRAINED_KINDS["entailment"]


def _queue(tmp_path, rows=None):
    rows = rows or [
        QueueRow("a", "q1", "Leave is 27 days, café included.", "Leave is 27 days.", "judges disagree", 0.9, {"x": "supported"}),
        QueueRow("b", "q1", "Leave is 27 days.", "The office shuts at noon.", "uncertain", 0.4, {"x": "not_supported"}),
        QueueRow("c", "q2", "Passwords: 20 characters.", "Passwords need 20.", "uncertain", 0.2, {}),
    ]  # fmt: skip
    path = tmp_path / "queue.csv"
    write_label_queue(path, ENTAILMENT, rows)
    return path


def fill_labels(path, labels):
    """Fill the queue's label column as a person would, row by row."""
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row, label in zip(rows, labels, strict=True):
        row["label"] = label
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_a_filled_queue_reads_back_with_blank_rows_skipped_and_counted(tmp_path):
    path = _queue(tmp_path)
    assert is_label_queue(path, ENTAILMENT) and not is_label_queue(path, TRAINED_KINDS["labeller"])
    fill_labels(path, ["1", "not_supported", ""])
    filled = read_label_queue(path, ENTAILMENT)
    assert filled.unlabelled == 1
    assert [(p.item_id, p.group, p.label) for p in filled.pairs] == [
        ("a", "q1", "supported"),
        ("b", "q1", "not_supported"),
    ]
    assert filled.pairs[0].first == "Leave is 27 days, café included."  # UTF-8 kept
    # the same file is an entailment reference for calibration and training
    assert [e.source_id for e in entailment_examples(path)] == ["a", "b"]
    assert [p.group for p in entailment_pairs(path)] == ["q1", "q1"]


def test_bad_rows_are_listed_by_row_number(tmp_path):
    path = _queue(tmp_path)
    fill_labels(path, ["maybe", "", "TRUE"])
    with pytest.raises(ReferenceFormatError) as err:
        read_label_queue(path, ENTAILMENT)
    assert err.value.problems == [
        "row 2: label 'maybe' is not one of 1/0, true/false, 'supported'/'not_supported'"
    ]


def test_an_unfilled_queue_is_not_a_reference(tmp_path):
    path = _queue(tmp_path)
    with pytest.raises(ReferenceFormatError, match="no labelled rows"):
        read_label_queue(path, ENTAILMENT)


@pytest.mark.parametrize(
    ("kind", "cell", "label"),
    [
        ("entailment", "true", "supported"),
        ("entailment", "0", "not_supported"),
        ("sufficiency", "1", "sufficient"),
        ("sufficiency", "Insufficient", "insufficient"),
        ("labeller", "Summary", "summary"),
    ],
)
def test_label_forms(kind, cell, label):
    assert parse_kind_label(TRAINED_KINDS[kind], cell) == label


def test_a_labeller_label_outside_the_taxonomy_is_refused():
    with pytest.raises(ValueError, match="fact_single, summary, reasoning, unanswerable"):
        parse_kind_label(TRAINED_KINDS["labeller"], "trivia")
