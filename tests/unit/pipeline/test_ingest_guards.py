"""The ingest plan's guards without a model: mass removals, the corpus lock, abandoned snapshots,
the published baseline, and unreadable entries that keep their published version.

The corpus is seeded straight into the metadata store (a complete snapshot whose documents have
the raw hashes of the files on disk), and a stand-in index takes the plan's one call, so no
embedding model is loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragtrail.config import load_settings
from ragtrail.pipeline.ingest import (
    IngestLockedError,
    MassRemovalError,
    SnapshotOwner,
    plan_ingest,
    published_documents,
)
from ragtrail.records import QuarantineReason, sha256_bytes
from ragtrail.runtime import Runtime
from ragtrail.storage.corpus_store import ABANDONED, COMPLETE, RUNNING

CORPUS = "hb"


class StandInIndex:
    """What plan_ingest asks of the index: where the snapshot's writes go."""

    name = "stand-in"

    def begin_snapshot(self, snapshot_id: str, *, resume: bool = False) -> None:
        return None

    def close(self) -> None:
        return None


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = Runtime(load_settings(home=tmp_path / "home"))
    runtime._indices[CORPUS] = StandInIndex()  # type: ignore[assignment]
    yield runtime
    runtime.close()


def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _seed(rt: Runtime, folder: Path, snapshot_id: str = "s1") -> list[str]:
    """Publish every file of ``folder`` as the corpus's complete snapshot ``snapshot_id``."""
    store = rt.store
    store.start_snapshot(snapshot_id, CORPUS, str(folder), None, "m", "embedded", None)
    rows = []
    doc_ids = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    for doc_id in doc_ids:
        data = (folder / doc_id).read_bytes()
        content_hash = sha256_bytes(data + b"text")
        store.upsert_document(
            CORPUS,
            {
                "doc_id": doc_id,
                "uri": str(folder / doc_id),
                "format": "markdown",
                "title": doc_id,
                "content_hash": content_hash,
                "raw_hash": sha256_bytes(data),
                "version": 1,
                "size_bytes": len(data),
                "doc_metadata": {},
                "first_snapshot_id": snapshot_id,
                "last_changed_snapshot_id": snapshot_id,
            },
            [],
        )
        rows.append(
            {"doc_id": doc_id, "change": "added", "content_hash": content_hash, "version": 1}
        )
    store.record_snapshot_documents(snapshot_id, rows)
    store.finish_snapshot(snapshot_id, status=COMPLETE, counts={}, manifest_uri=None)
    return doc_ids


@pytest.fixture
def seeded(rt: Runtime, tmp_path: Path) -> Path:
    src = tmp_path / "src"
    _write(src, {f"doc{i}.md": f"# Doc {i}\n\nBody {i}." for i in range(4)})
    _seed(rt, src)
    return src


def _unchanged_state(rt: Runtime) -> tuple[object, ...]:
    store = rt.store
    return (
        store.list_snapshots(CORPUS),
        store.get_documents(CORPUS),
        store.get_snapshot_documents("s1"),
        store.list_quarantine(CORPUS),
    )


# -- mass removal -------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["empty", "hidden-only", "wrong-subfolder"])
def test_a_source_listing_nothing_is_refused_and_changes_nothing(
    rt: Runtime, seeded: Path, tmp_path: Path, layout: str
) -> None:
    source = tmp_path / layout
    source.mkdir()
    if layout == "hidden-only":
        _write(source, {".git/config": "x", ".DS_Store": "x", ".notes.md": "# hidden"})
    if layout == "wrong-subfolder":
        _write(source, {"other.md": "# Something else"})
    before = _unchanged_state(rt)
    with pytest.raises(MassRemovalError) as refused:
        plan_ingest(rt, str(source), CORPUS)
    message = str(refused.value)
    assert "\n" not in message
    n = 4
    assert f"would remove {n} of {n} documents (100%, every document it has)" in message
    assert "--allow-mass-removal" in message and "ingest.allow_mass_removal" in message
    assert "snapshot s1 stays live" in message
    assert _unchanged_state(rt) == before  # nothing written, nothing started
    assert not list((rt.settings.home / "artifacts").rglob("manifest*"))


def test_removing_more_than_the_share_is_refused_less_is_not(rt: Runtime, seeded: Path) -> None:
    for name in ("doc0.md", "doc1.md", "doc2.md"):
        (seeded / name).unlink()
    with pytest.raises(
        MassRemovalError, match=r"would remove 3 of 4 documents \(75%, more than 50%\)"
    ):
        plan_ingest(rt, str(seeded), CORPUS)
    _write(seeded, {"doc0.md": "# Doc 0\n\nBody 0."})  # 2 of 4 removed: 50% is allowed
    plan = plan_ingest(rt, str(seeded), CORPUS)
    assert plan.counts["removed"] == 2 and plan.changed


def test_the_share_is_a_setting(tmp_path: Path, seeded: Path) -> None:
    (seeded / "doc0.md").unlink()
    strict = Runtime(load_settings(home=tmp_path / "home", ingest={"max_removal_share": 0.2}))
    strict._indices[CORPUS] = StandInIndex()  # type: ignore[assignment]
    try:
        with pytest.raises(MassRemovalError, match=r"1 of 4 documents \(25%, more than 20%\)"):
            plan_ingest(strict, str(seeded), CORPUS)
    finally:
        strict.close()


def test_removing_everything_is_refused_even_with_a_share_of_one(
    tmp_path: Path, seeded: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    lax = Runtime(load_settings(home=tmp_path / "home", ingest={"max_removal_share": 1.0}))
    try:
        with pytest.raises(MassRemovalError, match="every document it has"):
            plan_ingest(lax, str(empty), CORPUS)
    finally:
        lax.close()


def test_explicit_permission_lets_a_mass_removal_through(
    rt: Runtime, seeded: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    plan = plan_ingest(rt, str(empty), CORPUS, allow_mass_removal=True)
    assert plan.counts == {"removed": 4} and plan.changed and plan.shards == []
    by_setting = Runtime(load_settings(home=rt.settings.home, ingest={"allow_mass_removal": True}))
    by_setting._indices[CORPUS] = StandInIndex()  # type: ignore[assignment]
    try:
        # the first plan's snapshot is running with this live process as owner
        with pytest.raises(IngestLockedError):
            plan_ingest(by_setting, str(empty), CORPUS)
        rt.store.close_snapshot(plan.snapshot_id, status="failed", detail="test")
        assert plan_ingest(by_setting, str(empty), CORPUS).counts == {"removed": 4}
    finally:
        by_setting.close()


def test_the_first_ingest_of_an_empty_corpus_is_no_removal(rt: Runtime, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    plan = plan_ingest(rt, str(empty), CORPUS)
    assert plan.changed and plan.counts == {"removed": 0}


def test_an_s3_prefix_listing_nothing_is_refused(
    rt: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moto = pytest.importorskip("moto")
    import boto3

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    files = {f"doc{i}.md": f"# Doc {i}" for i in range(3)}
    mirror = tmp_path / "mirror"
    _write(mirror, files)
    _seed(rt, mirror)  # published from a local mirror with the same bytes
    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="docs")
        for name, text in files.items():
            client.put_object(Bucket="docs", Key=f"handbook/{name}", Body=text.encode())
        with pytest.raises(MassRemovalError, match="would remove 3 of 3 documents"):
            plan_ingest(rt, "s3://docs/handbok", CORPUS)  # a typo: the prefix lists nothing
        plan = plan_ingest(rt, "s3://docs/handbook", CORPUS)
    assert plan.counts == {"unchanged": 3, "removed": 0}


# -- the corpus lock ------------------------------------------------------------------------------


def test_a_live_ingest_blocks_the_next_plan_before_it_lists(
    rt: Runtime, seeded: Path, tmp_path: Path
) -> None:
    me = SnapshotOwner.this_process()
    _write(seeded, {"new.md": "# New"})
    first = plan_ingest(rt, str(seeded), CORPUS, owner=me)
    with pytest.raises(IngestLockedError, match=r"already running \(pid \d+ on host"):
        plan_ingest(rt, str(tmp_path / "does-not-even-exist"), CORPUS)
    assert rt.store.get_snapshot(first.snapshot_id).status == RUNNING  # type: ignore[union-attr]


def test_a_dead_owners_snapshot_is_abandoned_by_the_next_plan(rt: Runtime, seeded: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    me = SnapshotOwner.this_process()
    dead = SnapshotOwner("killed", me.host, proc.pid)
    _write(seeded, {"new.md": "# New"})
    killed = plan_ingest(rt, str(seeded), CORPUS, owner=dead)
    again = plan_ingest(rt, str(seeded), CORPUS, owner=me)
    old = rt.store.get_snapshot(killed.snapshot_id)
    assert old is not None and old.status == ABANDONED and "is gone" in (old.status_detail or "")
    assert again.snapshot_id != killed.snapshot_id
    assert again.counts == {"unchanged": 4, "added": 1, "removed": 0}


# -- counts relative to the published snapshot ----------------------------------------------------


def test_documents_of_a_never_published_snapshot_are_not_published(
    rt: Runtime, seeded: Path
) -> None:
    """What a killed ingest wrote to the documents table (an added and an updated document)
    counts as added and updated again, never as unchanged."""
    store = rt.store
    store.start_snapshot("killed", CORPUS, str(seeded), "s1", "m", "embedded", None)
    store.close_snapshot("killed", status=ABANDONED, detail="killed")
    _write(seeded, {"new.md": "# New", "doc0.md": "# Doc 0, edited"})
    for doc_id, version, first in (("new.md", 1, "killed"), ("doc0.md", 2, "s1")):
        data = (seeded / doc_id).read_bytes()
        store.upsert_document(
            CORPUS,
            {
                "doc_id": doc_id,
                "uri": str(seeded / doc_id),
                "format": "markdown",
                "title": doc_id,
                "content_hash": sha256_bytes(data + b"text"),
                "raw_hash": sha256_bytes(data),
                "version": version,
                "size_bytes": len(data),
                "doc_metadata": {},
                "first_snapshot_id": first,
                "last_changed_snapshot_id": "killed",
            },
            [],
        )
    published = published_documents(store, CORPUS)
    assert set(published) == {f"doc{i}.md" for i in range(4)}
    assert published["doc0.md"].raw_hash is None and published["doc0.md"].version == 1
    assert published["doc1.md"].raw_hash is not None
    plan = plan_ingest(rt, str(seeded), CORPUS)
    assert plan.counts == {"added": 1, "updated": 1, "unchanged": 3, "removed": 0}
    assert plan.shards == [["doc0.md", "new.md"]]


# -- entries that cannot be read ------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symlinks")
def test_unreadable_entries_are_quarantined_and_keep_their_published_version(
    rt: Runtime, seeded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragtrail.ingest import sources

    real_read = sources._read_file

    def read_file(path: Path) -> bytes:
        if path.name == "doc1.md":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path)

    monkeypatch.setattr(sources, "_read_file", read_file)
    (seeded / "loop.md").symlink_to(seeded / "loop.md")
    (seeded / "dangling.md").symlink_to(seeded / "gone.md")
    os.mkfifo(seeded / "pipe.md")
    plan = plan_ingest(rt, str(seeded), CORPUS)
    quarantine = {q.rel_path: q.reason for q in rt.store.list_quarantine(CORPUS, plan.snapshot_id)}
    assert quarantine == {
        "doc1.md": QuarantineReason.UNREADABLE,
        "loop.md": QuarantineReason.LINK_LOOP,
        "dangling.md": QuarantineReason.BROKEN_LINK,
        "pipe.md": QuarantineReason.SPECIAL_FILE,
    }
    assert plan.counts["removed"] == 0  # doc1.md keeps its published version
    rows = {r.doc_id: r.change for r in rt.store.get_snapshot_documents(plan.snapshot_id)}
    assert rows == {f"doc{i}.md": "unchanged" for i in range(4)}
