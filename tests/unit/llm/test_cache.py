"""Cache keys are stable and sensitive to every input; the SQL cache round-trips on SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine

from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.cache import CacheEntry, MemoryLLMCache, SqlLLMCache, cache_key
from ragtrail.storage import tables

MSGS = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def key(**overrides: object) -> str:
    req_kw: dict[str, object] = {"messages": MSGS, "max_new_tokens": 64, "seed": 1}
    ident = {"backend": "transformers", "model": "m", "name": "p", "version": "1"}
    for k, v in overrides.items():
        (ident if k in ident else req_kw)[k] = v
    req = GenerationRequest(**req_kw)  # type: ignore[arg-type]
    return cache_key(ident["backend"], ident["model"], ident["name"], ident["version"], req)  # type: ignore[arg-type]


def test_key_is_stable_and_canonical() -> None:
    k = key()
    assert k == key() and len(k) == 64
    # int vs float spelling of the same parameter is the same request
    assert key(temperature=0) == key(temperature=0.0)
    # dict insertion order inside the schema does not matter
    assert key(json_schema={"a": 1, "b": 2}) == key(json_schema={"b": 2, "a": 1})
    # pinned value: changing the key layout invalidates every cache, so it must be deliberate
    assert k == "b486865bd34f9808f2a8cb4af10fffe6e8985266b5e243e690181d6187a2caff"


@pytest.mark.parametrize(
    "change",
    [
        {"backend": "openai"},
        {"model": "m2"},
        {"name": "q"},
        {"version": "2"},
        {"max_new_tokens": 65},
        {"temperature": 0.5},
        {"top_p": 0.9},
        {"seed": 2},
        {"stop": ("\n",)},
        {"json_schema": {"type": "object"}},
        {"messages": [{"role": "user", "content": "u"}]},
    ],
)
def test_key_changes_with_every_input(change: dict[str, object]) -> None:
    assert key(**change) != key()


def entry(k: str, text: str) -> CacheEntry:
    return CacheEntry(k, "transformers", "m", "p", "1", {"x": 1}, text, 10, 3, "length")


def test_sql_cache_round_trip_and_insert_or_ignore(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'meta.db'}")
    tables.metadata.create_all(engine)
    cache = SqlLLMCache(engine)
    assert cache.get_many(["nope"]) == {}
    cache.put_many([entry("k1", "hello"), entry("k2", "world")])
    cache.put_many([entry("k1", "DIFFERENT")])  # first write wins, no error
    got = cache.get_many(["k1", "k2", "k3"])
    assert set(got) == {"k1", "k2"}
    assert got["k1"].text == "hello" and got["k1"].finish_reason == "length"
    assert got["k1"].prompt_tokens == 10 and got["k1"].completion_tokens == 3
    assert got["k1"].material == {"x": 1}
    res = got["k2"].to_result()
    assert res.ok and res.text == "world" and res.extra["cached"] is True
    assert cache.count() == 2
    # a second engine (another process) sees the same entries
    other = SqlLLMCache(create_engine(f"sqlite:///{tmp_path / 'meta.db'}"))
    assert other.get_many(["k2"])["k2"].text == "world"


def test_sql_cache_many_keys(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'meta.db'}")
    tables.metadata.create_all(engine)
    cache = SqlLLMCache(engine)
    cache.put_many([entry(f"k{i}", f"t{i}") for i in range(1200)])
    got = cache.get_many([f"k{i}" for i in range(0, 1200, 1)])
    assert len(got) == 1200 and got["k777"].text == "t777"


def test_memory_cache_first_write_wins() -> None:
    cache = MemoryLLMCache()
    cache.put_many([entry("a", "1"), entry("a", "2")])
    assert cache.get_many(["a"])["a"].text == "1" and len(cache) == 1
