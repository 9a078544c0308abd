"""TestSetStore on SQLite and (when configured) PostgreSQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select

from ragtrail.records import CandidateStatus
from ragtrail.storage import tables
from ragtrail.storage.db import make_engine, upgrade
from ragtrail.storage.metadata_store import SqlMetadataStore
from ragtrail.testset.store import (
    DOCUMENT_REMOVED,
    DOCUMENT_UPDATED,
    SOURCE_DOCUMENT_REMOVED,
    TestSetStore,
    doc_id_from_chunk_id,
    qid_for,
    version_id_for,
)
from tests.unit.testset import CORPUS, cid, make_candidate

ACCEPTED, REJECTED, RETIRED = (
    CandidateStatus.ACCEPTED,
    CandidateStatus.REJECTED,
    CandidateStatus.RETIRED,
)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """A migrated, empty database on :func:`tests.unit.conftest.db_url` (SQLite and PostgreSQL)."""
    eng = make_engine(db_url)
    upgrade(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def store(engine: Engine) -> TestSetStore:
    return TestSetStore(engine)


def _count(engine: Engine, table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _ids(cands) -> list[str]:
    return [c.candidate_id for c in cands]


def _pool():
    """Five accepted candidates over three documents and one rejected one."""
    return [
        make_candidate("a0", doc="a.md", ordinal=0),
        make_candidate("a1", doc="a.md", ordinal=1, label="summary"),
        make_candidate("b0", doc="b.md", ordinal=0, label="reasoning"),
        make_candidate("c0", doc="c.md", ordinal=0),
        make_candidate(
            "u0", doc="c.md", ordinal=1, label="unanswerable", source_chunk_id="b.md#0003"
        ),
        make_candidate("r0", doc="a.md", ordinal=2, status=REJECTED, reject_reason="vague"),
    ]


# -- candidates ------------------------------------------------------------------------------


def test_candidates_round_trip_with_lineage(store: TestSetStore) -> None:
    cands = _pool()
    store.upsert_candidates(cands, corpus=CORPUS, run_id="run-1")
    got = store.get_candidates(CORPUS)
    assert got == sorted(cands, key=lambda c: c.candidate_id)
    by_id = {c.candidate_id: c for c in got}
    u0 = by_id[cid("u0")]
    assert u0.context.headings == ("Leave", "Part 1") and u0.context.text.startswith("Chunk 1")
    assert u0.source_chunk_id == "b.md#0003" and u0.status is ACCEPTED
    assert by_id[cid("r0")].reject_reason == "vague"
    rows = store.get_candidate_rows([cid("u0"), "nope"])
    assert set(rows) == {cid("u0")}
    assert rows[cid("u0")]["source_doc_id"] == "b.md" and rows[cid("u0")]["run_id"] == "run-1"
    assert rows[cid("u0")]["created_at"].utcoffset() == timedelta(0)
    assert store.get_candidates("other") == []


def test_upsert_is_idempotent_and_keeps_created_at(store: TestSetStore, engine: Engine) -> None:
    cands = _pool()
    store.upsert_candidates(cands, corpus=CORPUS, run_id="run-1")
    first = store.get_candidate_rows(_ids(cands))
    store.upsert_candidates(cands, corpus=CORPUS, run_id="run-1")
    store.upsert_candidates([*cands, cands[0]], corpus=CORPUS, run_id="run-1")
    assert _count(engine, tables.qa_candidates) == len(cands)
    assert store.get_candidate_rows(_ids(cands)) == first

    changed = dataclasses.replace(cands[0], status=REJECTED, reject_reason="duplicate")
    store.upsert_candidates([changed], corpus=CORPUS, run_id="run-2")
    row = store.get_candidate_rows([changed.candidate_id])[changed.candidate_id]
    assert (row["status"], row["reject_reason"], row["run_id"]) == (
        "rejected",
        "duplicate",
        "run-2",
    )
    assert row["created_at"] == first[changed.candidate_id]["created_at"]
    assert _count(engine, tables.qa_candidates) == len(cands)
    store.upsert_candidates([], corpus=CORPUS, run_id="run-3")


def test_upsert_rejects_foreign_corpus(store: TestSetStore) -> None:
    with pytest.raises(ValueError, match="corpus"):
        store.upsert_candidates([make_candidate("x", corpus="other")], corpus=CORPUS, run_id="r")
    assert store.get_candidates(CORPUS) == [] and store.get_candidates("other") == []


def test_get_candidates_filters(store: TestSetStore) -> None:
    store.upsert_candidates(_pool(), corpus=CORPUS, run_id="r")
    accepted = store.get_candidates(CORPUS, status=ACCEPTED)
    assert len(accepted) == 5 and all(c.status is ACCEPTED for c in accepted)
    assert _ids(store.get_candidates(CORPUS, status="rejected")) == [cid("r0")]
    assert len(store.get_candidates(CORPUS, status=[ACCEPTED, "rejected"])) == 6
    in_c = store.get_candidates(CORPUS, doc_ids=["c.md", "zzz.md"])
    assert sorted(_ids(in_c)) == sorted([cid("c0"), cid("u0")])
    assert _ids(store.get_candidates(CORPUS, status=REJECTED, doc_ids=["a.md"])) == [cid("r0")]
    assert store.get_candidates(CORPUS, doc_ids=[]) == []
    assert store.count_candidates(CORPUS) == {"accepted": 5, "rejected": 1}
    with pytest.raises(ValueError):
        store.get_candidates(CORPUS, status="bogus")


# -- retirement ------------------------------------------------------------------------------


def test_retire_for_documents(store: TestSetStore) -> None:
    store.upsert_candidates(_pool(), corpus=CORPUS, run_id="r")
    # b.md removed: its own candidate, and the unanswerable one written from b.md#0003
    assert store.retire_for_documents(CORPUS, ["b.md"], reason="removed", snapshot_id="s2") == 2
    retired = store.get_candidates(CORPUS, status=RETIRED)
    assert sorted(_ids(retired)) == sorted([cid("b0"), cid("u0")])
    row = store.get_candidate_rows([cid("u0")])[cid("u0")]
    assert row["retired_reason"] == "removed" and row["retired_snapshot_id"] == "s2"
    assert row["retired_at"].utcoffset() == timedelta(0)
    # a.md: the rejected candidate keeps its verdict
    assert store.retire_for_documents(CORPUS, ["a.md"], reason="removed", snapshot_id="s2") == 2
    assert store.get_candidates(CORPUS, status=REJECTED)[0].candidate_id == cid("r0")
    assert store.retire_for_documents(CORPUS, ["a.md", "b.md"], reason="x", snapshot_id="s3") == 0
    assert store.retire_for_documents("other", ["c.md"], reason="x", snapshot_id="s3") == 0
    assert _ids(store.get_candidates(CORPUS, status=ACCEPTED)) == [cid("c0")]


def test_source_document_resolved_from_chunks_table(store: TestSetStore, engine: Engine) -> None:
    meta = SqlMetadataStore(engine)
    doc = {
        "doc_id": "src.md",
        "uri": "file:///src.md",
        "format": "markdown",
        "title": "Src",
        "content_hash": "e" * 64,
        "raw_hash": "r" * 64,
        "version": 1,
        "size_bytes": 10,
        "doc_metadata": {},
        "first_snapshot_id": "s1",
        "last_changed_snapshot_id": "s1",
    }
    chunk = {
        "chunk_id": "opaque-17",  # not in "doc#n" form: only the chunks table knows its document
        "ordinal": 0,
        "text": "t",
        "headings": [],
        "kind": "text",
        "n_tokens": 1,
        "content_hash": "f" * 64,
    }
    meta.upsert_document(CORPUS, doc, [chunk])
    u = make_candidate("u1", doc="c.md", label="unanswerable", source_chunk_id="opaque-17")
    store.upsert_candidates([u], corpus=CORPUS, run_id="r")
    assert store.get_candidate_rows([u.candidate_id])[u.candidate_id]["source_doc_id"] == "src.md"
    assert store.retire_for_documents(CORPUS, ["src.md"], reason="gone", snapshot_id="s2") == 1


def test_retire_stale_hashes(store: TestSetStore) -> None:
    cands = [
        make_candidate("a0", doc="a.md", doc_hash="a" * 64),
        make_candidate("b0", doc="b.md", doc_hash="b" * 64),
        make_candidate("c0", doc="c.md", doc_hash="c" * 64),
        make_candidate(
            "u0", doc="a.md", label="unanswerable", doc_hash="a" * 64, source_chunk_id="z.md#0001"
        ),
        make_candidate("r0", doc="b.md", doc_hash="b" * 64, status=REJECTED),
    ]
    store.upsert_candidates(cands, corpus=CORPUS, run_id="r")
    current = {"a.md": "a" * 64, "b.md": "B" * 64}  # b updated, c and z removed

    assert store.retire_stale_hashes(CORPUS, current, "s2", retire_missing=False) == 1
    assert _ids(store.get_candidates(CORPUS, status=RETIRED)) == [cid("b0")]

    assert store.retire_stale_hashes(CORPUS, current, "s2") == 2
    rows = store.get_candidate_rows([cid(n) for n in ("a0", "b0", "c0", "u0", "r0")])
    reasons = {n: rows[cid(n)]["retired_reason"] for n in ("a0", "b0", "c0", "u0", "r0")}
    assert reasons == {
        "a0": None,
        "b0": DOCUMENT_UPDATED,
        "c0": DOCUMENT_REMOVED,
        "u0": SOURCE_DOCUMENT_REMOVED,
        "r0": None,
    }
    assert rows[cid("r0")]["status"] == "rejected"
    assert {rows[cid(n)]["retired_snapshot_id"] for n in ("b0", "c0", "u0")} == {"s2"}
    assert store.retire_stale_hashes(CORPUS, current, "s3") == 0


def test_upsert_and_retirement_records(store: TestSetStore) -> None:
    a0 = make_candidate("a0", doc="a.md")
    store.upsert_candidates([a0], corpus=CORPUS, run_id="r")
    store.retire_for_documents(CORPUS, ["a.md"], reason="removed", snapshot_id="s2")
    first = store.get_candidate_rows([a0.candidate_id])[a0.candidate_id]

    # re-storing the retired object keeps the original retirement record
    (retired,) = store.get_candidates(CORPUS)
    store.upsert_candidates([retired], corpus=CORPUS, run_id="r")
    assert store.get_candidate_rows([a0.candidate_id])[a0.candidate_id] == first

    # the document came back with the same content: the regenerated candidate is live again
    store.upsert_candidates([a0], corpus=CORPUS, run_id="r2")
    row = store.get_candidate_rows([a0.candidate_id])[a0.candidate_id]
    assert row["status"] == "accepted" and row["retired_at"] is None

    # a candidate first stored as retired gets a retirement record
    x = make_candidate("x0", status=RETIRED)
    store.upsert_candidates([x], corpus=CORPUS, run_id="r")
    row = store.get_candidate_rows([x.candidate_id])[x.candidate_id]
    assert row["retired_at"] is not None and row["retired_reason"] == "retired_at_upsert"


def test_doc_id_from_chunk_id() -> None:
    assert doc_id_from_chunk_id("a/b#c.md#0012") == "a/b#c.md"
    assert doc_id_from_chunk_id("opaque") is None
    assert doc_id_from_chunk_id("a.md#x") is None


# -- versions --------------------------------------------------------------------------------


def _version(store: TestSetStore, ids, **kw) -> str:
    snapshot_id = kw.pop("snapshot_id", "s1")
    args = {
        "parent_version": None,
        "run_id": "run-1",
        "seed": 13,
        "params": {"targets": {"fact_single": 2}},
        "counts": {"accepted": {"fact_single": 2}, "targets": {"fact_single": 2}},
    }
    args.update(kw)
    return store.create_version(CORPUS, snapshot_id, ids, **args)


def test_create_version_and_items_in_order(store: TestSetStore, engine: Engine) -> None:
    cands = [c for c in _pool() if c.status is ACCEPTED]
    store.upsert_candidates(cands, corpus=CORPUS, run_id="r")
    order = [cid("c0"), cid("a0"), cid("u0"), cid("b0")]
    version = _version(store, order)
    assert version == version_id_for(CORPUS, order, 13) and version.startswith("ts-")
    assert len(version) == 15

    row = store.get_version(version)
    assert row["corpus"] == CORPUS and row["snapshot_id"] == "s1" and row["n_items"] == 4
    assert row["seed"] == 13 and row["params"] == {"targets": {"fact_single": 2}}
    assert row["counts"]["targets"] == {"fact_single": 2} and row["artifact_uri"] is None
    assert row["created_at"].utcoffset() == timedelta(0)

    items = store.version_items(version)
    assert _ids(items) == order
    assert items[2].requested_label == "unanswerable" and items[2].context.doc_id == "c.md"
    qids = store.version_qids(version)
    assert list(qids) == order and qids[order[0]] == qid_for(order[0]) == "q-" + order[0][:16]
    assert _count(engine, tables.qa_set_items) == 4


def test_versions_are_immutable(store: TestSetStore, engine: Engine) -> None:
    cands = [c for c in _pool() if c.status is ACCEPTED]
    store.upsert_candidates(cands, corpus=CORPUS, run_id="r")
    order = [cid("a0"), cid("b0"), cid("c0")]
    version = _version(store, order)
    first = store.get_version(version)

    # same content (even reordered, other params) -> the same, unchanged version
    again = _version(store, list(reversed(order)), params={"other": 1}, run_id="run-2")
    assert again == version
    assert store.get_version(version) == first
    assert _ids(store.version_items(version)) == order
    assert _count(engine, tables.qa_sets) == 1 and _count(engine, tables.qa_set_items) == 3

    # different seed or different items -> a different version
    assert _version(store, order, seed=14) != version
    assert _version(store, order[:2]) != version
    assert _count(engine, tables.qa_sets) == 3

    # retiring a candidate does not change the version's items
    store.retire_for_documents(CORPUS, ["a.md"], reason="removed", snapshot_id="s2")
    items = store.version_items(version)
    assert _ids(items) == order and items[0].status is RETIRED


def test_version_lineage_listing_and_artifacts(store: TestSetStore) -> None:
    store.upsert_candidates(_pool(), corpus=CORPUS, run_id="r")
    assert store.latest_version(CORPUS) is None and store.list_versions(CORPUS) == []
    v1 = _version(store, [cid("a0"), cid("b0")])
    v2 = _version(store, [cid("a0"), cid("c0")], parent_version=v1, snapshot_id="s2")
    assert store.get_version(v2)["parent_version"] == v1
    assert store.latest_version(CORPUS)["version"] == v2
    assert [v["version"] for v in store.list_versions(CORPUS)] == [v2, v1]
    assert store.list_versions("other") == [] and store.get_version("ts-nope") is None

    store.set_artifact_uri(v1, "s3://bucket/testsets/v1.parquet")
    assert store.get_version(v1)["artifact_uri"] == "s3://bucket/testsets/v1.parquet"
    with pytest.raises(KeyError):
        store.set_artifact_uri("ts-nope", "x")


def test_create_version_validates(store: TestSetStore, engine: Engine) -> None:
    store.upsert_candidates(_pool(), corpus=CORPUS, run_id="r")
    store.upsert_candidates([make_candidate("o0", corpus="other")], corpus="other", run_id="r")
    with pytest.raises(ValueError, match="at least one"):
        _version(store, [])
    with pytest.raises(ValueError, match="duplicate"):
        _version(store, [cid("a0"), cid("a0")])
    with pytest.raises(KeyError, match="unknown"):
        _version(store, [cid("a0"), cid("missing")])
    with pytest.raises(ValueError, match="not accepted"):
        _version(store, [cid("a0"), cid("r0")])
    with pytest.raises(ValueError, match="another corpus"):
        _version(store, [cid("a0"), cid("o0")])
    with pytest.raises(KeyError, match="parent"):
        _version(store, [cid("a0")], parent_version="ts-000000000000")
    with pytest.raises(KeyError):
        store.version_items("ts-nope")
    assert _count(engine, tables.qa_sets) == 0 and _count(engine, tables.qa_set_items) == 0
