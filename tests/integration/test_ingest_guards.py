"""What an ingest refuses, end to end with the real embedded backends (issue 22).

A small copy of the sample corpus is ingested for real; then the hostile and careless cases: an
empty or wrong source (mass removal), a source full of entries that cannot be read, overlong
content, an ingest killed between its shards and its finalize, and two ingests at once.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragtrail.index.base import fetch_candidates
from ragtrail.index.fusion import fuse
from ragtrail.pipeline.corpus_checks import check_corpus_quality
from ragtrail.pipeline.ingest import IngestLockedError, MassRemovalError, ingest
from ragtrail.pipeline.nightly import run_nightly
from ragtrail.records import QuarantineReason

REPO = Path(__file__).resolve().parents[2]
CORPUS = "hb"
SMALL = [
    "engineering/code-review.md",
    "engineering/on-call.md",
    "engineering/open-source.md",
    "people/leave-policy.md",
    "people/onboarding.md",
]


@pytest.fixture
def corpus_dir(tmp_path: Path, sample_corpus: Path) -> Path:
    target = tmp_path / "corpus"
    for rel in SMALL:
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sample_corpus / rel, target / rel)
    return target


def _env(home: Path) -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "include"), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "RAGTRAIL_HOME": str(home), "PYTHONPATH": path}


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragtrail.cli", *args],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _live_state(rt, corpus: str = CORPUS) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
    """Everything a refused ingest must leave as it was: snapshots, documents, chunks, index."""
    index = rt.index(corpus)
    vector = rt.embedder.encode(["who approves leave"])[0]
    hits = fuse(fetch_candidates(index, "who approves leave", vector, 20), 0.5, 5)
    return (
        rt.store.list_snapshots(corpus),
        rt.store.get_documents(corpus),
        [c.chunk_id for c in rt.store.get_chunks(corpus)],
        index.document_ids(),
        index.count_chunks(),
        [(h.chunk_id, round(h.score, 6)) for h in hits],
    )


# -- mass removal -----------------------------------------------------------------------------


def test_an_empty_source_changes_nothing_until_allowed(make_runtime, corpus_dir, tmp_path):
    rt = make_runtime()
    first = ingest(rt, str(corpus_dir), CORPUS)
    assert first.documents == len(SMALL)
    before = _live_state(rt)
    empty = tmp_path / "unmounted"
    empty.mkdir()
    with pytest.raises(MassRemovalError, match=f"would remove {len(SMALL)} of {len(SMALL)}"):
        ingest(rt, str(empty), CORPUS)
    assert _live_state(rt) == before  # the live snapshot and its index answer as before
    assert rt.store.latest_snapshot(CORPUS).snapshot_id == first.snapshot  # type: ignore[union-attr]

    emptied = ingest(rt, str(empty), CORPUS, allow_mass_removal=True)
    assert (emptied.removed, emptied.documents, emptied.chunks) == (len(SMALL), 0, 0)
    assert rt.index(CORPUS).document_ids() == set()


def test_cli_refusals_are_one_line_with_exit_code_2(corpus_dir, tmp_path):
    home = tmp_path / "cli"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _cli(home, "ingest", str(corpus_dir), "--corpus", CORPUS).returncode == 0

    refused = _cli(home, "ingest", str(empty), "--corpus", CORPUS, "--json")
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == ""
    assert "Traceback" not in refused.stderr
    [line] = _error_lines(refused.stderr)
    n = len(SMALL)
    assert f"would remove {n} of {n} documents (100%, every document it has)" in line
    assert "--allow-mass-removal" in line

    nightly = _cli(home, "nightly", "--source", str(empty), "--corpus", CORPUS, "--no-generate")
    assert nightly.returncode == 2, nightly.stderr[-2000:]
    assert "Traceback" not in nightly.stderr
    assert [line] == _error_lines(nightly.stderr)  # the nightly refuses the same way

    listed = _cli(home, "corpus", "snapshots", "--corpus", CORPUS, "--json")
    assert [s["status"] for s in json.loads(listed.stdout)] == ["complete"]

    allowed = _cli(home, "ingest", str(empty), "--corpus", CORPUS, "--allow-mass-removal", "--json")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["removed"] == n


def test_the_nightly_passes_the_guard_through(make_runtime, corpus_dir, tmp_path):
    rt = make_runtime()
    ingest(rt, str(corpus_dir), CORPUS)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MassRemovalError):
        run_nightly(rt, source=str(empty), corpus=CORPUS, generate=False, log=lambda _: None)
    assert len(rt.store.list_snapshots(CORPUS)) == 1


# -- entries that cannot be read --------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symlinks")
def test_a_hostile_tree_is_ingested_with_a_reason_for_every_skipped_entry(corpus_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Not to be published\n\nPrivate.")
    (corpus_dir / "loop-a.md").symlink_to(corpus_dir / "loop-b.md")
    (corpus_dir / "loop-b.md").symlink_to(corpus_dir / "loop-a.md")
    (corpus_dir / "engineering" / "back").symlink_to(corpus_dir, target_is_directory=True)
    (corpus_dir / "people" / "moved.md").symlink_to(corpus_dir / "people" / "gone.md")
    (corpus_dir / "private.md").symlink_to(outside / "secret.md")
    os.mkfifo(corpus_dir / "incoming.md")
    expected = {
        "loop-a.md": "link_loop",
        "loop-b.md": "link_loop",
        "engineering/back/": "link_loop",
        "people/moved.md": "broken_link",
        "private.md": "link_outside_root",
        "incoming.md": "special_file",
    }
    unreadable = corpus_dir / "people" / "locked.md"
    unreadable.write_text("# Locked\n\nNobody may read this.")
    unreadable.chmod(0)
    if not os.access(unreadable, os.R_OK):  # root reads it anyway: then it is just a document
        expected["people/locked.md"] = "unreadable"
    home = tmp_path / "cli"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(corpus_dir / "socket.md"))
        expected["socket.md"] = "special_file"
        done = _cli(home, "ingest", str(corpus_dir), "--corpus", CORPUS, "--json")
    unreadable.chmod(0o644)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    summary = json.loads(done.stdout)
    assert summary["quarantined"] == len(expected)
    assert summary["added"] == len(SMALL) + ("people/locked.md" not in expected)
    rows = json.loads(_cli(home, "corpus", "quarantine", "--corpus", CORPUS, "--json").stdout)
    assert {r["rel_path"]: r["reason"] for r in rows} == expected
    assert all(r["detail"] for r in rows)


def test_an_unreadable_document_keeps_its_published_version(make_runtime, corpus_dir, monkeypatch):
    from ragtrail.ingest import sources

    rt = make_runtime()
    first = ingest(rt, str(corpus_dir), CORPUS)
    victim = "people/leave-policy.md"
    (corpus_dir / "people" / "onboarding.md").write_text("# Onboarding\n\nRewritten.")
    real_read = sources._read_file

    def read_file(path: Path) -> bytes:
        if path.as_posix().endswith(victim):
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path)

    monkeypatch.setattr(sources, "_read_file", read_file)
    second = ingest(rt, str(corpus_dir), CORPUS)
    assert (second.updated, second.removed, second.quarantined) == (1, 0, 1)
    assert second.documents == first.documents
    assert victim in rt.store.get_documents(CORPUS)
    assert victim in rt.index(CORPUS).document_ids()
    [entry] = rt.store.list_quarantine(CORPUS, second.snapshot)
    assert (entry.rel_path, entry.reason) == (victim, QuarantineReason.UNREADABLE)


# -- overlong content -------------------------------------------------------------------------


def test_overlong_content_is_chunked_within_the_bound_and_flagged(make_runtime, corpus_dir):
    """A 19 MB file of one "word" (one unknown token) once became one 19 MB chunk; minified
    JSON is one whitespace-free run. Both are cut to the bound, and the GX suite warns."""
    dump = corpus_dir / "exports" / "dump.txt"
    dump.parent.mkdir()
    dump.write_bytes(b"Q" * 19_000_000)
    records = [{"id": i, "name": f"n{i}", "flags": [i % 2, i % 3], "v": i / 7} for i in range(3000)]
    (corpus_dir / "exports" / "config.txt").write_text(json.dumps(records, separators=(",", ":")))
    rt = make_runtime()
    summary = ingest(rt, str(corpus_dir), CORPUS)
    assert summary.quarantined == 0 and summary.documents == len(SMALL) + 2
    bound = rt.settings.chunking.char_limit
    chunks = rt.store.get_chunks(CORPUS)
    assert max(len(c.text) for c in chunks) <= bound
    dump_chunks = [c for c in chunks if c.doc_id == "exports/dump.txt"]
    assert len(dump_chunks) == -(-19_000_000 // bound)
    assert "".join(c.text for c in dump_chunks) == "Q" * 19_000_000
    vector = rt.embedder.encode(["QQQQ"])[0]
    hits = fuse(fetch_candidates(rt.index(CORPUS), "QQQQ", vector, 50), 0.5, 10)
    by_id = {c.chunk_id: c for c in chunks}
    assert hits  # search returns the bounded chunk under its headings, never the whole file
    assert all(h.text == by_id[h.chunk_id].to_chunk("und").index_text() for h in hits)
    quality = check_corpus_quality(rt, CORPUS, summary.snapshot)
    assert quality.success
    [chunk_check] = [v for v in quality.validations if v.name == "chunks"]
    assert any("long_word_share" in w for w in chunk_check.warnings)


# -- killed runs ------------------------------------------------------------------------------


def _worker(mode: str, home: Path, source: Path, signals: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration._ingest_worker",
            mode,
            str(home),
            str(source),
            CORPUS,
            str(signals),
        ],
        env=_env(home),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_run_killed_before_finalize_never_poses_as_published(make_runtime, corpus_dir, tmp_path):
    home = tmp_path / "home"
    published = make_runtime(home=home)
    first = ingest(published, str(corpus_dir), CORPUS)
    published.close()  # the worker needs the index writer
    (corpus_dir / "people" / "new-policy.md").write_text("# Parking\n\nBikes go in the yard.")
    (corpus_dir / "people" / "draft.md").write_text("# Draft\n\nTo be deleted before the rerun.")
    (corpus_dir / "people" / "onboarding.md").write_text("# Onboarding\n\nA new first week.")
    (corpus_dir / "engineering" / "open-source.md").unlink()

    killed = _worker("exit-before-finalize", home, corpus_dir, tmp_path)
    out, err = killed.communicate(timeout=600)
    assert killed.returncode == 9, err[-3000:]
    killed_snapshot = out.strip()
    rt = make_runtime(home=home)
    table = rt.store.get_documents(CORPUS)
    assert {"people/new-policy.md", "people/draft.md"} <= set(table)  # written, never published
    assert rt.store.get_snapshot(killed_snapshot).status == "running"  # type: ignore[union-attr]

    (corpus_dir / "people" / "draft.md").unlink()
    rerun = ingest(rt, str(corpus_dir), CORPUS)
    abandoned = rt.store.get_snapshot(killed_snapshot)
    assert abandoned is not None and abandoned.status == "abandoned"
    assert "is gone" in (abandoned.status_detail or "")
    # Relative to the published snapshot: the new file is added (not "unchanged"), the edited
    # one updated, the deleted one removed, and the draft the killed run wrote is no removal.
    assert (rerun.added, rerun.updated, rerun.removed) == (1, 1, 1)
    assert rerun.unchanged == first.documents - 2
    assert rerun.changed_doc_ids == ["people/new-policy.md", "people/onboarding.md"]
    assert rerun.removed_doc_ids == ["engineering/open-source.md"]
    docs = rt.store.get_documents(CORPUS)
    assert "people/draft.md" not in docs
    assert docs["people/onboarding.md"].version == 2  # one update, however many tries
    assert rt.index(CORPUS).document_ids() == set(docs)
    statuses = sorted(s.status for s in rt.store.list_snapshots(CORPUS))
    assert statuses == ["abandoned", "complete", "complete"]


# -- two ingests at once ----------------------------------------------------------------------


def test_two_concurrent_ingests_publish_one_snapshot(make_runtime, corpus_dir, tmp_path):
    home = tmp_path / "home"
    first = make_runtime(home=home)
    ingest(first, str(corpus_dir), CORPUS)
    first.close()  # the worker needs the index writer
    (corpus_dir / "people" / "new-policy.md").write_text("# Parking\n\nBikes go in the yard.")

    running = _worker("pause-after-plan", home, corpus_dir, tmp_path)
    deadline = time.monotonic() + 600
    while not (tmp_path / "planned").exists():  # an explicit state, not a race on timing
        assert running.poll() is None, running.stderr.read()[-3000:]  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the first ingest never planned"
        time.sleep(0.05)
    planned = (tmp_path / "planned").read_text()

    rt = make_runtime(home=home)
    with pytest.raises(IngestLockedError, match=rf"already running \(pid {running.pid} on host"):
        ingest(rt, str(corpus_dir), CORPUS)
    second = _cli(home, "ingest", str(corpus_dir), "--corpus", CORPUS)
    assert second.returncode == 2
    [line] = _error_lines(second.stderr)
    assert f"ingest of corpus '{CORPUS}' already running (pid {running.pid} on host" in line
    assert "Traceback" not in second.stderr

    (tmp_path / "go").write_text("")
    out, err = running.communicate(timeout=600)
    assert running.returncode == 0, err[-3000:]
    assert json.loads(out)["added"] == 1
    snapshots = rt.store.list_snapshots(CORPUS)
    assert sorted(s.status for s in snapshots) == ["complete", "complete"]
    assert rt.store.latest_snapshot(CORPUS).snapshot_id == planned  # type: ignore[union-attr]
    again = ingest(rt, str(corpus_dir), CORPUS)
    assert again.changed is False  # the published snapshot already holds this source
