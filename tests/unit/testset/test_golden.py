"""GoldenSetStore and add_golden_set on SQLite and (when configured) PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import Engine

from ragtrail.records import QAItem
from ragtrail.storage.corpus_store import COMPLETE
from ragtrail.storage.db import make_engine, upgrade
from ragtrail.storage.metadata_store import SqlMetadataStore
from ragtrail.testset.golden import (
    DuplicateContentError,
    GoldenSetError,
    GoldenSetStore,
    add_golden_set,
    version_for,
)

CORPUS = "hb"
ROWS = [
    {
        "qid": "g1",
        "question": "How many leave days?",
        "label": "fact_single",
        "answer": "27",
        "ground_doc_ids": ["people/leave.md"],
    },
    {
        "qid": "g2",
        "question": "Summarise the on-call rota.",
        "label": "summary",
        "answer": "weekly",
        "ground_doc_ids": ["ops/oncall.md", "people/leave.md"],
    },
    {
        "qid": "g3",
        "question": "Who approves the moon budget?",
        "label": "unanswerable",
        "answer": "",
        "ground_doc_ids": [],
        "ground_chunk_ids": ["ops/oncall.md#2"],
    },
]


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """A migrated database on :func:`tests.unit.conftest.db_url` (SQLite and PostgreSQL)."""
    eng = make_engine(db_url)
    upgrade(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def meta(engine: Engine) -> SqlMetadataStore:
    """Corpus ``hb`` whose latest complete snapshot holds two documents (a third was removed)."""
    store = SqlMetadataStore(engine)
    store.start_snapshot("s1", CORPUS, "/src", None, "m", "embedded", None)
    store.record_snapshot_documents(
        "s1",
        [
            {"doc_id": "people/leave.md", "change": "added", "content_hash": "a", "version": 1},
            {"doc_id": "ops/oncall.md", "change": "added", "content_hash": "b", "version": 1},
            {"doc_id": "old/gone.md", "change": "removed", "content_hash": None, "version": None},
        ],
    )
    store.finish_snapshot("s1", status=COMPLETE, counts={}, manifest_uri=None)
    return store


@pytest.fixture
def store(engine: Engine) -> GoldenSetStore:
    return GoldenSetStore(engine)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path: Path, rows: list[dict]) -> Path:
    flat = [
        {
            **r,
            "ground_doc_ids": ";".join(r["ground_doc_ids"]),
            "ground_chunk_ids": ";".join(r.get("ground_chunk_ids", [])),
        }
        for r in rows
    ]
    pd.DataFrame(flat).to_csv(path, index=False)
    return path


def test_version_is_the_hash_of_the_canonical_items() -> None:
    item = QAItem(qid="a", question="Q?", label="summary", answer="", ground_doc_ids=("d.md",))
    canonical = (
        '[{"answer":"","ground_chunk_ids":[],"ground_doc_ids":["d.md"],'
        '"label":"summary","qid":"a","question":"Q?"}]'
    )
    assert version_for([item]) == "gs-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def test_add_then_readd_is_a_no_op(store, meta, tmp_path) -> None:
    path = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    first = add_golden_set(store, meta, path, corpus=CORPUS, name="team-qa")
    assert first.created is True
    v = first.version
    assert (v.corpus, v.name, v.n_items, v.source) == (CORPUS, "team-qa", 3, str(path))
    assert v.version.startswith("gs-") and len(v.version) == 15
    assert v.questions_per_label == {
        "fact_single": 1,
        "summary": 1,
        "reasoning": 0,
        "unanswerable": 1,
    }
    again = add_golden_set(store, meta, path, corpus=CORPUS, name="team-qa")
    assert again.created is False and again.version.version == v.version
    assert again.version.created_at == v.created_at
    assert [x.version for x in store.versions(CORPUS)] == [v.version]
    items = store.items(v.version)
    assert [i.qid for i in items] == ["g1", "g2", "g3"]  # file order
    assert items[1].ground_doc_ids == ("ops/oncall.md", "people/leave.md")
    assert items[2].ground_chunk_ids == ("ops/oncall.md#2",)
    json.dumps(v.as_dict(), allow_nan=False)  # strict JSON


def test_changed_content_is_a_new_version_and_old_ones_stay(store, meta, tmp_path) -> None:
    path = tmp_path / "qa.jsonl"
    old = add_golden_set(store, meta, write_jsonl(path, ROWS), corpus=CORPUS, name="team-qa")
    changed = [{**ROWS[0], "question": "How many leave days per year?"}, *ROWS[1:]]
    new = add_golden_set(store, meta, write_jsonl(path, changed), corpus=CORPUS, name="team-qa")
    assert new.created is True and new.version.version != old.version.version
    assert [v.version for v in store.versions(CORPUS, "team-qa")] == [
        new.version.version,
        old.version.version,
    ]
    assert [v.version for v in store.latest(CORPUS)] == [new.version.version]
    assert store.items(old.version.version)[0].question == "How many leave days?"
    assert store.items(new.version.version)[0].question == "How many leave days per year?"
    # Reverting the file makes the old version the latest again, without a copy.
    back = add_golden_set(store, meta, write_jsonl(path, ROWS), corpus=CORPUS, name="team-qa")
    assert back.created is False and back.version.version == old.version.version
    assert [v.version for v in store.latest(CORPUS)] == [old.version.version]
    assert len(store.versions(CORPUS)) == 2


def test_csv_and_jsonl_with_the_same_content_are_one_version(store, meta, tmp_path) -> None:
    jsonl = add_golden_set(
        store, meta, write_jsonl(tmp_path / "qa.jsonl", ROWS), corpus=CORPUS, name="team-qa"
    )
    csv = add_golden_set(
        store, meta, write_csv(tmp_path / "qa.csv", ROWS), corpus=CORPUS, name="team-qa"
    )
    assert csv.created is False
    assert csv.version.version == jsonl.version.version


def test_unknown_ground_documents_are_listed_with_row_numbers(store, meta, tmp_path) -> None:
    rows = [
        ROWS[0],
        {**ROWS[1], "ground_doc_ids": ["ops/oncall.md", "nope.md"]},
        {**ROWS[2], "ground_chunk_ids": ["old/gone.md#0", "no-ordinal"]},
    ]
    with pytest.raises(GoldenSetError) as err:
        add_golden_set(
            store, meta, write_jsonl(tmp_path / "qa.jsonl", rows), corpus=CORPUS, name="x"
        )
    message = str(err.value)
    assert "3 ground references unknown to corpus 'hb'" in message
    assert "row 2: unknown document 'nope.md'" in message
    assert "row 3: unknown document 'old/gone.md' (of chunk 'old/gone.md#0')" in message
    assert "row 3: chunk id 'no-ordinal' is not of the form" in message
    assert store.versions(CORPUS) == []  # nothing stored


def test_bad_rows_are_all_reported_with_row_numbers(store, meta, tmp_path) -> None:
    rows = [
        ROWS[0],
        {**ROWS[1], "label": "trivia"},
        {**ROWS[2], "question": "  "},
        {**ROWS[0], "qid": "g1", "question": "Another?"},
    ]
    with pytest.raises(GoldenSetError) as err:
        add_golden_set(
            store, meta, write_jsonl(tmp_path / "qa.jsonl", rows), corpus=CORPUS, name="x"
        )
    message = str(err.value)
    assert "3 invalid rows" in message
    assert "row 2: label 'trivia'" in message
    assert "row 3: empty question" in message
    assert "row 4: duplicate qid 'g1'" in message
    assert store.versions(CORPUS) == []


def test_a_corpus_without_snapshot_is_a_clear_error(store, meta, tmp_path) -> None:
    path = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    with pytest.raises(GoldenSetError, match="corpus 'other' has no complete snapshot"):
        add_golden_set(store, meta, path, corpus="other", name="team-qa")


@pytest.mark.parametrize("name", ["Team", "-x", "", "a b", "x" * 65, "generated"])
def test_invalid_and_reserved_names_are_refused(store, meta, tmp_path, name) -> None:
    path = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    with pytest.raises(GoldenSetError, match=re.escape(repr(name))):
        add_golden_set(store, meta, path, corpus=CORPUS, name=name)


def test_the_same_content_under_a_second_name_is_refused(store, meta, tmp_path) -> None:
    path = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    add_golden_set(store, meta, path, corpus=CORPUS, name="first")
    with pytest.raises(
        DuplicateContentError, match=r"already registered .* as golden set 'first'"
    ) as err:
        add_golden_set(store, meta, path, corpus=CORPUS, name="second")
    assert err.value.existing == "first"
    assert [v.name for v in store.versions(CORPUS)] == ["first"]


def test_latest_get_and_listing_across_names(store, meta, tmp_path) -> None:
    a = add_golden_set(
        store, meta, write_jsonl(tmp_path / "a.jsonl", ROWS[:1]), corpus=CORPUS, name="b-set"
    ).version
    b = add_golden_set(
        store, meta, write_jsonl(tmp_path / "b.jsonl", ROWS[1:]), corpus=CORPUS, name="a-set"
    ).version
    assert [(v.name, v.version) for v in store.latest(CORPUS)] == [
        ("a-set", b.version),
        ("b-set", a.version),
    ]
    assert [v.version for v in store.versions(CORPUS)] == [b.version, a.version]
    assert [v.version for v in store.versions(CORPUS, "b-set")] == [a.version]
    assert store.get(a.version) == a
    assert store.get(a.version, corpus="other") is None
    assert store.get("gs-000000000000") is None
    assert store.latest("other") == []
    with pytest.raises(KeyError):
        store.items("gs-000000000000")
