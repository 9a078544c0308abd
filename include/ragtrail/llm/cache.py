"""Content-addressed cache of model calls, kept in the metadata database (table ``llm_cache``).

The key is the SHA-256 of the canonical JSON of everything that determines a completion: backend
name, model id (including any adapter digest), prompt name and version, the decoding parameters and
the exact messages. The stored row shows the model id redacted (credentials in a URL hidden); only
the key's hash covers the full id. Re-running a stage with nothing changed therefore replays every completion
from the cache with zero model calls, and changing any of those inputs misses cleanly.

Only calls that succeeded at the backend level and returned text are stored; errors and empty
outputs are retried on the next run. Inserts are insert-or-ignore, so concurrent writers of the
same key (two workers, a retried task) never fail: the first write wins and both are identical.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.backends.base import GenerationRequest, GenerationResult
from ragtrail.records import sha256_text
from ragtrail.redact import redact
from ragtrail.storage.db import write_transaction
from ragtrail.storage.tables import llm_cache

_SELECT_CHUNK = 500
_INSERT_CHUNK = 200  # 10 columns a row: stays far below SQLite's bound-parameter limit


def canonical_json(data: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8 kept as is."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key_material(
    backend_name: str,
    model_id: str,
    prompt_name: str,
    prompt_version: str,
    request: GenerationRequest,
) -> JsonObject:
    """The exact data hashed into a cache key (also stored with the entry for auditing)."""
    return {
        "backend": backend_name,
        "model_id": model_id,
        "prompt": {"name": prompt_name, "version": prompt_version},
        "params": request.generation_params(),
        "messages": [dict(m) for m in request.messages],
    }


def cache_key(
    backend_name: str,
    model_id: str,
    prompt_name: str,
    prompt_version: str,
    request: GenerationRequest,
) -> str:
    material = cache_key_material(backend_name, model_id, prompt_name, prompt_version, request)
    return sha256_text(canonical_json(material))


@dataclass(frozen=True)
class CacheEntry:
    """One cached completion (what is needed to replay a :class:`GenerationResult`)."""

    key: str
    backend: str
    model_id: str
    prompt_name: str
    prompt_version: str
    material: JsonObject
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = "stop"

    def to_result(self) -> GenerationResult:
        return GenerationResult(
            text=self.text,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            finish_reason=self.finish_reason,
            extra={"cached": True},
        )


def is_cacheable(result: GenerationResult) -> bool:
    """Only successful calls that produced text are worth replaying."""
    return result.error is None and bool(result.text)


class LLMCache(Protocol):
    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]: ...

    def put_many(self, entries: Iterable[CacheEntry]) -> None: ...


class MemoryLLMCache:
    """In-process cache with the same semantics (first write wins); for tests and one-off runs."""

    def __init__(self) -> None:
        self._data: dict[str, CacheEntry] = {}

    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]:
        return {k: self._data[k] for k in keys if k in self._data}

    def put_many(self, entries: Iterable[CacheEntry]) -> None:
        for e in entries:
            self._data.setdefault(e.key, e)

    def __len__(self) -> int:
        return len(self._data)


class NullLLMCache:
    """A cache that stores nothing (every call goes to the backend)."""

    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]:
        return {}

    def put_many(self, entries: Iterable[CacheEntry]) -> None:
        return None


class SqlLLMCache:
    """The ``llm_cache`` table of the metadata DB (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]:
        found: dict[str, CacheEntry] = {}
        unique = list(dict.fromkeys(keys))
        with self.engine.connect() as conn:
            for start in range(0, len(unique), _SELECT_CHUNK):
                chunk = unique[start : start + _SELECT_CHUNK]
                rows = conn.execute(select(llm_cache).where(llm_cache.c.cache_key.in_(chunk)))
                for row in rows.mappings():
                    stored = row["request"] or {}
                    found[row["cache_key"]] = CacheEntry(
                        key=row["cache_key"],
                        backend=row["backend"],
                        model_id=row["model_id"],
                        prompt_name=row["prompt_name"],
                        prompt_version=row["prompt_version"],
                        material=stored.get("material", {}),
                        text=row["response_text"],
                        prompt_tokens=row["prompt_tokens"],
                        completion_tokens=row["completion_tokens"],
                        finish_reason=stored.get("finish_reason", "stop"),
                    )
        return found

    def put_many(self, entries: Iterable[CacheEntry]) -> None:
        """Store ``entries`` (first write wins). The key keeps the hash of the full model id;
        the stored model id, in its column and in the audited material, is redacted."""
        now = datetime.now(UTC)
        rows = {
            e.key: {
                "cache_key": e.key,
                "backend": e.backend[:64],
                "model_id": redact(e.model_id)[:256],
                "prompt_name": e.prompt_name[:128],
                "prompt_version": e.prompt_version[:32],
                "request": {
                    "material": _redacted_material(e.material),
                    "finish_reason": e.finish_reason,
                },
                "response_text": e.text,
                "prompt_tokens": e.prompt_tokens,
                "completion_tokens": e.completion_tokens,
                "created_at": now,
            }
            for e in entries
        }
        if not rows:
            return
        insert_ignore = _insert_ignore_factory(self.engine)
        values = list(rows.values())
        if insert_ignore is not None:
            with write_transaction(self.engine) as conn:
                for start in range(0, len(values), _INSERT_CHUNK):
                    conn.execute(insert_ignore(values[start : start + _INSERT_CHUNK]))
            return
        # Other dialects: insert row by row and ignore duplicates.
        for row in values:
            try:
                with write_transaction(self.engine) as conn:
                    conn.execute(llm_cache.insert().values(**row))
            except IntegrityError:
                continue

    def count(self) -> int:
        from sqlalchemy import func

        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(llm_cache)).scalar_one())


def _redacted_material(material: JsonObject) -> JsonObject:
    """The key material as stored for auditing: its model id redacted (the prompt messages are
    kept as they were sent)."""
    model_id = material.get("model_id")
    if not isinstance(model_id, str):
        return material
    return {**material, "model_id": redact(model_id)}


def _insert_ignore_factory(engine: Engine) -> Any:
    """``rows -> INSERT ... ON CONFLICT (cache_key) DO NOTHING`` for SQLite / PostgreSQL."""
    dialect = engine.dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        return None
    return lambda rows: (
        insert(llm_cache).values(rows).on_conflict_do_nothing(index_elements=["cache_key"])
    )
