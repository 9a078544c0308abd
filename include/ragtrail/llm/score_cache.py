"""Stores for cached log-probabilities (:class:`ragtrail.llm.scoring.CachedLogProbScorer`).

A score is a pure function of (model id, chat messages, continuation), so it is cached under the
SHA-256 of their canonical JSON and never recomputed. Two stores: :class:`MappingScoreCache`
(any ``MutableMapping[str, float]``, e.g. a dict, for tests and one-off runs) and
:class:`SqlScoreCache` (table ``logprob_cache`` of the metadata database).

The table is derived data that can be dropped at any time, so it is not part of the migrated
schema (:mod:`ragtrail.storage.tables`): :class:`SqlScoreCache` creates it on first use, in its
own :class:`~sqlalchemy.MetaData`, in a transaction that takes SQLite's write lock first (a check
then a ``CREATE`` in a deferred transaction fails at once with "database is locked" when another
connection commits in between), accepting a table a concurrent creator made. Inserts are
insert-or-ignore, so concurrent writers of one key never fail (the first write wins; both values
are the same computation).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Float,
    MetaData,
    String,
    Table,
    func,
    inspect,
    select,
)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from ragtrail.redact import redact
from ragtrail.storage.db import write_transaction

_SELECT_CHUNK = 500
_INSERT_CHUNK = 200

score_metadata = MetaData(naming_convention={"pk": "pk_%(table_name)s"})
"""Metadata of the score cache alone (kept out of the migrated schema, see the module doc)."""

logprob_cache = Table(
    "logprob_cache",
    score_metadata,
    Column("key", String(64), primary_key=True),  # sha256 of (model_id, messages, continuation)
    Column("model_id", String(256), nullable=False),  # redacted; the key hashes the full id
    Column("value", Float, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


class ScoreStore(Protocol):
    """Where :class:`~ragtrail.llm.scoring.CachedLogProbScorer` keeps its values."""

    def get_many(self, keys: Sequence[str]) -> dict[str, float]:
        """The stored values of those ``keys`` that are stored."""
        ...

    def put_many(self, values: Mapping[str, float], *, model_id: str) -> None:
        """Store finite ``values`` by key (first write wins)."""
        ...


class MappingScoreCache:
    """A store over any ``MutableMapping[str, float]`` (a dict by default)."""

    def __init__(self, data: MutableMapping[str, float] | None = None) -> None:
        self.data: MutableMapping[str, float] = {} if data is None else data

    def get_many(self, keys: Sequence[str]) -> dict[str, float]:
        return {k: float(self.data[k]) for k in keys if k in self.data}

    def put_many(self, values: Mapping[str, float], *, model_id: str) -> None:
        for key, value in values.items():
            self.data.setdefault(key, float(value))

    def __len__(self) -> int:
        return len(self.data)


class SqlScoreCache:
    """The ``logprob_cache`` table (SQLite or PostgreSQL), created when missing."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        try:
            with write_transaction(engine) as conn:
                score_metadata.create_all(conn, checkfirst=True)
        except (IntegrityError, OperationalError, ProgrammingError):
            if not inspect(engine).has_table(logprob_cache.name):
                raise  # not a concurrent creation: a real error

    def get_many(self, keys: Sequence[str]) -> dict[str, float]:
        found: dict[str, float] = {}
        unique = list(dict.fromkeys(keys))
        with self.engine.connect() as conn:
            for start in range(0, len(unique), _SELECT_CHUNK):
                chunk = unique[start : start + _SELECT_CHUNK]
                rows = conn.execute(
                    select(logprob_cache.c.key, logprob_cache.c.value).where(
                        logprob_cache.c.key.in_(chunk)
                    )
                )
                found.update({row.key: float(row.value) for row in rows})
        return found

    def put_many(self, values: Mapping[str, float], *, model_id: str) -> None:
        """Insert ``values`` (insert-or-ignore); the stored model id is redacted."""
        now = datetime.now(UTC)
        stored_id = _stored_id(model_id)
        rows = [
            {"key": k, "model_id": stored_id, "value": float(v), "created_at": now}
            for k, v in values.items()
        ]
        if not rows:
            return
        insert_ignore = _insert_ignore(self.engine)
        if insert_ignore is not None:
            with write_transaction(self.engine) as conn:
                for start in range(0, len(rows), _INSERT_CHUNK):
                    conn.execute(insert_ignore(rows[start : start + _INSERT_CHUNK]))
            return
        for row in rows:  # other dialects: row by row, duplicates ignored
            try:
                with write_transaction(self.engine) as conn:
                    conn.execute(logprob_cache.insert().values(**row))
            except IntegrityError:
                continue

    def holds_model(self, model_id: str) -> bool:
        """Whether any score of ``model_id`` is stored (matched as :meth:`put_many` stores it)."""
        stored_id = _stored_id(model_id)
        with self.engine.connect() as conn:
            found = conn.execute(
                select(logprob_cache.c.key).where(logprob_cache.c.model_id == stored_id).limit(1)
            ).first()
        return found is not None

    def count(self) -> int:
        """Rows in the table (all models)."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(logprob_cache)).scalar_one())


def _stored_id(model_id: str) -> str:
    """The ``model_id`` column's value for ``model_id``: redacted, cut to the column's width."""
    return redact(model_id)[:256]


def _insert_ignore(engine: Engine) -> Any:
    """``rows -> INSERT ... ON CONFLICT (key) DO NOTHING`` on SQLite / PostgreSQL, else None."""
    dialect = engine.dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        return None
    return lambda rows: (
        insert(logprob_cache).values(rows).on_conflict_do_nothing(index_elements=["key"])
    )
