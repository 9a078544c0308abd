"""Load labelled QA sets (JSONL, CSV or Parquet) into typed :class:`QAItem` records.

A QA set names, per question, its label and its ground context as document ids and optionally chunk
ids. Loading validates every row and reports all problems at once with row numbers, so a data team
fixes a broken file in one pass instead of one error per run. A file that cannot be read as its
format at all (not UTF-8, binary, an empty CSV, not Parquet, a JSONL line that is not a JSON
object) is refused at once with a :class:`QASetError` naming the file (and the line).
"""

from __future__ import annotations

import numbers
import reprlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ragtrail.input_files import (
    InputFileError,
    check_input_file,
    check_text_file,
    json_type,
    jsonl_hint,
    parse_json,
    read_lines,
)
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import LABELS, QAItem, sha256_bytes

WHAT = "QA set"
ID_COLUMNS = ("ground_doc_ids", "ground_doc_id", "ground_chunk_ids", "ground_chunk_id")


class QASetError(ValueError):
    """A QA set file is unreadable or has invalid rows."""


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and pd.isna(value))


def _one_id(value: Any, field: str) -> str:
    """An id inside a list: text or an integer (numeric document ids exist), nothing else."""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    raise ValueError(f"{field} must hold ids (text), not {_kind(value)}")


def _as_ids(value: Any, field: str = "ground_doc_ids") -> tuple[str, ...]:
    """Accept a list, a JSON list string, a ';'/'|'-separated string or nothing (and a single
    id in the one-id columns ``ground_doc_id`` / ``ground_chunk_id``); a value of another kind
    (an object, a bare number where a list belongs, a nested list) is a ValueError."""
    if _missing(value):
        return ()
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return ()
        if text.startswith("["):
            try:
                parsed = parse_json(text)
            except ValueError as exc:
                raise ValueError(f"{field} is not a JSON list ({exc})") from None
            if not isinstance(parsed, list):
                raise ValueError(f"{field} is not a JSON list")
            return tuple(_one_id(v, field) for v in parsed)
        for sep in (";", "|"):
            if sep in text:
                return tuple(part.strip() for part in text.split(sep) if part.strip())
        return (text,)
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        return tuple(_one_id(v, field) for v in value)
    if field.endswith("_id"):  # the one-id columns ground_doc_id / ground_chunk_id
        return (_one_id(value, field),)
    raise ValueError(f"{field} must be a list of ids, not {_kind(value)}")


def _kind(value: Any) -> str:
    """What a value is, for messages: its JSON type and, when short, the value itself."""
    shown = reprlib.repr(value)
    return f"{json_type(value)} ({shown})" if len(shown) <= 40 else json_type(value)


def _text(row: Mapping[str, Any], field: str) -> str:
    """A text column: a string, or a number written as one; missing is "". Objects, lists and
    booleans are refused (``str()`` of them would pass for a question)."""
    value = row.get(field)
    if _missing(value):
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{field} must be text, not {_kind(value)}")


def _jsonl_rows(path: Path) -> list[JsonObject]:
    rows = []
    for lineno, line in enumerate(read_lines(path, WHAT), 1):
        if not line.strip():
            continue
        try:
            row = parse_json(line)
        except ValueError as exc:
            reason = getattr(exc, "msg", None) or str(exc)
            raise QASetError(f"{path}:{lineno}: invalid JSON ({reason}){jsonl_hint(line)}") from exc
        if not isinstance(row, dict):
            raise QASetError(
                f"{path}:{lineno}: expected a JSON object (one question per line), "
                f"got {json_type(row)}"
            )
        rows.append(row)
    return rows


def _check_columns(path: Path, columns: Iterable[Any]) -> None:
    """A table (CSV, Parquet) must have the question, label and ground-id columns."""
    names = [str(c) for c in columns]
    missing = [c for c in ("question", "label") if c not in names]
    if not any(c in names for c in ID_COLUMNS):
        missing.append("ground_doc_ids")
    if missing:
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        separator = next((c for c in ";\t|" if len(names) == 1 and c in names[0]), None)
        hint = f"; is it separated by {separator!r} instead of ','?" if separator else ""
        raise QASetError(
            f"{path}: missing column(s) {', '.join(missing)} (the file has: {shown or 'none'})"
            + hint
        )


def _csv_rows(path: Path) -> list[JsonObject]:
    check_text_file(path, WHAT)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except pd.errors.EmptyDataError:
        raise QASetError(f"{path}: empty file, no header row (a CSV QA set needs one)") from None
    except pd.errors.ParserError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else "unreadable"
        raise QASetError(f"{path}: not a valid CSV file ({reason})") from None
    except UnicodeDecodeError as exc:
        raise QASetError(
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save the file as UTF-8"
        ) from None
    _check_columns(path, frame.columns)
    return frame.to_dict("records")


def _parquet_rows(path: Path) -> list[JsonObject]:
    import pyarrow as pa

    try:
        frame = pd.read_parquet(path)
    except (pa.ArrowException, ValueError, OSError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise QASetError(f"{path}: not a readable Parquet file ({reason})") from None
    _check_columns(path, frame.columns)
    return frame.to_dict("records")


def _rows(path: Path) -> list[JsonObject]:
    suffix = path.suffix.lower()
    try:
        if suffix in {".jsonl", ".ndjson"}:
            return _jsonl_rows(path)
        if suffix == ".csv":
            return _csv_rows(path)
        if suffix == ".parquet":
            return _parquet_rows(path)
    except InputFileError as exc:
        raise QASetError(str(exc)) from None
    raise QASetError(f"{path}: unsupported QA set format {suffix!r} (use .jsonl, .csv or .parquet)")


def item_from_row(row: Mapping[str, Any]) -> QAItem:
    """Validate one row; raises ValueError with the problem."""
    question = _text(row, "question").strip()
    label = _text(row, "label").strip()
    if not question:
        raise ValueError("empty question")
    if label not in LABELS:
        raise ValueError(f"label {label!r} is not one of {', '.join(LABELS)}")
    doc_field = "ground_doc_ids" if "ground_doc_ids" in row else "ground_doc_id"
    chunk_field = "ground_chunk_ids" if "ground_chunk_ids" in row else "ground_chunk_id"
    doc_ids = _as_ids(row.get(doc_field), doc_field)
    chunk_ids = _as_ids(row.get(chunk_field), chunk_field)
    if not doc_ids and not chunk_ids:
        raise ValueError("no ground_doc_ids or ground_chunk_ids")
    return QAItem(
        qid=_text(row, "qid").strip(),
        question=question,
        label=label,
        answer=_text(row, "answer"),
        ground_doc_ids=doc_ids,
        ground_chunk_ids=chunk_ids,
    )


def load_qa_set(path: str | Path) -> tuple[list[QAItem], str]:
    """Return the validated items and the set's version (content hash of the file bytes)."""
    try:
        path = check_input_file(path, WHAT)
    except InputFileError as exc:
        raise QASetError(str(exc)) from None
    items: list[QAItem] = []
    problems: list[str] = []
    seen: set[str] = set()
    for n, row in enumerate(_rows(path), 1):
        try:
            item = item_from_row(row)
        except (ValueError, TypeError) as exc:
            problems.append(f"row {n}: {exc}")
            continue
        if not item.qid:
            item = QAItem(**{**item.__dict__, "qid": f"row{n:05d}"})
        if item.qid in seen:
            problems.append(f"row {n}: duplicate qid {item.qid!r}")
            continue
        seen.add(item.qid)
        items.append(item)
    if problems:
        shown = "; ".join(problems[:20])
        more = f" (+{len(problems) - 20} more)" if len(problems) > 20 else ""
        raise QASetError(f"{path}: {len(problems)} invalid rows: {shown}{more}")
    if not items:
        raise QASetError(f"{path}: no questions (the file has no rows)")
    return items, f"qa-{sha256_bytes(path.read_bytes())[:12]}"
