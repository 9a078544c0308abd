"""Ingest reliability on the shipped sample corpus with the real embedded backends.

Twice -> identical; one edit -> exactly one re-embedded document; one deletion -> gone from index and
DB; a process killed mid-ingest -> its snapshot is abandoned and the rerun ends with the counts of a
clean run; malformed files -> quarantined with a reason while everything else is ingested.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragtrail.pipeline.ingest import ingest


@pytest.fixture
def corpus_dir(tmp_path, sample_corpus) -> Path:
    target = tmp_path / "corpus"
    shutil.copytree(sample_corpus, target)
    return target


def _index_state(rt, corpus: str) -> tuple[set[str], int]:
    index = rt.index(corpus)
    return index.document_ids(), index.count_chunks()


def test_ingest_twice_is_idempotent(make_runtime, corpus_dir):
    rt = make_runtime()
    first = ingest(rt, str(corpus_dir), "hb")
    assert first.added == first.documents >= 28
    assert first.updated == first.removed == 0
    assert first.chunks == rt.store.count_chunks("hb") > first.documents
    manifest = json.loads(Path(first.manifest_uri).read_text())
    assert {f["planned"] for f in manifest["files"]} == {"added"}
    assert len(manifest["files"]) == first.documents

    second = ingest(rt, str(corpus_dir), "hb")
    assert (second.added, second.updated, second.removed) == (0, 0, 0)
    assert second.unchanged == first.documents
    assert second.embedded == 0
    assert (second.documents, second.chunks) == (first.documents, first.chunks)
    doc_ids, n_chunks = _index_state(rt, "hb")
    assert doc_ids == set(rt.store.get_documents("hb"))
    assert n_chunks == first.chunks  # no duplicates in the index
    # An unchanged source makes no new snapshot: the second ingest reports on the first one.
    assert second.changed is False and second.snapshot == first.snapshot
    assert len(rt.store.list_snapshots("hb")) == 1


def test_the_same_files_at_another_path_are_the_same_corpus(make_runtime, corpus_dir, tmp_path):
    """Relative paths and bytes count, not where the source is mounted."""
    rt = make_runtime()
    first = ingest(rt, str(corpus_dir), "hb")
    moved = shutil.copytree(corpus_dir, tmp_path / "mounted-elsewhere")
    again = ingest(rt, str(moved), "hb")
    assert again.changed is False and again.snapshot == first.snapshot
    assert (again.added, again.updated, again.removed, again.embedded) == (0, 0, 0, 0)
    (moved / "engineering" / "code-review.md").write_text("# Code review\n\nNew rules.\n")
    edited = ingest(rt, str(moved), "hb")
    assert edited.changed is True and edited.changed_doc_ids == ["engineering/code-review.md"]


def test_one_changed_document_is_the_only_one_reembedded(make_runtime, corpus_dir):
    rt = make_runtime()
    first = ingest(rt, str(corpus_dir), "hb")
    target = sorted(corpus_dir.rglob("*.md"))[0]
    rel = target.relative_to(corpus_dir).as_posix()
    target.write_text(target.read_text() + "\n\nA new closing paragraph about badge renewal.\n")

    second = ingest(rt, str(corpus_dir), "hb")
    assert (second.added, second.updated, second.removed) == (0, 1, 0)
    assert second.changed_doc_ids == [rel]
    assert second.unchanged == first.documents - 1
    doc_chunks = rt.store.get_chunks("hb", rel)
    # Only the changed document's new chunk texts are embedded (unchanged chunks hit the cache).
    assert 1 <= second.embedded <= len(doc_chunks)
    assert rt.store.get_documents("hb")[rel].version == 2
    assert _index_state(rt, "hb")[1] == second.chunks


def test_deleted_document_leaves_index_and_db(make_runtime, corpus_dir):
    rt = make_runtime()
    first = ingest(rt, str(corpus_dir), "hb")
    victim = sorted(corpus_dir.rglob("*.html"))[0]
    rel = victim.relative_to(corpus_dir).as_posix()
    victim.unlink()

    second = ingest(rt, str(corpus_dir), "hb")
    assert second.removed == 1 and second.removed_doc_ids == [rel]
    assert second.documents == first.documents - 1
    assert rel not in rt.store.get_documents("hb")
    assert rt.store.get_chunks("hb", rel) == []
    doc_ids, n_chunks = _index_state(rt, "hb")
    assert rel not in doc_ids
    assert n_chunks == second.chunks
    hits = rt.index("hb").search_lexical(victim.stem.replace("-", " "), 50)
    assert all(hit.doc_id != rel for hit in hits)


def _grow_corpus(corpus_dir: Path, copies: int) -> None:
    """Make the corpus big enough that a kill lands mid-run: distinct copies of the Markdown files."""
    for source in sorted(corpus_dir.rglob("*.md")):
        for i in range(copies):
            copy = source.with_name(f"{source.stem}-copy{i}.md")
            copy.write_text(source.read_text() + f"\n\nCopy number {i} of {source.stem}.\n")


def _documents_in_db(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_killed_ingest_rerun_matches_a_clean_run(make_runtime, corpus_dir, tmp_path):
    _grow_corpus(corpus_dir, copies=4)
    home = tmp_path / "killed"
    env = {**os.environ, "RAGTRAIL_HOME": str(home)}
    cmd = [
        sys.executable,
        "-m",
        "ragtrail.cli",
        "ingest",
        str(corpus_dir),
        "--corpus",
        "hb",
        "--shard-size",
        "3",
        "--json",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while _documents_in_db(home / "ragtrail.db") < 6:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "ingest made no progress"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = _documents_in_db(home / "ragtrail.db")

    rerun = make_runtime(home=home)
    resumed = ingest(rerun, str(corpus_dir), "hb")
    clean_rt = make_runtime(home=tmp_path / "clean")
    clean = ingest(clean_rt, str(corpus_dir), "hb")

    assert 6 <= killed_at < clean.documents
    assert (resumed.documents, resumed.chunks) == (clean.documents, clean.chunks)
    # Nothing was ever published: the documents the killed run wrote count as added, never as
    # unchanged, so the rerun reports exactly what a clean run does.
    assert (resumed.added, resumed.unchanged) == (clean.added, 0)
    assert _index_state(rerun, "hb") == _index_state(clean_rt, "hb")
    snapshots = {s.status: s for s in rerun.store.list_snapshots("hb")}
    assert sorted(snapshots) == ["abandoned", "complete"]  # the killed one, visibly unfinished
    assert "is gone" in (snapshots["abandoned"].status_detail or "")


def test_malformed_files_are_quarantined_and_the_rest_ingested(make_runtime, corpus_dir):
    from tests.integration._malformed import write_malformed_files

    bad = corpus_dir / "zz-incoming"
    bad.mkdir()
    written = write_malformed_files(bad, duplicate_of=sorted(corpus_dir.rglob("*.md"))[0])
    rt = make_runtime(max_file_bytes=200_000)
    summary = ingest(rt, str(corpus_dir), "hb")
    rows = {r.rel_path: r for r in rt.store.list_quarantine("hb")}
    for name, reason in written.items():
        assert rows[f"zz-incoming/{name}"].reason == reason, name
        assert rows[f"zz-incoming/{name}"].detail
    assert summary.quarantined == len(written)
    assert summary.documents >= 28
    indexed = rt.index("hb").document_ids()
    assert not any(doc.startswith("zz-incoming/") for doc in indexed)


def test_cli_ingest_json_and_quarantine_listing(tmp_path, corpus_dir):
    (corpus_dir / "empty.md").write_text("")
    env = {**os.environ, "RAGTRAIL_HOME": str(tmp_path / "cli")}
    run = [sys.executable, "-m", "ragtrail.cli"]
    out = subprocess.run(
        [*run, "ingest", str(corpus_dir), "--corpus", "hb", "--json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    summary = json.loads(out.stdout)
    expected = {"added", "updated", "unchanged", "removed", "quarantined", "chunks", "snapshot"}
    assert expected <= summary.keys()
    assert summary["quarantined"] == 1
    listed = subprocess.run(
        [*run, "corpus", "quarantine", "--corpus", "hb", "--json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    rows = json.loads(listed.stdout)
    assert [(r["rel_path"], r["reason"]) for r in rows] == [("empty.md", "empty")]
    found = subprocess.run(
        [
            *run,
            "search",
            "travel per diem",
            "--corpus",
            "hb",
            "--text-weight",
            "0.5",
            "-k",
            "3",
            "--json",
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    hits = json.loads(found.stdout)
    assert [h["rank"] for h in hits] == [1, 2, 3]


def test_switching_the_embedding_backend_re_embeds_every_chunk(make_runtime, corpus_dir, tmp_path):
    """Vectors of two embedders never share an index: the first ingest after a switch makes a
    new snapshot and embeds every chunk again, without counting any document as changed."""
    from ragtrail.config import load_settings
    from ragtrail.runtime import Runtime

    home = tmp_path / "home"
    torch_rt = Runtime(load_settings(home=home, embedding_backend="torch"))
    try:
        first = ingest(torch_rt, str(corpus_dir), "hb")
    finally:
        torch_rt.close()
    rt = make_runtime(home=home)  # the default backend, with the session's embedder
    assert rt.embedder_identity != "builtin:all-MiniLM-L6-v2"
    switched = ingest(rt, str(corpus_dir), "hb")
    assert switched.changed and switched.snapshot != first.snapshot
    assert (switched.added, switched.updated, switched.removed) == (0, 0, 0)
    assert switched.unchanged == first.documents
    assert switched.embedded == first.chunks == rt.index("hb").count_chunks()
    assert rt.store.get_snapshot(switched.snapshot).embedding_model == rt.embedder_identity
    again = ingest(rt, str(corpus_dir), "hb")
    assert (again.changed, again.embedded) == (False, 0)
