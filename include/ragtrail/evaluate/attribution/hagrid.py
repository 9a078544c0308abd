"""HAGRID answers as :class:`~ragtrail.evaluate.attribution.cited_answers.AnswerRecord` s.

The Attributed-IR release of HAGRID's dev set (``llama13_RTG_vanilla.csv``: 716 queries) holds per
query the question (``query``, ``query_id``), the two retrieved passages the model saw
(``quotes``: docid, text, title), the model's answer with ``[k]`` citations (``output``), the
annotators' answers (``answers``: text with ``[k]`` citations, ``attributable`` and
``informative`` flags, 1/0 or unrated) and the quotes those answers cite (``gold_quotes``: idx,
docid, text). List cells are Python literals.

Mapping: passages = ``quotes`` in order (the model's ``[k]`` is the k-th retrieved quote);
answer = ``output``; gold answers = ``answers``; gold passages = ``gold_quotes`` in list order;
relevant docids = the gold quotes' docids (HAGRID's quotes are the passages annotators judged
relevant). How gold ``[k]`` map: 625 queries number their gold quotes ``idx`` 1..n and 91 number
them 0..n-1, always in list order; in both, answers cite ``[1]``..``[n]`` for the first..n-th quote
(the 0-based rows cite up to ``[n]`` and never ``[0]``, as HAGRID's prompt numbers them from 1),
so ``[k]`` is the k-th gold quote by position, not the quote whose ``idx`` is k. One gold answer
(query 2629) cites ``[2]`` with a single gold quote; that citation names nothing.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragtrail.evaluate.attribution.cited_answers import AnswerRecord, GoldAnswer, SourcePassage
from ragtrail.evaluate.attribution.scoring import AnswersFormatError, write_answers
from ragtrail.judges.references import literal_list

COLUMNS = ("query", "query_id", "quotes", "output", "answers", "gold_quotes")


def read_hagrid(csv_path: Path | str) -> list[AnswerRecord]:
    """One record per CSV row, read in place; every bad row reported at once
    (:class:`~ragtrail.evaluate.attribution.scoring.AnswersFormatError`, rows numbered from the header's 1)."""
    path = Path(csv_path)
    csv.field_size_limit(sys.maxsize)
    records: list[AnswerRecord] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise AnswersFormatError(str(path), [f"missing columns {missing}"])
        for row_number, row in enumerate(reader, start=2):
            try:
                record = _record(row)
            except (ValueError, KeyError, TypeError) as exc:
                problems.append(f"row {row_number}: {type(exc).__name__}: {exc}")
                continue
            if record.qid in seen:
                problems.append(
                    f"row {row_number}: query_id {record.qid} already on row {seen[record.qid]}"
                )
                continue
            seen[record.qid] = row_number
            records.append(record)
    if problems:
        raise AnswersFormatError(str(path), problems)
    return records


def hagrid_to_jsonl(csv_path: Path | str, out_path: Path | str) -> int:
    """Convert the CSV to the answers JSONL of ``ragtrail eval answers``; returns the count."""
    return write_answers(read_hagrid(csv_path), out_path)


def _record(row: Mapping[str, str]) -> AnswerRecord:
    gold_quotes = literal_list(row, "gold_quotes")
    numbers = [int(q["idx"]) for q in gold_quotes]
    if numbers and numbers not in (
        list(range(1, len(numbers) + 1)),
        list(range(len(numbers))),
    ):
        raise ValueError(f"gold_quotes idx {numbers} are not 1..n or 0..n-1 in order")
    gold_passages = tuple(SourcePassage(str(q["docid"]), str(q["text"])) for q in gold_quotes)
    return AnswerRecord(
        qid=str(int(row["query_id"])),
        question=row["query"],
        answer=row["output"],
        passages=tuple(
            SourcePassage(str(q["docid"]), str(q["text"])) for q in literal_list(row, "quotes")
        ),
        relevant_docids=tuple(dict.fromkeys(p.docid for p in gold_passages)),
        gold_answers=tuple(
            GoldAnswer(str(a["answer"]), _flag(a.get("attributable")), _flag(a.get("informative")))
            for a in literal_list(row, "answers")
        ),
        gold_passages=gold_passages,
    )


def _flag(value: Any) -> bool | None:
    """HAGRID's 1/0 rating, or None where the answer was not rated."""
    if value is None:
        return None
    if value in (0, 1) and not isinstance(value, float):
        return bool(value)
    raise ValueError(f"a rating must be 1, 0 or None, got {value!r}")
