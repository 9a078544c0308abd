"""Migrations and the SQL metadata store, on SQLite and (when configured) PostgreSQL."""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, select

from ragtrail.records import QuarantineReason, QuarantineRecord
from ragtrail.storage import tables
from ragtrail.storage.corpus_store import SnapshotRecord
from ragtrail.storage.db import (
    alembic_config,
    current_revision,
    head_revisions,
    make_engine,
    migration_connection,
    upgrade,
    utcnow,
)
from ragtrail.storage.document_store import ChunkRecord, DocumentRecord, SnapshotDocumentRecord
from ragtrail.storage.metadata_store import MetadataStore, SqlMetadataStore
from ragtrail.storage.quarantine_store import QuarantineEntry

HEAD = head_revisions()[0]
CORPUS = "handbook"


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def store(engine: Engine) -> SqlMetadataStore:
    upgrade(engine)
    return SqlMetadataStore(engine)


def _doc(doc_id: str, content_hash: str = "c" * 64, **extra: Any) -> dict[str, Any]:
    row = {
        "doc_id": doc_id,
        "uri": f"file:///src/{doc_id}",
        "format": "markdown",
        "title": doc_id.title(),
        "content_hash": content_hash,
        "raw_hash": "r" * 64,
        "version": 1,
        "size_bytes": 1234,
        "doc_metadata": {"author": "ana", "tags": ["a", "b"]},
        "first_snapshot_id": "s1",
        "last_changed_snapshot_id": "s1",
    }
    row.update(extra)
    return row


def _chunks(doc_id: str, n: int, tag: str = "") -> list[dict[str, Any]]:
    return [
        {
            "chunk_id": f"{doc_id}#{i}{tag}",
            "ordinal": i,
            "text": f"text {i} of {doc_id}{tag}",
            "headings": ["Intro", f"Part {i}"],
            "kind": "text",
            "n_tokens": 10 + i,
            "content_hash": f"{i:064d}",
        }
        for i in range(n)
    ]


def _start(store: SqlMetadataStore, snapshot_id: str, parent: str | None = None) -> None:
    store.start_snapshot(snapshot_id, CORPUS, "file:///src", parent, "mini", "embedded", None)


# -- migrations ------------------------------------------------------------------------------


def test_upgrade_from_empty_reaches_head(engine: Engine) -> None:
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == HEAD
    assert set(tables.metadata.tables) <= set(inspect(engine).get_table_names())


def test_upgrade_twice_is_a_noop(engine: Engine, db_url: str) -> None:
    upgrade(engine)
    store = SqlMetadataStore(engine)
    store.ensure_corpus(CORPUS)
    upgrade(engine)
    upgrade(db_url)  # by URL too: opens and disposes its own engine
    assert current_revision(engine) == HEAD
    with engine.connect() as conn:
        versions = conn.exec_driver_sql("SELECT version_num FROM alembic_version").fetchall()
        corpora = conn.execute(select(tables.corpora.c.name)).scalars().all()
    assert versions == [(HEAD,)]
    assert corpora == [CORPUS]


def test_migrated_schema_matches_tables(engine: Engine) -> None:
    upgrade(engine)
    insp = inspect(engine)
    assert set(insp.get_table_names()) == set(tables.metadata.tables) | {"alembic_version"}
    for name, table in tables.metadata.tables.items():
        assert [c["name"] for c in insp.get_columns(name)] == list(table.c.keys()), name
        pk = insp.get_pk_constraint(name)
        assert pk["constrained_columns"] == [c.name for c in table.primary_key.columns], name
        indexes = {i["name"] for i in insp.get_indexes(name) if not i.get("duplicates_constraint")}
        assert indexes == {i.name for i in table.indexes}
        uniques = {u["name"] for u in insp.get_unique_constraints(name)}
        assert uniques == {
            c.name for c in table.constraints if c.__class__.__name__ == "UniqueConstraint"
        }
        fks = {(fk["name"], fk["referred_table"]) for fk in insp.get_foreign_keys(name)}
        assert fks == {(fk.name, fk.referred_table.name) for fk in table.foreign_key_constraints}
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, tables.metadata) == []


def test_downgrade_to_base_and_back(engine: Engine) -> None:
    upgrade(engine)
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == HEAD


def test_concurrent_upgrades_all_succeed(db_url: str) -> None:
    errors: list[BaseException] = []

    def migrate() -> None:
        try:
            upgrade(db_url)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    eng = make_engine(db_url)
    try:
        assert current_revision(eng) == HEAD
    finally:
        eng.dispose()


def test_failed_migration_transaction_rolls_back_ddl(engine: Engine) -> None:
    upgrade(engine)
    with pytest.raises(RuntimeError, match="boom"), migration_connection(engine) as conn:
        conn.exec_driver_sql("CREATE TABLE probe_rollback (x INTEGER)")
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'zzzz'")
        raise RuntimeError("boom")
    assert "probe_rollback" not in inspect(engine).get_table_names()
    assert current_revision(engine) == HEAD
    if engine.dialect.name == "sqlite":  # the migration connection restored its settings
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_alembic_command_line_path(tmp_path: Path) -> None:
    """Without a connection in the config, env.py opens its own from sqlalchemy.url."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    cfg = alembic_config()
    cfg.set_main_option("sqlalchemy.url", url)
    command.upgrade(cfg, "head")
    eng = make_engine(url)
    try:
        assert current_revision(eng) == HEAD
    finally:
        eng.dispose()


def test_make_engine_sqlite_settings(tmp_path: Path) -> None:
    eng = make_engine(f"sqlite:///{tmp_path / 'deep' / 'er' / 'x.db'}")
    try:
        with eng.connect() as conn:
            pragma = {
                p: conn.exec_driver_sql(f"PRAGMA {p}").scalar()
                for p in ("journal_mode", "foreign_keys", "busy_timeout")
            }
        assert pragma == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 30000}
        assert (tmp_path / "deep" / "er").is_dir()
    finally:
        eng.dispose()


def test_utcnow_is_aware_utc() -> None:
    now = utcnow()
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("record", "table"),
    [
        (SnapshotRecord, tables.snapshots),
        (DocumentRecord, tables.documents),
        (ChunkRecord, tables.chunks),
        (SnapshotDocumentRecord, tables.snapshot_documents),
        (QuarantineEntry, tables.quarantine),
    ],
)
def test_records_have_exactly_the_table_columns(record: type, table: Any) -> None:
    assert [f.name for f in dataclasses.fields(record)] == list(table.c.keys())


def test_records_are_frozen(store: SqlMetadataStore) -> None:
    _start(store, "s1")
    snap = store.get_snapshot("s1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.status = "complete"  # type: ignore[misc]


# -- corpora and snapshots -------------------------------------------------------------------


def test_store_satisfies_protocol(store: SqlMetadataStore) -> None:
    assert isinstance(store, MetadataStore)


def test_from_url_migrates(db_url: str) -> None:
    store = SqlMetadataStore.from_url(db_url)
    try:
        assert current_revision(store.engine) == HEAD
        store.ensure_corpus(CORPUS)
    finally:
        store.engine.dispose()


def test_ensure_corpus_is_idempotent(store: SqlMetadataStore) -> None:
    store.ensure_corpus(CORPUS)
    store.ensure_corpus(CORPUS)
    with store.engine.connect() as conn:
        assert conn.execute(select(tables.corpora.c.name)).scalars().all() == [CORPUS]


def test_snapshot_lifecycle(store: SqlMetadataStore) -> None:
    assert store.latest_snapshot(CORPUS) is None
    _start(store, "s1")
    snap = store.get_snapshot("s1")
    assert snap is not None
    assert snap.status == "running" and snap.corpus == CORPUS
    assert snap.created_at.utcoffset() == timedelta(0)
    assert store.latest_snapshot(CORPUS) is None
    assert store.latest_snapshot(CORPUS, status=None).snapshot_id == "s1"

    counts = {"added": 3, "updated": 1, "removed": 2, "n_documents": 4, "n_chunks": 40}
    store.finish_snapshot("s1", status="complete", counts=counts, manifest_uri="s3://b/m.json")
    snap = store.get_snapshot("s1")
    assert {k: getattr(snap, k) for k in counts} == counts
    assert snap.unchanged == 0 and snap.manifest_uri == "s3://b/m.json"
    assert snap.finished_at >= snap.created_at

    _start(store, "s2", parent="s1")
    store.finish_snapshot("s2", status="failed", counts={}, manifest_uri=None)
    assert store.latest_snapshot(CORPUS).snapshot_id == "s1"
    assert store.latest_snapshot(CORPUS, status="failed").snapshot_id == "s2"
    assert [s.snapshot_id for s in store.list_snapshots(CORPUS)] == ["s2", "s1"]
    assert store.list_snapshots("other") == []
    assert store.get_snapshot("nope") is None


def test_finish_snapshot_rejects_bad_input(store: SqlMetadataStore) -> None:
    with pytest.raises(KeyError):
        store.finish_snapshot("missing", status="complete", counts={}, manifest_uri=None)
    _start(store, "s1")
    with pytest.raises(ValueError, match="status"):
        store.finish_snapshot("s1", status="done", counts={}, manifest_uri=None)
    with pytest.raises(ValueError, match="counts"):
        store.finish_snapshot("s1", status="complete", counts={"bogus": 1}, manifest_uri=None)


def test_start_snapshot_twice_resets_it(store: SqlMetadataStore) -> None:
    _start(store, "s1")
    store.record_snapshot_documents("s1", [{"doc_id": "a.md", "change": "added"}])
    store.record_quarantine(CORPUS, "s1", [QuarantineRecord("u", "bad.bin", "binary_content", "")])
    store.finish_snapshot("s1", status="failed", counts={"added": 1}, manifest_uri="m")
    first = store.get_snapshot("s1")

    _start(store, "s1")
    again = store.get_snapshot("s1")
    assert again.status == "running" and again.added == 0
    assert again.finished_at is None and again.manifest_uri is None
    assert again.created_at == first.created_at
    assert store.get_snapshot_documents("s1") == []
    assert store.list_quarantine(CORPUS, "s1") == []
    assert len(store.list_snapshots(CORPUS)) == 1


# -- documents and chunks --------------------------------------------------------------------


def test_upsert_document_inserts_and_replaces_chunks(store: SqlMetadataStore) -> None:
    store.upsert_document(CORPUS, _doc("a.md"), _chunks("a.md", 3))
    store.upsert_document(CORPUS, _doc("b.md"), _chunks("b.md", 2))
    docs = store.get_documents(CORPUS)
    assert set(docs) == {"a.md", "b.md"}
    assert docs["a.md"].n_chunks == 3
    assert docs["a.md"].doc_metadata == {"author": "ana", "tags": ["a", "b"]}
    assert docs["a.md"].updated_at.utcoffset() == timedelta(0)
    assert store.count_documents(CORPUS) == 2 and store.count_chunks(CORPUS) == 5

    store.upsert_document(
        CORPUS,
        _doc("a.md", "d" * 64, version=2, last_changed_snapshot_id="s2"),
        _chunks("a.md", 2, "v2"),
    )
    docs = store.get_documents(CORPUS)
    assert docs["a.md"].version == 2 and docs["a.md"].content_hash == "d" * 64
    assert docs["a.md"].last_changed_snapshot_id == "s2" and docs["a.md"].n_chunks == 2
    chunks = store.get_chunks(CORPUS, "a.md")
    assert [c.chunk_id for c in chunks] == ["a.md#0v2", "a.md#1v2"]
    assert chunks[1].headings == ("Intro", "Part 1")
    assert store.count_chunks(CORPUS) == 4
    assert [c.doc_id for c in store.get_chunks(CORPUS)] == ["a.md", "a.md", "b.md", "b.md"]
    assert store.get_documents("other") == {} and store.count_chunks("other") == 0


def test_upsert_document_validates_rows(store: SqlMetadataStore) -> None:
    with pytest.raises(ValueError, match="unknown documents columns"):
        store.upsert_document(CORPUS, {**_doc("a.md"), "colour": "red"}, [])
    with pytest.raises(ValueError, match="doc_id"):
        store.upsert_document(CORPUS, _doc("a.md"), [{**_chunks("a.md", 1)[0], "doc_id": "b.md"}])
    assert store.count_documents(CORPUS) == 0


def test_upsert_document_is_atomic(store: SqlMetadataStore) -> None:
    store.upsert_document(CORPUS, _doc("a.md"), _chunks("a.md", 2))
    bad = _chunks("a.md", 2, "new")
    bad[1]["chunk_id"] = bad[0]["chunk_id"]  # duplicate primary key -> the insert fails
    with pytest.raises(Exception):  # noqa: B017 - IntegrityError differs per driver
        store.upsert_document(CORPUS, _doc("a.md", version=9), bad)
    assert store.get_documents(CORPUS)["a.md"].version == 1
    assert [c.chunk_id for c in store.get_chunks(CORPUS)] == ["a.md#0", "a.md#1"]


def test_delete_documents_removes_chunks(store: SqlMetadataStore) -> None:
    for doc_id in ("a.md", "b.md", "c.md"):
        store.upsert_document(CORPUS, _doc(doc_id), _chunks(doc_id, 2))
    store.upsert_document("other", _doc("a.md"), _chunks("a.md", 1))
    assert store.delete_documents(CORPUS, ["a.md", "c.md", "zzz.md"]) == 2
    assert set(store.get_documents(CORPUS)) == {"b.md"}
    assert {c.doc_id for c in store.get_chunks(CORPUS)} == {"b.md"}
    assert store.count_documents("other") == 1 and store.count_chunks("other") == 1
    assert store.delete_documents(CORPUS, []) == 0


def test_get_chunk_texts_batches_large_lists(store: SqlMetadataStore) -> None:
    store.upsert_document(CORPUS, _doc("big.md"), _chunks("big.md", 1203))
    ids = [f"big.md#{i}" for i in range(1203)]
    texts = store.get_chunk_texts(CORPUS, [*ids, "missing"])
    assert len(texts) == 1203
    assert texts["big.md#1202"] == "text 1202 of big.md"
    assert store.get_chunk_texts("other", ids[:3]) == {}


# -- snapshot change log and quarantine ------------------------------------------------------


def test_record_snapshot_documents_upserts(store: SqlMetadataStore) -> None:
    _start(store, "s1")
    rows = [
        {"doc_id": "a.md", "change": "added", "content_hash": "h1", "version": 1},
        {"doc_id": "b.md", "change": "removed", "content_hash": None, "version": None},
    ]
    store.record_snapshot_documents("s1", rows)
    store.record_snapshot_documents("s1", [{**rows[0], "change": "updated", "version": 2}])
    got = store.get_snapshot_documents("s1")
    assert [(r.doc_id, r.change, r.version) for r in got] == [
        ("a.md", "updated", 2),
        ("b.md", "removed", None),
    ]


def test_quarantine_records_and_listing(store: SqlMetadataStore) -> None:
    assert store.list_quarantine(CORPUS) == []
    _start(store, "s1")
    store.record_quarantine(
        CORPUS,
        "s1",
        [
            QuarantineRecord("file:///x/empty.md", "empty.md", QuarantineReason.EMPTY, "0 bytes"),
            QuarantineRecord("file:///x/z.pdf", "z.pdf", QuarantineReason.ENCRYPTED, "", "h" * 64),
        ],
    )
    store.finish_snapshot("s1", status="complete", counts={"quarantined": 2}, manifest_uri=None)
    _start(store, "s2", parent="s1")
    records = [QuarantineRecord("file:///x/big.txt", "big.txt", QuarantineReason.TOO_LARGE, "30MB")]
    store.record_quarantine(CORPUS, "s2", records)
    store.record_quarantine(CORPUS, "s2", records)  # retried: still one row

    latest = store.list_quarantine(CORPUS)
    assert [(q.rel_path, q.reason, q.snapshot_id) for q in latest] == [
        ("big.txt", "too_large", "s2")
    ]
    s1 = store.list_quarantine(CORPUS, "s1")
    assert [q.rel_path for q in s1] == ["empty.md", "z.pdf"]
    assert s1[0].reason == "empty" and s1[1].content_hash == "h" * 64
    assert s1[0].created_at.utcoffset() == timedelta(0)

    updated = [QuarantineRecord("file:///x/big.txt", "big.txt", QuarantineReason.CORRUPT, "bad")]
    store.record_quarantine(CORPUS, "s2", updated)
    assert [(q.reason, q.detail) for q in store.list_quarantine(CORPUS)] == [("corrupt", "bad")]
    assert store.list_quarantine("other") == []


# -- embedding cache -------------------------------------------------------------------------


def test_embedding_cache_round_trip_is_exact(store: SqlMetadataStore) -> None:
    rng = np.random.default_rng(0)
    vectors = {f"{i:064x}": rng.standard_normal(384).astype(np.float32) for i in range(1100)}
    vectors["tiny"] = np.array([np.float32(1e-38), np.float32(-0.0), np.float32(3.4e38)])
    store.put_cached_embeddings("mini", vectors)
    got = store.get_cached_embeddings("mini", [*vectors, "missing"])
    assert set(got) == set(vectors)
    for key, vec in vectors.items():
        assert got[key].dtype == np.float32 and got[key].shape == vec.shape
        assert np.array_equal(got[key].view(np.uint32), vec.view(np.uint32)), key
    assert store.get_cached_embeddings("other-model", list(vectors)[:5]) == {}


def test_embedding_cache_ignores_duplicates_and_converts(store: SqlMetadataStore) -> None:
    first = np.arange(4, dtype=np.float32)
    store.put_cached_embeddings("mini", {"h": first})
    store.put_cached_embeddings("mini", {"h": first + 100, "g": np.arange(3, dtype=np.float64)})
    got = store.get_cached_embeddings("mini", ["h", "g", "h"])
    assert np.array_equal(got["h"], first)
    assert got["g"].dtype == np.float32 and got["g"].tolist() == [0.0, 1.0, 2.0]
    got["g"][0] = 5.0  # returned arrays are writable copies
    with pytest.raises(ValueError, match="1-D"):
        store.put_cached_embeddings("mini", {"m": np.zeros((2, 2), dtype=np.float32)})
    store.put_cached_embeddings("mini", {})
