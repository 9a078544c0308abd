"""SQL helpers shared by the metadata stores: batched, idempotent writes and row conversion.

SQLAlchemy Core on SQLite or PostgreSQL. Upserts use each dialect's ``INSERT ... ON CONFLICT`` so
that a retried pipeline task leaves the same rows as one successful run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Self, TypeVar

from sqlalchemy import Connection, Engine, Table, func, select
from sqlalchemy.engine import URL, RowMapping

from ragtrail.storage.db import make_engine, upgrade

Row = dict[str, Any]
T = TypeVar("T")

BATCH_SIZE = 500
"""Largest IN list / executemany batch sent in one statement."""


class SqlStore:
    """Base of the stores: one engine, one transaction per method."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def from_url(cls, url: str | URL, *, migrate: bool = True) -> Self:
        """Open the database at ``url``, migrating it to the latest schema unless told not to."""
        engine = make_engine(url)
        if migrate:
            upgrade(engine)
        return cls(engine)


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    key_cols: Sequence[str],
    update_cols: Sequence[str] | None = None,
) -> None:
    """Insert ``rows``, updating ``update_cols`` on a key conflict (default: all non-key columns;
    an empty list means "do nothing" on conflict). Later rows with the same key win.
    """
    uniform = uniform_rows(rows)
    if not uniform:
        return
    deduped = list({tuple(r[k] for k in key_cols): r for r in uniform}.values())
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise NotImplementedError(f"upsert is not implemented for {conn.dialect.name}")
    stmt = insert(table)
    if update_cols is None:
        update_cols = [c for c in deduped[0] if c not in key_cols]
    if update_cols:
        stmt = stmt.on_conflict_do_update(
            index_elements=list(key_cols), set_={c: stmt.excluded[c] for c in update_cols}
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(key_cols))
    for batch in batches(deduped, BATCH_SIZE):
        conn.execute(stmt, batch)


def insert(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Plain batched insert of ``rows``."""
    for batch in batches(uniform_rows(rows), BATCH_SIZE):
        conn.execute(table.insert(), batch)


def count_in_corpus(engine: Engine, table: Table, corpus: str) -> int:
    """Number of rows of ``table`` whose ``corpus`` column is ``corpus``."""
    query = select(func.count()).select_from(table).where(table.c.corpus == corpus)
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def checked_row(table: Table, row: Mapping[str, Any], **fixed: Any) -> Row:
    """Copy ``row``, reject unknown columns and set ``fixed`` columns (which must not disagree)."""
    out = dict(row)
    unknown = set(out) - set(table.c.keys())
    if unknown:
        raise ValueError(f"unknown {table.name} columns {sorted(unknown)}")
    for key, value in fixed.items():
        if out.get(key, value) != value:
            raise ValueError(f"{table.name} row has {key}={out[key]!r}, expected {value!r}")
        out[key] = value
    return out


def uniform_rows(rows: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Give every row the same keys (missing ones become NULL) and plain values for enums."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return [{k: _plain(r.get(k)) for k in keys} for r in rows]


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def as_dict(row: RowMapping) -> Row:
    """A result row as a dict, with datetimes made timezone-aware UTC (SQLite drops the zone)."""
    return {k: utc(v) if isinstance(v, datetime) else v for k, v in row.items()}


def utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime; a naive one is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Consecutive slices of ``items`` of at most ``size`` elements."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
