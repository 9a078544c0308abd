"""Load labelled QA sets (JSONL, CSV or Parquet) into typed :class:`QAItem` records.

A QA set names, per question, its label and its ground context as document ids and optionally chunk
ids. Loading validates every row and reports all problems at once with row numbers, so a data team
fixes a broken file in one pass instead of one error per run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ragtrail.records import LABELS, QAItem, sha256_bytes


class QASetError(ValueError):
    """A QA set file is unreadable or has invalid rows."""


def _as_ids(value: Any) -> tuple[str, ...]:
    """Accept a list, a JSON list string, a ';'/'|'-separated string, a scalar or nothing."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ()
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return ()
        if text.startswith("["):
            return tuple(str(v) for v in json.loads(text))
        for sep in (";", "|"):
            if sep in text:
                return tuple(part.strip() for part in text.split(sep) if part.strip())
        return (text,)
    if isinstance(value, Iterable):
        return tuple(str(v) for v in value)
    return (str(value),)


def _rows(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix in {".jsonl", ".ndjson"}:
        rows = []
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise QASetError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
        return rows
    if suffix == ".csv":
        return pd.read_csv(path, dtype=str, keep_default_na=False).to_dict("records")
    if suffix == ".parquet":
        return pd.read_parquet(path).to_dict("records")
    raise QASetError(f"{path}: unsupported QA set format {suffix!r} (use .jsonl, .csv or .parquet)")


def item_from_row(row: Mapping[str, Any]) -> QAItem:
    """Validate one row; raises ValueError with the problem."""
    question = str(row.get("question") or "").strip()
    label = str(row.get("label") or "").strip()
    if not question:
        raise ValueError("empty question")
    if label not in LABELS:
        raise ValueError(f"label {label!r} is not one of {', '.join(LABELS)}")
    doc_ids = _as_ids(row.get("ground_doc_ids", row.get("ground_doc_id")))
    chunk_ids = _as_ids(row.get("ground_chunk_ids", row.get("ground_chunk_id")))
    if not doc_ids and not chunk_ids:
        raise ValueError("no ground_doc_ids or ground_chunk_ids")
    answer = row.get("answer")
    return QAItem(
        qid=str(row.get("qid") or "").strip(),
        question=question,
        label=label,
        answer=""
        if answer is None or (isinstance(answer, float) and pd.isna(answer))
        else str(answer),
        ground_doc_ids=doc_ids,
        ground_chunk_ids=chunk_ids,
    )


def load_qa_set(path: str | Path) -> tuple[list[QAItem], str]:
    """Return the validated items and the set's version (content hash of the file bytes)."""
    path = Path(path)
    if not path.is_file():
        raise QASetError(f"QA set not found: {path}")
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
        raise QASetError(f"{path}: no questions")
    return items, f"qa-{sha256_bytes(path.read_bytes())[:12]}"
