"""Alembic environment for ragtrail's metadata database.

Normally driven by :func:`ragtrail.storage.db.upgrade`, which passes an open connection (holding the
migration lock) in ``config.attributes["connection"]``. When run from the ``alembic`` command line
instead, the URL comes from ``sqlalchemy.url`` in the ini file or else from ragtrail's settings.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from ragtrail.storage.tables import metadata

config = context.config
target_metadata = metadata


def _database_url() -> str:
    """The URL for command-line use: the ini file's, else the configured ragtrail database."""
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from ragtrail.config import Settings

    return Settings().resolved_database_url


def _configure_options(dialect_name: str) -> dict[str, object]:
    """Options shared by online and offline runs; batch mode lets SQLite ALTER tables."""
    return {
        "target_metadata": target_metadata,
        "render_as_batch": dialect_name == "sqlite",
        "compare_type": True,
    }


def run_migrations_offline() -> None:
    """Emit SQL to stdout (``alembic upgrade --sql``) without a database connection."""
    from sqlalchemy.engine import make_url

    url = _database_url()
    context.configure(
        url=url,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **_configure_options(make_url(url).get_backend_name()),
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_with_connection(connection: Connection) -> None:
    context.configure(connection=connection, **_configure_options(connection.dialect.name))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through the caller's connection, or open a locked one for command-line runs."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_with_connection(connection)
        return
    from ragtrail.storage.db import make_engine, migration_connection

    engine = make_engine(_database_url())
    try:
        with migration_connection(engine) as conn:
            _run_with_connection(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
