"""Database fixtures shared by the storage suites: every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from ragtrail.storage.db import make_engine

PG_SKIP = "PostgreSQL not configured: set RAGTRAIL_TEST_PG_URL (make test starts one)"


@contextmanager
def fresh_pg_schema(prefix: str) -> Iterator[str]:
    """The URL of a new, empty PostgreSQL schema on ``RAGTRAIL_TEST_PG_URL`` (skips the test
    when none is configured); the schema is dropped afterwards."""
    base = os.environ.get("RAGTRAIL_TEST_PG_URL")
    if not base:
        pytest.skip(PG_SKIP)
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database nobody has opened: a SQLite path that does not exist yet, or a fresh
    PostgreSQL schema dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'meta' / 'ragtrail.db'}"
        return
    with fresh_pg_schema("rt_test") as url:
        yield url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on :func:`db_url` (not migrated)."""
    eng = make_engine(db_url)
    yield eng
    eng.dispose()
