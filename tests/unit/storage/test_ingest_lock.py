"""The corpus ingest lock (a running snapshot with a live owner) and abandoned snapshots, on
SQLite and (when configured) PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from sqlalchemy import Engine, update

from ragtrail.storage import tables
from ragtrail.storage.corpus_store import (
    ABANDONED,
    COMPLETE,
    FAILED,
    MAX_STATUS_DETAIL,
    RUNNING,
    IngestLockedError,
    SnapshotClosedError,
    SnapshotOwner,
    pid_alive,
    stale_reason,
    stored_detail,
)
from ragtrail.storage.db import upgrade, utcnow
from ragtrail.storage.metadata_store import SqlMetadataStore

CORPUS = "handbook"
HOUR = timedelta(hours=1)


@pytest.fixture
def store(engine: Engine) -> SqlMetadataStore:
    upgrade(engine)
    return SqlMetadataStore(engine)


def _claim(
    store: SqlMetadataStore,
    snapshot_id: str,
    owner: SnapshotOwner,
    parent: str | None = None,
    stale_after: timedelta = HOUR,
) -> list:
    return store.claim_snapshot(
        snapshot_id,
        CORPUS,
        "/src",
        parent,
        "mini",
        "embedded",
        owner=owner,
        stale_after=stale_after,
    )


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _age(store: SqlMetadataStore, snapshot_id: str, by: timedelta) -> None:
    s = tables.snapshots
    with store.engine.begin() as conn:
        conn.execute(
            update(s)
            .where(s.c.snapshot_id == snapshot_id)
            .values(heartbeat_at=utcnow() - by, created_at=utcnow() - by)
        )


def test_claim_records_the_owner_and_a_heartbeat(store: SqlMetadataStore) -> None:
    owner = SnapshotOwner("run-1", "host-a", 4242)
    assert _claim(store, "s1", owner) == []
    snap = store.get_snapshot("s1")
    assert snap is not None and snap.status == RUNNING
    assert (snap.owner_run, snap.owner_host, snap.owner_pid) == ("run-1", "host-a", 4242)
    assert snap.heartbeat_at is not None and snap.heartbeat_at.tzinfo is not None
    assert snap.owner_text() == "pid 4242 on host host-a"


def test_a_second_ingest_is_refused_while_the_first_is_alive(store: SqlMetadataStore) -> None:
    me = SnapshotOwner.this_process()
    _claim(store, "s1", me)
    other = SnapshotOwner("run-2", me.host, None)
    with pytest.raises(IngestLockedError) as refused:
        _claim(store, "s2", other)
    message = str(refused.value)
    assert message.startswith(f"ingest of corpus {CORPUS!r} already running (pid {me.pid} on host")
    assert "since" in message and "s1" in message
    assert store.get_snapshot("s2") is None  # nothing written
    with pytest.raises(IngestLockedError):
        store.settle_running_snapshots(CORPUS, other, HOUR)
    assert store.get_snapshot("s1").status == RUNNING  # type: ignore[union-attr]


def test_a_dead_process_on_this_host_frees_the_corpus_at_once(store: SqlMetadataStore) -> None:
    me = SnapshotOwner.this_process()
    dead = SnapshotOwner("killed-run", me.host, _dead_pid())
    _claim(store, "s1", dead)
    abandoned = _claim(store, "s2", me)
    assert [(s.snapshot_id, s.status) for s in abandoned] == [("s1", ABANDONED)]
    assert "is gone" in (abandoned[0].status_detail or "")
    s1 = store.get_snapshot("s1")
    assert s1 is not None and s1.status == ABANDONED and s1.finished_at is not None
    assert s1.status_detail == abandoned[0].status_detail
    assert store.get_snapshot("s2").status == RUNNING  # type: ignore[union-attr]


def test_another_hosts_owner_is_judged_by_its_heartbeat(store: SqlMetadataStore) -> None:
    me = SnapshotOwner.this_process()
    remote = SnapshotOwner("remote-run", "another-host", _dead_pid())
    _claim(store, "s1", remote)
    with pytest.raises(IngestLockedError, match="on host another-host"):
        _claim(store, "s2", me)  # its pid means nothing here
    _age(store, "s1", timedelta(hours=2))
    abandoned = _claim(store, "s2", me)
    assert [s.snapshot_id for s in abandoned] == ["s1"]
    assert "no heartbeat" in (abandoned[0].status_detail or "")


def test_task_owned_snapshot_lives_until_the_heartbeat_times_out(store: SqlMetadataStore) -> None:
    """Airflow tasks record no pid: between tasks no process holds the run."""
    me = SnapshotOwner.this_process()
    _claim(store, "s1", SnapshotOwner("scheduled__x", me.host, None))
    _age(store, "s1", timedelta(minutes=30))
    with pytest.raises(IngestLockedError, match="run scheduled__x"):
        _claim(store, "s2", me)
    store.heartbeat_snapshot("s1")  # a shard task reports
    _age(store, "s1", timedelta(minutes=61))
    assert [s.snapshot_id for s in _claim(store, "s2", me)] == ["s1"]


def test_a_retried_plan_of_the_same_run_takes_over_its_own_snapshot(
    store: SqlMetadataStore,
) -> None:
    first_try = SnapshotOwner("ingest-manual__1", "worker-1", None)
    _claim(store, "s1", first_try)
    retry = SnapshotOwner("ingest-manual__1", "worker-2", None)
    abandoned = _claim(store, "s2", retry)
    assert [s.snapshot_id for s in abandoned] == ["s1"]
    assert "retry" in (abandoned[0].status_detail or "")


def test_a_snapshot_published_meanwhile_makes_the_plan_stale(store: SqlMetadataStore) -> None:
    me = SnapshotOwner.this_process()
    _claim(store, "s1", SnapshotOwner("other", me.host, None))
    store.finish_snapshot("s1", status=COMPLETE, counts={}, manifest_uri=None)
    with pytest.raises(IngestLockedError, match="published snapshot s1 while this one"):
        _claim(store, "s2", me, parent=None)  # planned before s1 was published
    assert store.get_snapshot("s2") is None
    _claim(store, "s2", me, parent="s1")


def test_heartbeat_refuses_a_closed_snapshot(store: SqlMetadataStore) -> None:
    me = SnapshotOwner.this_process()
    _claim(store, "s1", me)
    store.heartbeat_snapshot("s1", index_name="idx-s1")
    assert store.get_snapshot("s1").index_name == "idx-s1"  # type: ignore[union-attr]
    assert store.close_snapshot("s1", status=ABANDONED, detail="test")
    with pytest.raises(SnapshotClosedError, match="abandoned"):
        store.heartbeat_snapshot("s1")
    assert not store.close_snapshot("s1", status=FAILED, detail="again")  # already closed
    with pytest.raises(ValueError, match="failed or abandoned"):
        store.close_snapshot("s1", status=COMPLETE, detail="no")
    with pytest.raises(KeyError):
        store.heartbeat_snapshot("nope")


def test_heartbeat_leaves_a_complete_snapshot_alone(store: SqlMetadataStore) -> None:
    _claim(store, "s1", SnapshotOwner.this_process())
    store.finish_snapshot("s1", status=COMPLETE, counts={"added": 1}, manifest_uri=None)
    before = store.get_snapshot("s1")
    store.heartbeat_snapshot("s1")  # a retried shard after finalize
    assert store.get_snapshot("s1") == before


def test_concurrent_claims_let_exactly_one_through(store: SqlMetadataStore) -> None:
    n = 6
    barrier = threading.Barrier(n)
    outcomes: dict[int, str] = {}

    def claim(i: int) -> None:
        owner = SnapshotOwner(f"run-{i}", "host", None)
        barrier.wait()
        try:
            _claim(store, f"s{i}", owner)
            outcomes[i] = "claimed"
        except IngestLockedError:
            outcomes[i] = "refused"

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(outcomes.values()) == ["claimed"] + ["refused"] * (n - 1)
    running = [s for s in store.list_snapshots(CORPUS) if s.status == RUNNING]
    assert len(running) == 1


def test_stale_reason_and_pid_alive() -> None:
    me = SnapshotOwner.this_process()
    assert pid_alive(me.pid or 0)
    assert not pid_alive(_dead_pid())
    store_less = _record(heartbeat=utcnow(), pid=me.pid, host=me.host)
    assert stale_reason(store_less, utcnow(), HOUR, me.host) is None
    old = _record(heartbeat=utcnow() - 2 * HOUR, pid=me.pid, host=me.host)
    assert "no heartbeat" in (stale_reason(old, utcnow(), HOUR, me.host) or "")
    legacy = _record(heartbeat=None, pid=None, host=None)  # written before migration 0007
    assert stale_reason(legacy, utcnow(), HOUR, me.host) is not None


def _record(heartbeat, pid, host):  # type: ignore[no-untyped-def]
    from ragtrail.storage.corpus_store import SnapshotRecord

    created = utcnow() - 3 * HOUR
    return SnapshotRecord(
        snapshot_id="s",
        corpus=CORPUS,
        parent_snapshot_id=None,
        source_uri="/src",
        status=RUNNING,
        created_at=created,
        finished_at=None,
        added=0,
        updated=0,
        unchanged=0,
        removed=0,
        quarantined=0,
        n_documents=0,
        n_chunks=0,
        embedding_model="mini",
        index_backend="embedded",
        index_name=None,
        manifest_uri=None,
        owner_run="r",
        owner_host=host,
        owner_pid=pid,
        heartbeat_at=heartbeat,
    )


def test_a_stored_reason_hides_credentials_before_it_is_bounded() -> None:
    # a URL that straddles the bound: cut first, its password would be kept in part
    url = "http://alice:S3cretPw@127.0.0.1:9/v1"
    detail = "x" * (MAX_STATUS_DETAIL - 16) + f" {url} refused"
    stored = stored_detail(detail)
    assert len(stored) == MAX_STATUS_DETAIL and "S3cr" not in stored and "alice" not in stored
