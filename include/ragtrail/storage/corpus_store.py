"""Corpora and their snapshots (one ingest run of a corpus each), as :class:`SnapshotRecord`.

A running snapshot is also the corpus's ingest lock. :meth:`CorpusStore.claim_snapshot` starts
one only while no other snapshot of the corpus is running with a live owner, checking and
inserting in one transaction that holds the corpus row (``SELECT ... FOR UPDATE`` on PostgreSQL;
SQLite's ``BEGIN IMMEDIATE`` already serialises writers). The lock lives in the database, not in
a process, because under Airflow the plan, shard and finalize steps of one snapshot run as
separate task processes, possibly on separate hosts.

An owner is alive until its heartbeat (plan, each shard, finalize) is older than the timeout, or,
for an ingest run by one process (CLI, ``ragtrail nightly``), until that process is gone from the
same host. A running snapshot whose owner is dead is marked ``abandoned`` by the next ingest of
the corpus, so a killed run never blocks the corpus for longer than the timeout.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, delete, select, update
from sqlalchemy.engine import RowMapping

from ragtrail.redact import redact
from ragtrail.storage import tables as t
from ragtrail.storage.db import utcnow, write_transaction
from ragtrail.storage.sql import Row, SqlStore, as_dict, upsert

RUNNING, COMPLETE, FAILED, ABANDONED = "running", "complete", "failed", "abandoned"
SNAPSHOT_STATUSES = frozenset({RUNNING, COMPLETE, FAILED, ABANDONED})
SNAPSHOT_COUNT_COLUMNS = (
    "added",
    "updated",
    "unchanged",
    "removed",
    "quarantined",
    "n_documents",
    "n_chunks",
)


@dataclass(frozen=True)
class SnapshotRecord:
    """One row of ``snapshots``; datetimes are timezone-aware UTC."""

    snapshot_id: str
    corpus: str
    parent_snapshot_id: str | None
    source_uri: str
    status: str  # running | complete | failed | abandoned
    created_at: datetime
    finished_at: datetime | None
    added: int
    updated: int
    unchanged: int
    removed: int
    quarantined: int
    n_documents: int
    n_chunks: int
    embedding_model: str
    index_backend: str
    index_name: str | None
    manifest_uri: str | None
    owner_run: str | None = None
    owner_host: str | None = None
    owner_pid: int | None = None
    heartbeat_at: datetime | None = None
    status_detail: str | None = None

    @classmethod
    def from_row(cls, row: RowMapping) -> SnapshotRecord:
        return cls(**as_dict(row))

    def owner_text(self) -> str:
        """Who runs the snapshot, for messages: "pid 42 on host h" or "run r on host h"."""
        where = f"on host {self.owner_host}" if self.owner_host else "on an unknown host"
        if self.owner_pid is not None:
            return f"pid {self.owner_pid} {where}"
        if self.owner_run:
            return f"run {self.owner_run} {where}"
        return "an unknown owner"


@dataclass(frozen=True)
class SnapshotOwner:
    """Who runs an ingest: its run id, its host, and its pid when one process runs all of it
    (plan to finalize); Airflow tasks, each a process of its own, leave the pid out."""

    run_id: str
    host: str
    pid: int | None

    @classmethod
    def this_process(cls, run_id: str | None = None, *, holds_run: bool = True) -> SnapshotOwner:
        """The current process as owner; ``run_id`` defaults to a fresh one."""
        pid = os.getpid()
        return cls(
            run_id or f"pid{pid}-{uuid.uuid4().hex[:8]}",
            socket.gethostname(),
            pid if holds_run else None,
        )


class IngestLockedError(ValueError):
    """Another ingest of the corpus is running, or published a snapshot while this one planned."""

    def __init__(self, message: str, snapshot: SnapshotRecord | None = None) -> None:
        super().__init__(message)
        self.snapshot = snapshot

    @classmethod
    def running(cls, snapshot: SnapshotRecord) -> IngestLockedError:
        since = _when(snapshot.created_at)
        beat = _when(snapshot.heartbeat_at or snapshot.created_at)
        return cls(
            f"ingest of corpus {snapshot.corpus!r} already running ({snapshot.owner_text()}, "
            f"since {since}, last heartbeat {beat}; snapshot {snapshot.snapshot_id}); "
            "wait for it, or stop it: its snapshot is abandoned once its process is gone or "
            "after ingest.stale_after_s without a heartbeat",
            snapshot,
        )


class SnapshotClosedError(ValueError):
    """A step of an ingest found its snapshot abandoned or failed: it may not write any more."""


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


MAX_STATUS_DETAIL = 2000
"""Characters of a closed snapshot's or run's reason that are kept (errors can be pages long)."""


def stored_detail(detail: str) -> str:
    """A closing reason as stored: credentials hidden first (the reason quotes an error, which
    may name an S3 endpoint, a database or an LLM endpoint with its password), then bounded."""
    return redact(detail)[:MAX_STATUS_DETAIL]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True  # no /proc (macOS): the signal check is all there is
    return fields[0] not in ("Z", "X")


def stale_reason(
    snapshot: SnapshotRecord, now: datetime, stale_after: timedelta, host: str
) -> str | None:
    """Why the ingest running ``snapshot`` is presumed dead, or None while it may be alive."""
    beat = snapshot.heartbeat_at or snapshot.created_at
    if now - beat > stale_after:
        return (
            f"no heartbeat from {snapshot.owner_text()} since {_when(beat)} "
            f"(timeout {int(stale_after.total_seconds())} s)"
        )
    if (
        snapshot.owner_pid is not None
        and snapshot.owner_host == host
        and not pid_alive(snapshot.owner_pid)
    ):
        return f"its process (pid {snapshot.owner_pid} on host {host}) is gone"
    return None


class CorpusStore(SqlStore):
    """Corpora and snapshots in the metadata database."""

    def ensure_corpus(self, name: str) -> None:
        """Create the corpus row if it does not exist yet."""
        with write_transaction(self.engine) as conn:
            ensure_corpus(conn, name)

    def start_snapshot(
        self,
        snapshot_id: str,
        corpus: str,
        source_uri: str,
        parent_snapshot_id: str | None,
        embedding_model: str,
        index_backend: str,
        index_name: str | None,
    ) -> None:
        """Register a running snapshot (creating the corpus if needed), taking no lock.

        Idempotent: starting an existing snapshot again resets it to running with zero counts and
        deletes its snapshot_documents and quarantine rows, so a retried task starts clean.
        The ingest claims its snapshot with :meth:`claim_snapshot` instead.
        """
        with write_transaction(self.engine) as conn:
            ensure_corpus(conn, corpus)
            _start_snapshot(
                conn,
                snapshot_id,
                corpus,
                source_uri,
                parent_snapshot_id,
                embedding_model,
                index_backend,
                index_name,
                None,
            )

    def settle_running_snapshots(
        self, corpus: str, owner: SnapshotOwner, stale_after: timedelta
    ) -> list[SnapshotRecord]:
        """Mark the corpus's running snapshots whose owner is dead (or is ``owner``'s own run,
        retried) ``abandoned``, and return them as they are now (with the reason).

        Raises :class:`IngestLockedError` (and changes nothing) while one has a live owner.
        """
        with write_transaction(self.engine) as conn:
            return _settle_running(conn, corpus, owner, stale_after)

    def claim_snapshot(
        self,
        snapshot_id: str,
        corpus: str,
        source_uri: str,
        parent_snapshot_id: str | None,
        embedding_model: str,
        index_backend: str,
        *,
        owner: SnapshotOwner,
        stale_after: timedelta,
    ) -> list[SnapshotRecord]:
        """Start ``snapshot_id`` as the corpus's only running ingest, owned by ``owner``.

        One transaction holding the corpus row: running snapshots of dead owners are abandoned
        (and returned), a live one raises :class:`IngestLockedError`, and so does a complete
        snapshot newer than ``parent_snapshot_id`` (an ingest that published while this one was
        planning: its plan is out of date). Nothing is written when it raises.
        """
        with write_transaction(self.engine) as conn:
            ensure_corpus(conn, corpus)
            c = t.corpora
            conn.execute(select(c.c.name).where(c.c.name == corpus).with_for_update())
            abandoned = _settle_running(conn, corpus, owner, stale_after, own=snapshot_id)
            latest = latest_snapshot(conn, corpus, COMPLETE)
            if latest is not None and latest.snapshot_id != parent_snapshot_id:
                raise IngestLockedError(
                    f"another ingest of corpus {corpus!r} published snapshot "
                    f"{latest.snapshot_id} while this one was planning; nothing was changed, "
                    "run it again",
                    latest,
                )
            _start_snapshot(
                conn,
                snapshot_id,
                corpus,
                source_uri,
                parent_snapshot_id,
                embedding_model,
                index_backend,
                None,
                owner,
            )
        return abandoned

    def heartbeat_snapshot(self, snapshot_id: str, *, index_name: str | None = None) -> None:
        """Record that the ingest of a running snapshot is alive (and, once known, the index it
        writes to). Raises :class:`SnapshotClosedError` when the snapshot was abandoned or failed
        meanwhile; a complete snapshot (a retried step) is left as it is."""
        s = t.snapshots
        values: dict[str, Any] = {"heartbeat_at": utcnow()}
        if index_name is not None:
            values["index_name"] = index_name
        with write_transaction(self.engine) as conn:
            conn.execute(
                update(s)
                .where(s.c.snapshot_id == snapshot_id, s.c.status == RUNNING)
                .values(values)
            )
            row = conn.execute(select(s).where(s.c.snapshot_id == snapshot_id)).mappings().first()
        if row is None:
            raise KeyError(f"no snapshot {snapshot_id!r}")
        check_open(SnapshotRecord.from_row(row))

    def close_snapshot(self, snapshot_id: str, *, status: str, detail: str) -> bool:
        """End a *running* snapshot as ``failed`` or ``abandoned`` with the reason; False when it
        was not running (already closed)."""
        if status not in (FAILED, ABANDONED):
            raise ValueError(f"a snapshot is closed as failed or abandoned, not {status!r}")
        s = t.snapshots
        values = {"status": status, "finished_at": utcnow(), "status_detail": stored_detail(detail)}
        with write_transaction(self.engine) as conn:
            result = conn.execute(
                update(s)
                .where(s.c.snapshot_id == snapshot_id, s.c.status == RUNNING)
                .values(values)
            )
        return bool(result.rowcount)

    def finish_snapshot(
        self, snapshot_id: str, *, status: str, counts: Mapping[str, int], manifest_uri: str | None
    ) -> None:
        """Close a snapshot with its final status, counts and manifest location.

        ``counts`` may hold any of :data:`SNAPSHOT_COUNT_COLUMNS`; raises KeyError for an unknown
        snapshot and ValueError for an unknown status or count name.
        """
        if status not in SNAPSHOT_STATUSES:
            raise ValueError(f"unknown snapshot status {status!r}")
        unknown = set(counts) - set(SNAPSHOT_COUNT_COLUMNS)
        if unknown:
            raise ValueError(f"unknown snapshot counts {sorted(unknown)}")
        values: dict[str, Any] = {
            "status": status,
            "finished_at": utcnow(),
            "manifest_uri": manifest_uri,
            **{k: int(v) for k, v in counts.items()},
        }
        s = t.snapshots
        with write_transaction(self.engine) as conn:
            result = conn.execute(update(s).where(s.c.snapshot_id == snapshot_id).values(values))
            if result.rowcount == 0:
                raise KeyError(f"no snapshot {snapshot_id!r}")

    def latest_snapshot(self, corpus: str, status: str | None = COMPLETE) -> SnapshotRecord | None:
        """The most recently created snapshot of ``corpus`` with ``status`` (None: any status)."""
        with self.engine.connect() as conn:
            return latest_snapshot(conn, corpus, status)

    def get_snapshot(self, snapshot_id: str) -> SnapshotRecord | None:
        s = t.snapshots
        with self.engine.connect() as conn:
            row = conn.execute(select(s).where(s.c.snapshot_id == snapshot_id)).mappings().first()
        return SnapshotRecord.from_row(row) if row is not None else None

    def list_snapshots(self, corpus: str) -> list[SnapshotRecord]:
        """All snapshots of ``corpus``, newest first."""
        s = t.snapshots
        query = (
            select(s).where(s.c.corpus == corpus).order_by(s.c.created_at.desc(), s.c.snapshot_id)
        )
        with self.engine.connect() as conn:
            return [SnapshotRecord.from_row(r) for r in conn.execute(query).mappings()]


def check_open(snapshot: SnapshotRecord) -> None:
    """Raise :class:`SnapshotClosedError` when ``snapshot`` was abandoned or failed."""
    if snapshot.status in (ABANDONED, FAILED):
        raise SnapshotClosedError(
            f"snapshot {snapshot.snapshot_id} of corpus {snapshot.corpus!r} is {snapshot.status}"
            f" ({snapshot.status_detail or 'no reason recorded'}); its ingest may not write to "
            "it any more: run the ingest again"
        )


def _start_snapshot(
    conn: Connection,
    snapshot_id: str,
    corpus: str,
    source_uri: str,
    parent_snapshot_id: str | None,
    embedding_model: str,
    index_backend: str,
    index_name: str | None,
    owner: SnapshotOwner | None,
) -> None:
    """Insert (or reset) a running snapshot row and clear its change log and quarantine."""
    now = utcnow()
    row: Row = {
        "snapshot_id": snapshot_id,
        "corpus": corpus,
        "parent_snapshot_id": parent_snapshot_id,
        "source_uri": source_uri,
        "status": RUNNING,
        "created_at": now,
        "finished_at": None,
        "embedding_model": embedding_model,
        "index_backend": index_backend,
        "index_name": index_name,
        "manifest_uri": None,
        **dict.fromkeys(SNAPSHOT_COUNT_COLUMNS, 0),
        "owner_run": owner.run_id if owner else None,
        "owner_host": owner.host if owner else None,
        "owner_pid": owner.pid if owner else None,
        "heartbeat_at": now,
        "status_detail": None,
    }
    keep = {"snapshot_id", "created_at"}
    upsert(conn, t.snapshots, [row], ["snapshot_id"], [c for c in row if c not in keep])
    sd, q = t.snapshot_documents, t.quarantine
    conn.execute(delete(sd).where(sd.c.snapshot_id == snapshot_id))
    conn.execute(delete(q).where(q.c.snapshot_id == snapshot_id))


def _settle_running(
    conn: Connection,
    corpus: str,
    owner: SnapshotOwner,
    stale_after: timedelta,
    own: str | None = None,
) -> list[SnapshotRecord]:
    """Abandon the running snapshots of ``corpus`` whose owner is dead or is ``owner``'s run
    (a retried plan); raise :class:`IngestLockedError` first if any other one is alive.
    ``own`` is a snapshot id about to be (re)started by ``owner``: it is left alone."""
    s = t.snapshots
    query = (
        select(s)
        .where(s.c.corpus == corpus, s.c.status == RUNNING)
        .order_by(s.c.created_at, s.c.snapshot_id)
    )
    running = [SnapshotRecord.from_row(r) for r in conn.execute(query).mappings()]
    now = utcnow()
    doomed: list[tuple[SnapshotRecord, str]] = []
    for snapshot in running:
        if snapshot.snapshot_id == own:
            continue
        if snapshot.owner_run is not None and snapshot.owner_run == owner.run_id:
            doomed.append((snapshot, f"superseded by a retry of run {owner.run_id}"))
            continue
        reason = stale_reason(snapshot, now, stale_after, owner.host)
        if reason is None:
            raise IngestLockedError.running(snapshot)
        doomed.append((snapshot, reason))
    for snapshot, reason in doomed:
        values = {"status": ABANDONED, "finished_at": now, "status_detail": reason}
        conn.execute(
            update(s)
            .where(s.c.snapshot_id == snapshot.snapshot_id, s.c.status == RUNNING)
            .values(values)
        )
    return [
        replace(snapshot, status=ABANDONED, finished_at=now, status_detail=reason)
        for snapshot, reason in doomed
    ]


def ensure_corpus(conn: Connection, name: str) -> None:
    """Insert the corpus row unless it exists (inside the caller's transaction)."""
    upsert(conn, t.corpora, [{"name": name, "created_at": utcnow()}], ["name"], [])


def latest_snapshot(conn: Connection, corpus: str, status: str | None) -> SnapshotRecord | None:
    """The newest snapshot of ``corpus`` with ``status`` (None: any), read on ``conn``."""
    s = t.snapshots
    query = select(s).where(s.c.corpus == corpus)
    if status is not None:
        query = query.where(s.c.status == status)
    query = query.order_by(s.c.created_at.desc(), s.c.snapshot_id.desc()).limit(1)
    row = conn.execute(query).mappings().first()
    return SnapshotRecord.from_row(row) if row is not None else None
