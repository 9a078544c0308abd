"""Read and write TREC qrels and run files, the formats trec_eval consumes.

- qrels: ``qid iter docid grade`` (iter is ignored; grade is an integer, > 0 = relevant)
- run:   ``qid Q0 docid rank score tag`` (rank is ignored: trec_eval re-ranks by score)

Fields are separated by any whitespace. Blank lines and lines starting with ``#`` are skipped.
Every malformed line raises :class:`TrecFormatError` naming the file and the 1-based line number,
so a bad nightly artifact fails loudly instead of silently dropping judgments. A UTF-8 byte order
mark is skipped.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from ragtrail.evaluate.metrics import rank_documents
from ragtrail.input_files import read_lines

__all__ = ["TrecFormatError", "read_qrels", "read_run", "write_run"]

StrPath = str | os.PathLike[str]


class TrecFormatError(ValueError):
    """A qrels or run file line that cannot be parsed."""

    def __init__(self, path: StrPath, line_no: int, message: str) -> None:
        self.path = str(path)
        self.line_no = line_no
        super().__init__(f"{self.path}:{line_no}: {message}")


def _lines(path: StrPath) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line number, fields)`` for every non-blank, non-comment line; a file that is not
    UTF-8 text (or has an overlong line) is an InputFileError naming the line."""
    for line_no, line in enumerate(read_lines(path, "TREC file"), start=1):
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            yield line_no, fields


def read_qrels(path: StrPath) -> dict[str, dict[str, int]]:
    """Parse a qrels file into ``{qid: {docid: grade}}``; a repeated (qid, docid) is an error."""
    qrels: dict[str, dict[str, int]] = {}
    for line_no, fields in _lines(path):
        if len(fields) != 4:
            raise TrecFormatError(
                path, line_no, f"expected 4 fields 'qid iter docid grade', got {len(fields)}"
            )
        qid, _iter, docid, grade_text = fields
        try:
            grade = int(grade_text)
        except ValueError:
            raise TrecFormatError(
                path, line_no, f"relevance grade must be an integer, got {grade_text!r}"
            ) from None
        judged = qrels.setdefault(qid, {})
        if docid in judged:
            raise TrecFormatError(path, line_no, f"duplicate judgment for {qid} {docid}")
        judged[docid] = grade
    return qrels


def read_run(path: StrPath) -> dict[str, dict[str, float]]:
    """Parse a run file into ``{qid: {docid: score}}``; a repeated (qid, docid) is an error."""
    run: dict[str, dict[str, float]] = {}
    for line_no, fields in _lines(path):
        if len(fields) != 6:
            raise TrecFormatError(
                path,
                line_no,
                f"expected 6 fields 'qid Q0 docid rank score tag', got {len(fields)}",
            )
        qid, _q0, docid, _rank, score_text, _tag = fields
        try:
            score = float(score_text)
        except ValueError:
            raise TrecFormatError(
                path, line_no, f"score must be a number, got {score_text!r}"
            ) from None
        if math.isnan(score):
            raise TrecFormatError(path, line_no, "score is NaN")
        scores = run.setdefault(qid, {})
        if docid in scores:
            raise TrecFormatError(path, line_no, f"duplicate document {docid} for query {qid}")
        scores[docid] = score
    return run


def write_run(run: Mapping[str, Mapping[str, float]], path: StrPath, tag: str) -> Path:
    """Write ``run`` in TREC format, qids sorted, docs in trec_eval's ranking order.

    Scores are written with ``repr`` precision so that reading the file back gives the identical
    floats, hence the identical ranking (rounding could create ties that reorder documents).
    """
    _check_token("tag", tag)
    out = Path(path)
    with out.open("w", encoding="utf-8") as handle:
        for qid in sorted(run):
            _check_token("qid", qid)
            scores = run[qid]
            for rank, docid in enumerate(rank_documents(scores), start=1):
                _check_token("docid", docid)
                handle.write(f"{qid} Q0 {docid} {rank} {float(scores[docid])!r} {tag}\n")
    return out


def _check_token(kind: str, value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"{kind} must be non-empty without whitespace, got {value!r}")
