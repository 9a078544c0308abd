"""Engines and schema migrations for the metadata database (SQLite or PostgreSQL).

The Alembic environment ships inside the package (``storage/migrations``), so no ``alembic.ini`` is
needed: :func:`upgrade` runs it programmatically. Upgrades are serialised across processes — with a
transaction-scoped advisory lock on PostgreSQL and ``BEGIN IMMEDIATE`` on SQLite — and each upgrade
runs in one transaction, so concurrent callers see either the old or the new schema, never half.
"""

from __future__ import annotations

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

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
"""The packaged Alembic script directory."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
_PG_MIGRATION_LOCK_KEY = 0x7261677472_61696C  # b"ragtrail" as a (positive) 64-bit integer
_MEMORY_DATABASES = frozenset({"", ":memory:"})


def utcnow() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


def make_engine(url: str | URL, **engine_kwargs: Any) -> Engine:
    """Create an engine for ``url`` with ragtrail's connection settings.

    SQLite: the parent directory is created, and every connection gets WAL journaling, enforced
    foreign keys and a busy timeout. PostgreSQL: connections are pinged before use.
    Extra keyword arguments go to :func:`sqlalchemy.create_engine`.
    """
    sa_url = make_url(url)
    backend = sa_url.get_backend_name()
    if backend == "sqlite":
        _ensure_sqlite_parent_dir(sa_url)
        engine = create_engine(sa_url, **engine_kwargs)
        event.listen(engine, "connect", _configure_sqlite_connection)
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
    """Per-connection SQLite pragmas; the busy timeout first so the WAL switch can wait."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


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

    pysqlite does not open transactions around DDL by itself, so the driver is switched to
    autocommit mode and the transaction is opened explicitly; SQLAlchemy's commit/rollback then
    ends it. The write lock is taken up front, which serialises concurrent migrators.
    """
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        saved_isolation = raw.isolation_level
        raw.isolation_level = None
        try:
            raw.execute("PRAGMA foreign_keys=OFF")
            with conn.begin():
                raw.execute("BEGIN IMMEDIATE")
                yield conn
                violations = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if violations:
                    raise RuntimeError(f"migration left foreign key violations: {violations[:5]}")
        finally:
            if raw.in_transaction:
                raw.rollback()
            raw.execute("PRAGMA foreign_keys=ON")
            raw.isolation_level = saved_isolation
