"""Human entailment references: a JSONL format, its reader and writer, and the HAGRID pairs.

The reference format is one JSON object per line: ``premise`` and ``hypothesis`` (non-empty
strings), ``label`` (``1``/``0``, ``true``/``false`` or ``"supported"``/``"not_supported"``) and an
optional ``source_id``. Labels are read into the entailment categories of the judge contract, so a
reference compares directly with verdict values.

HAGRID (``reference/hagrid-attributed-ir/llama13_RTG_vanilla.csv``) gives attributable-or-not
judgements of human-annotated answer sentences that cite gold quotes. What the file holds
(checked on all 716 queries): 625 queries number their ``gold_quotes`` 1..n and their answer
sentences cite them as ``[1]``, ``[1, 2]``, ``[1-3]`` or ``[1 and 3]`` by that ``idx``; 91 queries
number them 0..n-1, and none of their 194 citing sentences carries an ``attributable`` flag, so
they contribute nothing. :func:`read_hagrid_attribution` turns each flagged sentence citing only
known quotes into one example and counts every sentence it skips, by reason.
"""

from __future__ import annotations

import ast
import csv
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ragtrail.input_files import (
    InputFileError,
    check_text_file,
    json_type,
    jsonl_hint,
    parse_json,
    read_lines,
)
from ragtrail.jsonsafe import JsonObject, write_jsonl
from ragtrail.judges.contract import NOT_SUPPORTED, SUPPORTED

T = TypeVar("T")


MAX_LISTED = 20
"""Problems shown in the message (all are in ``problems``): a file of garbage stays readable."""


class ReferenceFormatError(ValueError):
    """A reference file has bad rows; the message lists every one (line or row numbers)."""

    def __init__(self, path: Path | str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listing = "\n".join(f"  {p}" for p in self.problems[:MAX_LISTED])
        if len(self.problems) > MAX_LISTED:
            listing += f"\n  (+{len(self.problems) - MAX_LISTED} more)"
        super().__init__(f"{path}: {len(self.problems)} problem(s):\n{listing}")


@dataclass(frozen=True)
class EntailmentExample:
    """One human judgement: does ``premise`` support ``hypothesis`` (``label``, a category)."""

    premise: str
    hypothesis: str
    label: str  # SUPPORTED or NOT_SUPPORTED
    source_id: str

    def __post_init__(self) -> None:
        if self.label not in (SUPPORTED, NOT_SUPPORTED):
            raise ValueError(
                f"label must be {SUPPORTED!r} or {NOT_SUPPORTED!r}, got {self.label!r}"
            )

    @property
    def supported(self) -> bool:
        return self.label == SUPPORTED

    def as_dict(self) -> dict[str, str]:
        return {
            "premise": self.premise,
            "hypothesis": self.hypothesis,
            "label": self.label,
            "source_id": self.source_id,
        }


# --------------------------------------------------------------------------- JSONL format


def parse_label(value: Any) -> str:
    """A reference label as a category; ValueError naming the accepted forms otherwise."""
    if isinstance(value, bool):
        return SUPPORTED if value else NOT_SUPPORTED
    if isinstance(value, int) and value in (0, 1):
        return SUPPORTED if value == 1 else NOT_SUPPORTED
    if isinstance(value, str) and value.strip().lower() in (SUPPORTED, NOT_SUPPORTED):
        return value.strip().lower()
    raise ValueError(
        f"label {value!r} is not one of 1/0, true/false, {SUPPORTED!r}/{NOT_SUPPORTED!r}"
    )


def read_reference_jsonl(
    path: Path | str,
    parse: Callable[[JsonObject, str], T],
    id_of: Callable[[T], str],
    id_name: str,
) -> list[T]:
    """Read a JSONL reference with ``parse(row, default_id)`` per line; every bad line is
    reported at once (:class:`ReferenceFormatError`).

    Blank lines are ignored; a file that is not UTF-8 text is an
    :class:`~ragtrail.input_files.InputFileError` naming the line. ``default_id`` is ``"<file name>:<line>"`` for a line without an
    id; an id (``id_of``, named ``id_name`` in messages) used twice is an error (calibration
    results are keyed by it).
    """
    path = Path(path)
    examples: list[T] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(read_lines(path, "reference file"), start=1):
        if not line.strip():
            continue
        try:
            example = parse(_json_object(line), f"{path.name}:{number}")
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
            continue
        key = id_of(example)
        if key in first_line:
            problems.append(
                f"line {number}: {id_name} {key!r} already used on line {first_line[key]}"
            )
            continue
        first_line[key] = number
        examples.append(example)
    if not examples and not problems:
        problems.append("no examples (the file is empty)")
    if problems:
        raise ReferenceFormatError(path, problems)
    return examples


def _json_object(line: str) -> JsonObject:
    try:
        row = parse_json(line)
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc}){jsonl_hint(line)}") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {json_type(row)}")
    return row


def load_entailment_reference(path: Path | str) -> list[EntailmentExample]:
    """Read a JSONL of premise/hypothesis/label rows (optional ``source_id``), see
    :func:`read_reference_jsonl`."""
    return read_reference_jsonl(path, _example_from_row, lambda e: e.source_id, "source_id")


def check_reference_row(
    row: Mapping[str, Any],
    *,
    texts: Sequence[str],
    parse: Callable[[Any], str],
    id_key: str,
    default_id: str,
) -> tuple[list[str], str | None, Any]:
    """The problems of one labelled JSONL object (each of ``texts`` a non-empty string, a
    ``label`` that ``parse`` accepts, a non-empty ``id_key``) with the parsed label and the id."""
    errors: list[str] = []
    for key in texts:
        value = row.get(key)
        if not isinstance(value, str) or not value.strip():
            errors.append(f"{key} must be a non-empty string (got {value!r:.40})")
    label = None
    if "label" not in row:
        errors.append("label is missing")
    else:
        try:
            label = parse(row["label"])
        except ValueError as exc:
            errors.append(str(exc))
    row_id = row.get(id_key, default_id)
    if not isinstance(row_id, str) or not row_id.strip():
        errors.append(f"{id_key} must be a non-empty string (got {row_id!r})")
    return errors, label, row_id


def _example_from_row(row: JsonObject, default_id: str) -> EntailmentExample:
    """One example from one JSONL object; a ValueError lists everything wrong with it."""
    errors, label, source_id = check_reference_row(
        row, texts=("premise", "hypothesis"), parse=parse_label, id_key="source_id",
        default_id=default_id,
    )  # fmt: skip
    if errors:
        raise ValueError("; ".join(errors))
    assert label is not None
    return EntailmentExample(row["premise"], row["hypothesis"], label, source_id)


def write_entailment_reference(examples: Iterable[EntailmentExample], path: Path | str) -> int:
    """Write ``examples`` as JSONL (atomically: a temp file renamed into place); returns the count."""
    return write_jsonl((e.as_dict() for e in examples), path, "example")


# --------------------------------------------------------------------------- HAGRID

_CITATION = re.compile(r"\s*\[\s*(\d+(?:\s*(?:,\s*and|,|and|-|–)\s*\d+)*)\s*\]")
"""A citation marker and the space before it: ``[2]``, ``[1, 2]``, ``[1-3]``, ``[1, 3, and 4]``."""
_MAX_RANGE = 20
"""A range marker wider than this (``[1-100]``) is taken as text, not a citation."""
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,;:!?])")

SKIP_REASONS = ("no_citation", "no_attributable_flag", "unknown_quote")
"""Why a HAGRID answer sentence yields no example (the keys of ``HagridPairs.skipped``)."""


@dataclass(frozen=True)
class HagridPairs:
    """The examples of a HAGRID file, and how many answer sentences were skipped, by reason."""

    examples: list[EntailmentExample]
    sentences: int
    skipped: Mapping[str, int]


def cited_quotes(sentence: str) -> list[int]:
    """The quote numbers a sentence cites, in first-cited order, without repeats."""
    cited: dict[int, None] = {}
    for match in _CITATION.finditer(sentence):
        numbers = _marker_numbers(match.group(1))
        for number in numbers or ():
            cited.setdefault(number, None)
    return list(cited)


def _marker_numbers(body: str) -> list[int] | None:
    """The numbers of one marker body (``"1, 3-4"`` -> [1, 3, 4]); None if it is no citation."""
    numbers: list[int] = []
    for part in re.split(r"\s*(?:,\s*and|,|and)\s*", body):
        bounds = [int(x) for x in re.split(r"\s*[-–]\s*", part)]
        low, high = bounds[0], bounds[-1]
        if len(bounds) > 2 or high < low or high - low >= _MAX_RANGE:
            return None
        numbers.extend(range(low, high + 1))
    return numbers


def strip_citations(sentence: str) -> str:
    """The sentence without citation markers, spacing normalised (``"Paris [1]."`` -> ``"Paris."``)."""
    text = _CITATION.sub(
        lambda m: "" if _marker_numbers(m.group(1)) is not None else m.group(0), sentence
    )
    return _SPACE_BEFORE_PUNCT.sub(r"\1", " ".join(text.split()))


def read_hagrid_attribution(csv_path: Path | str) -> HagridPairs:
    """One example per flagged answer sentence that cites known gold quotes.

    premise = the cited quotes' texts (in citation order, blank line between), hypothesis = the
    sentence without its markers, label = its ``attributable`` flag, source_id =
    ``"<query_id>:a<answer index>:s<sentence index>"``. Rows whose cells cannot be parsed are
    reported together (:class:`ReferenceFormatError`, CSV row numbers counting the header as 1).
    """
    path = Path(csv_path)
    csv.field_size_limit(sys.maxsize)
    check_text_file(path, "HAGRID CSV")
    try:
        return _read_hagrid_rows(path)
    except UnicodeDecodeError as exc:
        raise InputFileError(
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save the file as UTF-8"
        ) from None


def _read_hagrid_rows(path: Path) -> HagridPairs:
    """The body of :func:`read_hagrid_attribution` on a file that looked like UTF-8 text."""
    examples: list[EntailmentExample] = []
    skipped: Counter[str] = Counter({reason: 0 for reason in SKIP_REASONS})
    problems: list[str] = []
    sentences = 0
    with path.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"query_id", "gold_quotes", "answers"} - set(reader.fieldnames or ())
        if missing:
            raise ReferenceFormatError(path, [f"missing columns {sorted(missing)}"])
        for row_number, row in enumerate(reader, start=2):
            try:
                quotes = {int(q["idx"]): str(q["text"]) for q in literal_list(row, "gold_quotes")}
                answers = literal_list(row, "answers")
            except (ValueError, KeyError, TypeError) as exc:
                problems.append(f"row {row_number}: {type(exc).__name__}: {exc}")
                continue
            for answer_index, answer in enumerate(answers):
                for position, sentence in enumerate(answer.get("sentences", [])):
                    sentences += 1
                    text = str(sentence.get("text", ""))
                    cited = cited_quotes(text)
                    flag = sentence.get("attributable")
                    if not cited:
                        skipped["no_citation"] += 1
                    elif flag not in (0, 1):
                        skipped["no_attributable_flag"] += 1
                    elif any(n not in quotes for n in cited):
                        skipped["unknown_quote"] += 1
                    else:
                        index = sentence.get("index", position)
                        examples.append(
                            EntailmentExample(
                                premise="\n\n".join(quotes[n] for n in cited),
                                hypothesis=strip_citations(text),
                                label=SUPPORTED if flag == 1 else NOT_SUPPORTED,
                                source_id=f"{row['query_id']}:a{answer_index}:s{index}",
                            )
                        )
    if problems:
        raise ReferenceFormatError(path, problems)
    return HagridPairs(examples=examples, sentences=sentences, skipped=dict(skipped))


def hagrid_attribution_pairs(csv_path: Path | str) -> list[EntailmentExample]:
    """The examples of :func:`read_hagrid_attribution` (skip counts dropped)."""
    return read_hagrid_attribution(csv_path).examples


def literal_list(row: Mapping[str, str], column: str) -> list[JsonObject]:
    """A cell holding a Python literal list of dicts."""
    try:
        value = ast.literal_eval(row[column])
    except (SyntaxError, ValueError) as exc:
        raise ValueError(f"column {column!r} is not a Python literal ({exc})") from None
    except (RecursionError, MemoryError):
        raise ValueError(f"column {column!r} is nested too deeply") from None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"column {column!r} is not a list of dicts")
    return value
