"""Test-set export: evaluator round trips for JSONL / CSV / Parquet, and BEIR folder shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ragtrail.records import QAItem
from ragtrail.testset.export import (
    COLUMNS,
    EVAL_COLUMNS,
    to_frame,
    write_beir,
    write_csv,
    write_jsonl,
    write_parquet,
)
from ragtrail.testset.qaset import load_qa_set
from ragtrail.testset.store import qid_for
from tests.unit.testset import CORPUS, make_candidate


def _items():
    return [
        make_candidate(
            "f0", doc="people/leave.md", ordinal=3, question="How many days, “exactly”?"
        ),
        make_candidate(
            "s0",
            doc="ops/a;b|c.md",  # separators the CSV loader would otherwise split on
            label="summary",
            question='What does the "travel, expenses" policy cover?\nBriefly.',
            answer="Flights, hotels; per diems — überall.",
        ),
        make_candidate(
            "u0",
            doc="security/mfa.html",
            label="unanswerable",
            source_chunk_id="people/leave.md#0001",
            question="Which vendor supplies the badge readers?",
        ),
        make_candidate("r0", doc="people/leave.md", ordinal=4, label="reasoning", observed=None),
    ]


def _expected(items) -> list[QAItem]:
    return [
        QAItem(
            qid=qid_for(c.candidate_id),
            question=c.question,
            label=c.observed_label or c.requested_label,
            answer=c.answer,
            ground_doc_ids=(c.context.doc_id,),
            ground_chunk_ids=(c.context.chunk_id,),
        )
        for c in items
    ]


def test_to_frame_columns_and_lineage() -> None:
    items = _items()
    frame = to_frame(items)
    assert list(frame.columns) == list(COLUMNS) and list(COLUMNS[:6]) == list(EVAL_COLUMNS)
    first = frame.iloc[0]
    assert first["qid"] == qid_for(items[0].candidate_id) and first["label"] == "fact_single"
    assert first["ground_doc_ids"] == ["people/leave.md"]
    assert first["ground_chunk_ids"] == ["people/leave.md#0003"]
    assert first["corpus"] == CORPUS and first["snapshot_id"] == "s1"
    assert first["doc_content_hash"] == items[0].context.doc_content_hash
    assert first["chunk_hash"] == items[0].context.chunk_hash
    assert first["statement_kind"] == "fact" and first["theme"] == "annual leave"
    assert json.loads(first["critiques"]) == items[0].critiques
    assert json.loads(first["generator"]) == items[0].generator
    assert frame.iloc[2]["source_chunk_id"] == "people/leave.md#0001"
    assert frame.iloc[3]["label"] == "reasoning"  # no observed label: the requested one
    assert list(to_frame(items, qids={items[1].candidate_id: "custom"})["qid"])[1] == "custom"
    assert list(to_frame([]).columns) == list(COLUMNS)


@pytest.mark.parametrize(
    "writer,suffix", [(write_jsonl, "jsonl"), (write_csv, "csv"), (write_parquet, "parquet")]
)
def test_round_trip_through_load_qa_set(writer, suffix: str, tmp_path: Path) -> None:
    items = _items()
    path = writer(items, tmp_path / "sets" / f"ts-abc.{suffix}")
    assert path.is_file()
    loaded, version = load_qa_set(path)
    assert loaded == _expected(items)
    assert version.startswith("qa-")
    # writing the same items again gives the same bytes (and so the same loader version)
    again = writer(items, tmp_path / f"again.{suffix}")
    assert load_qa_set(again)[1] == version


def test_lineage_survives_each_format(tmp_path: Path) -> None:
    items = _items()
    jsonl = pd.read_json(write_jsonl(items, tmp_path / "t.jsonl"), lines=True, dtype=False)
    csv = pd.read_csv(write_csv(items, tmp_path / "t.csv"), dtype=str, keep_default_na=False)
    parquet = pd.read_parquet(write_parquet(items, tmp_path / "t.parquet"))
    for frame in (jsonl, csv, parquet):
        assert list(frame.columns) == list(COLUMNS)
        assert list(frame["candidate_id"]) == [c.candidate_id for c in items]
        assert list(frame["chunk_hash"]) == [c.context.chunk_hash for c in items]
        assert json.loads(frame["critiques"][0]) == items[0].critiques
    assert json.loads(csv["ground_doc_ids"][1]) == ["ops/a;b|c.md"]
    assert list(parquet["ground_chunk_ids"][0]) == ["people/leave.md#0003"]


def test_beir_folder(tmp_path: Path) -> None:
    items = _items()
    chunks = {c.context.chunk_id: ("Title " + c.context.doc_id, c.context.text) for c in items}
    chunks["extra.md#0000"] = ("Extra", "not a ground chunk")
    out = write_beir(items, chunks, tmp_path / "beir")

    corpus = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert [set(doc) for doc in corpus] == [{"_id", "title", "text"}] * len(chunks)
    assert [doc["_id"] for doc in corpus] == list(chunks)

    queries = [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]
    assert queries[0] == {
        "_id": qid_for(items[0].candidate_id),
        "text": items[0].question,
        "metadata": {"label": "fact_single"},
    }
    assert [q["metadata"]["label"] for q in queries] == [
        "fact_single",
        "summary",
        "unanswerable",
        "reasoning",
    ]

    lines = (out / "qrels" / "test.tsv").read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    assert [line.split("\t") for line in lines[1:]] == [
        [qid_for(c.candidate_id), c.context.chunk_id, "1"] for c in items
    ]

    with pytest.raises(ValueError, match="missing from corpus_chunks"):
        write_beir(items, {"extra.md#0000": ("Extra", "x")}, tmp_path / "bad")


def test_frame_feeds_the_testset_quality_suite() -> None:
    from ragtrail.quality.suites import TESTSET_COLUMNS, prepare_testset

    prepared = prepare_testset(to_frame(_items()), [1] * len(_items()))
    assert set(TESTSET_COLUMNS) <= set(prepared.columns)
    assert prepared["critiques_complete"].all() and prepared["answer_ok"].all()
    assert list(prepared["doc_id"]) == [c.context.doc_id for c in _items()]
