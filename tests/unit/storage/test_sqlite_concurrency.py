"""Several processes on one fresh metadata database: first-use migration and writes must all succeed.

The root cause these tests pin down: switching a new SQLite file to WAL fails at once with
"database is locked" — whatever the busy timeout — while another connection holds the write lock
(another process switching it at the same moment), and read-then-write transactions cannot wait
for a writer either. See :mod:`ragtrail.storage.db`.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from ragtrail.storage import tables
from ragtrail.storage.db import (
    _enable_wal,
    current_revision,
    head_revisions,
    make_engine,
    write_transaction,
)
from tests.unit import _concurrent_store_worker as worker

N_PROCESSES = 6


class _Workers:
    """Spawned worker processes with their start barrier and report queue.

    The barrier and queue must stay referenced until every worker has started: a spawned child
    opens their semaphores by name, and the parent unlinks them when it garbage-collects them.
    """

    def __init__(self, url: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.barrier, self.reports = ctx.Barrier(N_PROCESSES), ctx.Queue()
        self.processes = [
            ctx.Process(target=worker.run_worker, args=(i, url, self.barrier, self.reports))
            for i in range(N_PROCESSES)
        ]
        for process in self.processes:
            process.start()


def _finish_workers(workers: _Workers, outcomes: dict[int, Any]) -> None:
    """Collect every worker's DONE / FAILED report, then check that all of them succeeded."""
    processes, reports = workers.processes, workers.reports
    while len(outcomes) < len(processes):
        kind, index, detail = reports.get(timeout=300)
        if kind != worker.WAITING:
            outcomes[index] = detail
    for process in processes:
        process.join(timeout=60)
    assert [detail for detail in outcomes.values() if detail is not None] == []
    assert [p.exitcode for p in processes] == [0] * len(processes)


def _check_final_state(url: str) -> None:
    """Every worker's rows are there: nothing lost, nothing doubled."""
    engine = make_engine(url)
    try:
        assert current_revision(engine) == head_revisions()[0]
        with engine.connect() as conn:

            def count(table: Any, *where: Any) -> int:
                query = select(func.count()).select_from(table).where(*where)
                return int(conn.execute(query).scalar_one())

            n_docs = N_PROCESSES * (worker.DOCS_PER_WORKER - 1) + worker.SHARED_DOCS
            s, qc = tables.snapshots, tables.qa_candidates
            assert count(s, s.c.status == "complete") == N_PROCESSES
            assert count(tables.documents) == n_docs
            assert count(tables.chunks) == n_docs * worker.CHUNKS_PER_DOC
            assert count(tables.snapshot_documents) == N_PROCESSES * worker.DOCS_PER_WORKER
            assert count(tables.quarantine) == N_PROCESSES
            assert count(tables.embedding_cache) == 20
            assert count(qc) == 3 * N_PROCESSES
            assert count(qc, qc.c.retired_reason == "document_updated") == 3 * N_PROCESSES
    finally:
        engine.dispose()


def test_processes_migrate_and_write_one_fresh_database(db_url: str) -> None:
    """Processes released together: first-use migration and concurrent writes all succeed."""
    _finish_workers(_Workers(db_url), {})
    _check_final_state(db_url)


def test_processes_wait_while_another_one_switches_the_new_file(tmp_path: Path) -> None:
    """The race made deterministic: while one connection holds the write lock of the new,
    not-yet-WAL file (as a process switching it to WAL does), every other process must wait for it
    instead of failing at once. The lock is released only once all of them report waiting."""
    path = tmp_path / "home" / "ragtrail.db"
    path.parent.mkdir()
    holder = _hold_write_lock(path)
    outcomes: dict[int, Any] = {}
    try:
        workers = _Workers(f"sqlite:///{path}")
        waiting: set[int] = set()
        while len(waiting) + len(outcomes) < N_PROCESSES:
            kind, index, detail = workers.reports.get(timeout=300)
            if kind == worker.WAITING:
                waiting.add(index)
            else:
                outcomes[index] = detail  # finished while the lock was held: a failure
        assert outcomes == {}, "workers gave up instead of waiting for the lock"
    finally:
        holder.rollback()
        holder.close()
    _finish_workers(workers, outcomes)
    _check_final_state(f"sqlite:///{path}")


# -- the SQLite mechanisms, one at a time (deterministic) -------------------------------------


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    """A plain connection inside ``BEGIN IMMEDIATE`` on ``path`` (still in rollback-journal mode)."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_sqlite_does_not_wait_to_switch_a_locked_file_to_wal(tmp_path: Path) -> None:
    """Why :func:`_enable_wal` retries: the busy timeout is not used for this switch."""
    path = tmp_path / "fresh.db"
    holder = _hold_write_lock(path)
    switcher = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            switcher.execute("PRAGMA journal_mode=WAL")
        assert time.monotonic() - started < 5  # far below the 30 s timeout: it did not wait
    finally:
        holder.rollback()
        holder.close()
        switcher.close()


class _SignallingCursor:
    """A real sqlite3 cursor that sets ``failed`` after its first failed statement."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.cursor = cursor
        self.failed = threading.Event()
        self.attempts = 0

    def execute(self, sql: str) -> sqlite3.Cursor:
        self.attempts += 1
        try:
            return self.cursor.execute(sql)
        except sqlite3.OperationalError:
            self.failed.set()
            raise


def test_enable_wal_waits_for_the_lock_to_be_released(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    holder = _hold_write_lock(path)
    switcher = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    cursor = _SignallingCursor(switcher.cursor())
    outcome: list[BaseException | None] = []

    def switch() -> None:
        try:
            _enable_wal(cursor, timeout_s=60)  # type: ignore[arg-type]
            outcome.append(None)
        except BaseException as exc:  # pragma: no cover - reported by the assertion below
            outcome.append(exc)

    thread = threading.Thread(target=switch)
    thread.start()
    try:
        assert cursor.failed.wait(timeout=60), "the switch never met the lock"
    finally:
        holder.rollback()  # release: the next retry must succeed
        holder.close()
    thread.join(timeout=60)
    try:
        assert outcome == [None] and cursor.attempts >= 2
        assert switcher.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        switcher.close()


def test_enable_wal_gives_up_after_its_timeout(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    holder = _hold_write_lock(path)
    switcher = sqlite3.connect(path, isolation_level=None)
    try:
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            _enable_wal(switcher.cursor(), timeout_s=0.3)
        assert time.monotonic() - started >= 0.2  # it retried for (about) the timeout
    finally:
        holder.rollback()
        holder.close()
        switcher.close()


def test_write_transaction_takes_the_write_lock_before_any_statement(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    engine = make_engine(f"sqlite:///{path}")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with engine.connect() as conn:  # a plain (read) transaction takes no write lock
            conn.exec_driver_sql("SELECT 1").all()
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        with (
            write_transaction(engine),
            pytest.raises(sqlite3.OperationalError, match="database is locked"),
        ):
            other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")  # released on commit
        other.execute("ROLLBACK")
    finally:
        other.close()
        engine.dispose()


def test_reads_belong_to_the_transaction(tmp_path: Path) -> None:
    """A SELECT inside a transaction runs in it (the stdlib driver alone would autocommit it)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'meta.db'}")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1").all()
            raw = conn.connection.dbapi_connection
            assert raw is not None and raw.in_transaction
        with write_transaction(engine) as conn:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        with pytest.raises(RuntimeError), write_transaction(engine) as conn:
            conn.exec_driver_sql("INSERT INTO t VALUES (2)")
            raise RuntimeError("roll back")
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT x FROM t").all() == [(1,)]
    finally:
        engine.dispose()
