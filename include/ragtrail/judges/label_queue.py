"""The label queue: a CSV of items for a person to label, read back as a reference.

``ragtrail judge label-queue KIND`` writes one row per item: ``item_id``, ``query_id`` (what a
split by query keeps together), the kind's two texts (``premise``/``hypothesis`` or
``question``/``context``), an empty ``label`` column, then why the item was chosen and what each
judge said. A person fills ``label`` (the accepted forms are in :func:`parse_kind_label`); rows
left blank are skipped and counted when the file is read back, any other problem names its row.
The file is UTF-8 with a header, so a spreadsheet opens and saves it as it is.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ragtrail.input_files import check_text_file
from ragtrail.judges.references import ReferenceFormatError, parse_label
from ragtrail.judges.sufficiency_references import parse_sufficiency_label
from ragtrail.judges.trained import LabelledPair, TrainedKind

LABEL = "label"
ID_COLUMNS = ("item_id", "query_id")


def parse_kind_label(kind: TrainedKind, value: str) -> str:
    """A filled ``label`` cell as a category of ``kind``: ``1``/``0``, ``true``/``false`` or the
    category names for the two-category kinds; a label name for the labeller."""
    text = value.strip()
    if kind.kind == "entailment":
        return parse_label(int(text) if text in ("0", "1") else _boolean(text))
    if kind.kind == "sufficiency":
        return parse_sufficiency_label(int(text) if text in ("0", "1") else _boolean(text))
    if text.lower() in kind.categories:
        return text.lower()
    raise ValueError(f"label {text!r} is not one of {', '.join(kind.categories)}")


def _boolean(text: str) -> str | bool:
    lowered = text.lower()
    return {"true": True, "false": False}.get(lowered, lowered)


@dataclass(frozen=True)
class QueueRow:
    """One item to label, why it was chosen, and each judge's verdict on it."""

    item_id: str
    query_id: str
    first: str
    second: str
    why: str
    uncertainty: float
    verdicts: Mapping[str, str] = field(default_factory=dict)


def write_label_queue(path: Path | str, kind: TrainedKind, rows: Sequence[QueueRow]) -> int:
    """Write ``rows`` as a label-queue CSV for ``kind``; returns the number of rows."""
    judges = sorted({name for row in rows for name in row.verdicts})
    header = [*ID_COLUMNS, *kind.fields, LABEL, "why", "uncertainty", *judges]
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for row in rows:
            writer.writerow(
                [
                    row.item_id,
                    row.query_id,
                    row.first,
                    row.second,
                    "",
                    row.why,
                    f"{row.uncertainty:.3f}",
                    *(row.verdicts.get(name, "") for name in judges),
                ]
            )
    tmp.replace(target)
    return len(rows)


def is_label_queue(path: Path | str, kind: TrainedKind) -> bool:
    """Whether ``path`` is a CSV whose header has the queue's columns for ``kind``."""
    target = Path(path)
    if target.suffix.lower() != ".csv" or not target.is_file():
        return False
    with target.open(encoding="utf-8-sig", newline="") as fh:
        header = next(csv.reader(fh), [])
    return {"item_id", *kind.fields, LABEL} <= set(header)


@dataclass(frozen=True)
class FilledQueue:
    """The labelled rows of a queue file and how many were left blank."""

    pairs: list[LabelledPair]
    unlabelled: int


def read_label_queue(path: Path | str, kind: TrainedKind) -> FilledQueue:
    """The labelled rows of a filled queue; every bad row is listed at once
    (:class:`~ragtrail.judges.references.ReferenceFormatError`, row numbers counting the header
    as 1)."""
    target = Path(path)
    csv.field_size_limit(sys.maxsize)
    check_text_file(target, "label queue")
    pairs: list[LabelledPair] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    unlabelled = 0
    with target.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"item_id", *kind.fields, LABEL} - set(reader.fieldnames or ())
        if missing:
            raise ReferenceFormatError(target, [f"missing columns {sorted(missing)}"])
        for number, row in enumerate(reader, start=2):
            label_cell = (row.get(LABEL) or "").strip()
            if not label_cell:
                unlabelled += 1
                continue
            item_id = (row.get("item_id") or "").strip()
            errors = [
                f"{name} is empty" for name in kind.fields if not (row.get(name) or "").strip()
            ]
            if not item_id:
                errors.append("item_id is empty")
            elif item_id in seen:
                errors.append(f"item_id {item_id!r} already used on row {seen[item_id]}")
            try:
                label = parse_kind_label(kind, label_cell)
            except ValueError as exc:
                errors.append(str(exc))
            if errors:
                problems.append(f"row {number}: " + "; ".join(errors))
                continue
            seen[item_id] = number
            first, second = (row[name] for name in kind.fields)
            group = (row.get("query_id") or "").strip() or item_id
            pairs.append(LabelledPair(item_id, group, first, second, label))
    if problems:
        raise ReferenceFormatError(target, problems)
    if not pairs:
        raise ReferenceFormatError(
            target, [f"no labelled rows ({unlabelled} left blank): fill the {LABEL!r} column"]
        )
    return FilledQueue(pairs, unlabelled)


__all__ = [
    "FilledQueue",
    "QueueRow",
    "is_label_queue",
    "parse_kind_label",
    "read_label_queue",
    "write_label_queue",
]
