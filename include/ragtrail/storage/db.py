"""Engines and schema migrations for the metadata database (SQLite or PostgreSQL).

The Alembic environment ships inside the package (``storage/migrations``), so no ``alembic.ini`` is
needed: :func:`upgrade` runs it programmatically. Upgrades are serialised across processes — with a
transaction-scoped advisory lock on PostgreSQL and ``BEGIN IMMEDIATE`` on SQLite — and each upgrade
runs in one transaction, so concurrent callers see either the old or the new schema, never half.

SQLite and concurrency. Several processes (Airflow workers, the CLI, a DAG run) may open one fresh
database file at once. Two SQLite behaviours would make some of them fail at once with "database is
locked" although every connection has a 30 s busy timeout, because SQLite does not call the busy
handler where waiting could deadlock:

* switching a new file to WAL (``PRAGMA journal_mode=WAL``) starts as a read and then needs the
  exclusive lock; while another connection reads the same file the upgrade fails without waiting.
  :func:`_enable_wal` retries that switch, holding no lock between tries, for up to the busy timeout.
* a deferred transaction that reads and later writes must upgrade its read lock, which fails without
  waiting when another connection writes. The stdlib driver hides this by running SELECTs outside
  the transaction (so reads and writes of one "transaction" were not atomic). Engines from
  :func:`make_engine` therefore let SQLAlchemy emit ``BEGIN`` itself, and :func:`write_transaction`
  begins ``IMMEDIATE``: the write lock is taken first, through the busy handler, so writers queue.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, func, select
from sqlalchemy.engine import URL, make_url

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
"""The packaged Alembic script directory."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_BEGIN_IMMEDIATE = "ragtrail_sqlite_begin_immediate"
"""Connection execution option: on SQLite, begin the next transaction with ``BEGIN IMMEDIATE``."""
_WAL_RETRY_FIRST_S = 0.001
_WAL_RETRY_MAX_S = 0.05
_PG_MIGRATION_LOCK_KEY = 0x7261677472_61696C  # b"ragtrail" as a (positive) 64-bit integer
_MEMORY_DATABASES = frozenset({"", ":memory:"})


def utcnow() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


def make_engine(url: str | URL, **engine_kwargs: Any) -> Engine:
    """Create an engine for ``url`` with ragtrail's connection settings.

    SQLite: the parent directory is created, and every connection gets WAL journaling, enforced
    foreign keys and a busy timeout; SQLAlchemy (not the driver) begins transactions, so reads
    inside a transaction belong to it (see the module docstring). PostgreSQL: connections are
    pinged before use. Extra keyword arguments go to :func:`sqlalchemy.create_engine`.
    """
    sa_url = make_url(url)
    backend = sa_url.get_backend_name()
    if backend == "sqlite":
        _ensure_sqlite_parent_dir(sa_url)
        engine = create_engine(sa_url, **engine_kwargs)
        event.listen(engine, "connect", _configure_sqlite_connection)
        event.listen(engine, "begin", _begin_sqlite_transaction)
        return engine
    if backend == "postgresql":
        engine_kwargs.setdefault("pool_pre_ping", True)
    return create_engine(sa_url, **engine_kwargs)


def _ensure_sqlite_parent_dir(url: URL) -> None:
    """Create the directory holding a file-based SQLite database."""
    database = url.database or ""
    if database in _MEMORY_DATABASES or database.startswith("file:"):
        return
    Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    """Per-connection SQLite settings: busy timeout, WAL, foreign keys, no driver-made BEGIN.

    ``isolation_level = None`` stops the stdlib driver from opening transactions by itself (it
    only did so before INSERT/UPDATE/DELETE); :func:`_begin_sqlite_transaction` opens them instead.
    """
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _enable_wal(cursor, SQLITE_BUSY_TIMEOUT_MS / 1000)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _enable_wal(cursor: sqlite3.Cursor, timeout_s: float) -> None:
    """Switch the database to WAL, retrying while another connection holds a conflicting lock.

    On a file that is not yet in WAL mode the switch needs the exclusive lock, and SQLite answers
    SQLITE_BUSY at once, without its busy handler, when another connection reads the file at that
    moment (several processes opening a fresh database). A failed try ends its statement and so
    releases its locks; the next try starts from scratch, so retrying cannot deadlock. Once the
    file is in WAL mode the pragma is a no-op that succeeds at the first try.
    """
    deadline = time.monotonic() + timeout_s
    pause = _WAL_RETRY_FIRST_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if not _is_sqlite_busy(exc) or time.monotonic() + pause > deadline:
                raise
        if pause == _WAL_RETRY_FIRST_S:
            logger.info("SQLite database is locked; waiting to switch it to WAL")
        time.sleep(pause)
        pause = min(pause * 2, _WAL_RETRY_MAX_S)


def _is_sqlite_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` is SQLITE_BUSY (any extended code): another connection holds the lock."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # pragma: no cover - Python < 3.11 has no error codes on exceptions
        return "database is locked" in str(exc)
    return bool(code & 0xFF == sqlite3.SQLITE_BUSY)


def _begin_sqlite_transaction(conn: Connection) -> None:
    """Emit ``BEGIN``, or ``BEGIN IMMEDIATE`` when :data:`SQLITE_BEGIN_IMMEDIATE` is set."""
    immediate = conn.get_execution_options().get(SQLITE_BEGIN_IMMEDIATE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """Like ``engine.begin()``, for transactions that write: commit on success, else roll back.

    On SQLite the transaction begins ``IMMEDIATE``: it takes the write lock before its first
    read, waiting for other writers through the busy timeout, instead of failing with "database is
    locked" when a read has to be upgraded to a write. Readers are not blocked (WAL). On
    PostgreSQL this is exactly ``engine.begin()``.
    """
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.execution_options(**{SQLITE_BEGIN_IMMEDIATE: True})
        with conn.begin():
            yield conn


def alembic_config() -> Config:
    """An Alembic config pointing at the packaged migrations (no ini file)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    cfg.set_main_option("path_separator", "os")
    return cfg


def head_revisions() -> tuple[str, ...]:
    """The head revision(s) of the packaged migration scripts."""
    return tuple(ScriptDirectory.from_config(alembic_config()).get_heads())


def current_revision(engine: Engine | Connection) -> str | None:
    """The database's current Alembic revision, or None for an unmigrated database."""
    if isinstance(engine, Connection):
        return MigrationContext.configure(engine).get_current_revision()
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _current_heads(engine: Engine) -> tuple[str, ...]:
    with engine.connect() as conn:
        return tuple(MigrationContext.configure(conn).get_current_heads())


def upgrade(engine_or_url: Engine | str | URL, revision: str = "head") -> None:
    """Migrate the database to ``revision``; a no-op when it is already there.

    Safe to call from several processes at once: the first caller migrates while the others wait
    for its lock and then find nothing to do.
    """
    owned = not isinstance(engine_or_url, Engine)
    engine = make_engine(engine_or_url) if owned else engine_or_url
    try:
        if revision == "head" and set(_current_heads(engine)) == set(head_revisions()):
            return
        with migration_connection(engine) as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    finally:
        if owned:
            engine.dispose()


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection inside one transaction that holds the database-wide migration lock.

    The transaction commits when the block exits normally and rolls back on an exception.
    """
    if engine.dialect.name == "sqlite":
        with _sqlite_migration_connection(engine) as conn:
            yield conn
        return
    with engine.connect() as conn, conn.begin():
        if engine.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(_PG_MIGRATION_LOCK_KEY)))
        yield conn


@contextmanager
def _sqlite_migration_connection(engine: Engine) -> Iterator[Connection]:
    """SQLite: foreign keys off (batch table rebuilds), one ``BEGIN IMMEDIATE`` transaction.

    The foreign-keys pragma only works outside a transaction, so it is set on the driver
    connection before SQLAlchemy begins (see :func:`_begin_sqlite_transaction`). The write lock is
    taken up front, which serialises concurrent migrators; DDL is transactional.
    """
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        conn.execution_options(**{SQLITE_BEGIN_IMMEDIATE: True})
        try:
            raw.execute("PRAGMA foreign_keys=OFF")
            with conn.begin():
                yield conn
                violations = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if violations:
                    raise RuntimeError(f"migration left foreign key violations: {violations[:5]}")
        finally:
            if raw.in_transaction:
                raw.rollback()
            raw.execute("PRAGMA foreign_keys=ON")
