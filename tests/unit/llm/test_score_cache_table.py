"""The score cache creates its table safely while other connections write (SQLite, WAL)."""

from __future__ import annotations

import threading

from sqlalchemy import event, text

from ragtrail.llm.score_cache import SqlScoreCache
from ragtrail.storage.db import make_engine, write_transaction


def test_the_table_is_created_while_another_connection_commits(tmp_path) -> None:
    """A check then a ``CREATE`` in a deferred transaction fails at once with "database is
    locked" when another connection commits in between (SQLite cannot upgrade a stale read
    snapshot to a write and does not wait). Here another writer commits exactly then; the cache
    takes the write lock first, so that writer waits for it instead."""
    engine = make_engine(f"sqlite:///{tmp_path}/m.db")
    other = make_engine(f"sqlite:///{tmp_path}/m.db")
    with write_transaction(other) as conn:
        conn.execute(text("CREATE TABLE notes (n INTEGER)"))
    committed = threading.Event()

    def write_elsewhere() -> None:
        with write_transaction(other) as conn:
            conn.execute(text("INSERT INTO notes VALUES (1)"))
        committed.set()

    @event.listens_for(engine, "before_cursor_execute")
    def commit_in_between(conn, cursor, statement, *args) -> None:
        if statement.lstrip().upper().startswith("CREATE TABLE LOGPROB_CACHE"):
            writer = threading.Thread(target=write_elsewhere)
            writer.start()
            writer.join(timeout=1.0)  # done at once unless this transaction holds the lock

    cache = SqlScoreCache(engine)
    assert cache.count() == 0
    assert committed.wait(timeout=30)  # the other writer went on once the table existed
    with other.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM notes")).scalar_one() == 1
    SqlScoreCache(other)  # the table exists: nothing to do


def test_holds_model_finds_a_models_scores_by_the_id_they_are_stored_under(tmp_path) -> None:
    cache = SqlScoreCache(make_engine(f"sqlite:///{tmp_path}/m.db"))
    secret = "s3://bucket/scorer?X-Amz-Signature=abc123"  # stored redacted
    assert not cache.holds_model(secret)
    cache.put_many({"k1": -1.5}, model_id=secret)
    assert cache.holds_model(secret)
    assert not cache.holds_model("builtin:another-scorer")
