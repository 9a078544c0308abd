"""Export test-set items: JSONL / CSV / Parquet for the evaluator, and BEIR folders.

The JSONL, CSV and Parquet files carry the evaluation columns that
:func:`ragtrail.testset.qaset.load_qa_set` reads (qid, question, label, answer, ground_doc_ids,
ground_chunk_ids) followed by the lineage of every item, so a file on its own says where each
question came from. In CSV the id lists and the critiques / generator objects are JSON strings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import QACandidate
from ragtrail.testset.store import qid_for

EVAL_COLUMNS: tuple[str, ...] = (
    "qid",
    "question",
    "label",
    "answer",
    "ground_doc_ids",
    "ground_chunk_ids",
)
LINEAGE_COLUMNS: tuple[str, ...] = (
    "candidate_id",
    "corpus",
    "snapshot_id",
    "doc_id",
    "doc_content_hash",
    "chunk_id",
    "chunk_hash",
    "statement",
    "statement_kind",
    "requested_label",
    "label_source",
    "label_judge",
    "theme",
    "source_chunk_id",
    "critiques",
    "generator",
)
COLUMNS: tuple[str, ...] = EVAL_COLUMNS + LINEAGE_COLUMNS
LIST_COLUMNS: tuple[str, ...] = ("ground_doc_ids", "ground_chunk_ids")

PathLike = str | os.PathLike[str]


def _dumps(value: Any) -> str:
    """Canonical JSON: sorted keys, UTF-8 kept, so equal objects give equal strings."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _row(cand: QACandidate, qid: str) -> JsonObject:
    """One item's evaluation and lineage columns; the label is the observed label."""
    ctx = cand.context
    return {
        "qid": qid,
        "question": cand.question,
        "label": cand.effective_label,
        "answer": cand.answer,
        "ground_doc_ids": [ctx.doc_id],
        "ground_chunk_ids": [ctx.chunk_id],
        "candidate_id": cand.candidate_id,
        "corpus": ctx.corpus,
        "snapshot_id": ctx.snapshot_id,
        "doc_id": ctx.doc_id,
        "doc_content_hash": ctx.doc_content_hash,
        "chunk_id": ctx.chunk_id,
        "chunk_hash": ctx.chunk_hash,
        "statement": cand.statement,
        "statement_kind": cand.statement_kind,
        "requested_label": cand.requested_label,
        "label_source": cand.label_source or "",
        "label_judge": cand.label_judge or "",
        "theme": cand.theme,
        "source_chunk_id": cand.source_chunk_id,
        "critiques": _dumps(cand.critiques),
        "generator": _dumps(cand.generator),
    }


def to_frame(
    items: Sequence[QACandidate], *, qids: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """One row per item in order, columns :data:`COLUMNS` (id lists as Python lists).

    ``qids`` maps candidate_id -> qid (e.g. :meth:`TestSetStore.version_qids`); items not in it
    get :func:`ragtrail.testset.store.qid_for` of their id.
    """
    qids = qids or {}
    rows = [_row(c, qids.get(c.candidate_id) or qid_for(c.candidate_id)) for c in items]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _prepare(path: PathLike) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def _write_lines(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """JSON Lines, one compact object per line, UTF-8."""
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def write_jsonl(
    items: Sequence[QACandidate], path: PathLike, *, qids: Mapping[str, str] | None = None
) -> Path:
    """Write the items as JSON Lines (lists and objects kept native except critiques/generator)."""
    target = _prepare(path)
    _write_lines(target, to_frame(items, qids=qids).to_dict("records"))
    return target


def write_csv(
    items: Sequence[QACandidate], path: PathLike, *, qids: Mapping[str, str] | None = None
) -> Path:
    """Write the items as CSV; the id lists become JSON list strings, missing values empty."""
    target = _prepare(path)
    frame = to_frame(items, qids=qids)
    for column in LIST_COLUMNS:
        frame[column] = frame[column].map(_dumps)
    frame.to_csv(target, index=False, encoding="utf-8")
    return target


def write_parquet(
    items: Sequence[QACandidate], path: PathLike, *, qids: Mapping[str, str] | None = None
) -> Path:
    """Write the items as Parquet, the id lists as list<string> columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = _prepare(path)
    frame = to_frame(items, qids=qids)
    string = pa.string()
    schema = pa.schema(
        [
            pa.field(c, pa.list_(string) if c in LIST_COLUMNS else string, nullable=True)
            for c in COLUMNS
        ]
    )
    pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), target)
    return target


def write_beir(
    items: Sequence[QACandidate],
    corpus_chunks: Mapping[str, tuple[str, str]],
    out_dir: PathLike,
    *,
    qids: Mapping[str, str] | None = None,
) -> Path:
    """Write a BEIR dataset folder: corpus.jsonl, queries.jsonl and qrels/test.tsv.

    ``corpus_chunks`` maps chunk_id -> (title, text) and becomes the corpus, in its order; every
    item's ground chunk must be in it (ValueError otherwise). Each query's metadata carries its
    label; each item gets one qrel, its ground chunk with score 1. Returns ``out_dir``.
    """
    frame = to_frame(items, qids=qids)
    missing = sorted({c for c in frame["chunk_id"] if c not in corpus_chunks})
    if missing:
        raise ValueError(f"{len(missing)} ground chunks missing from corpus_chunks: {missing[:5]}")
    out = Path(out_dir)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = [
        {"_id": chunk_id, "title": title, "text": text}
        for chunk_id, (title, text) in corpus_chunks.items()
    ]
    _write_lines(out / "corpus.jsonl", corpus)
    queries = [
        {"_id": row.qid, "text": row.question, "metadata": {"label": row.label}}
        for row in frame.itertuples(index=False)
    ]
    _write_lines(out / "queries.jsonl", queries)
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{row.qid}\t{row.chunk_id}\t1" for row in frame.itertuples(index=False)]
    (out / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
