"""Progress updates as log lines (what Airflow task logs show: throttled, with rate and ETA)
and the updates of retrieval evaluation."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ragtrail.evaluate.retrieval.evaluator import collect_candidates
from ragtrail.progress import LogProgress, ProgressUpdate, progress_line
from ragtrail.records import QAItem, SearchHit


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_log_progress_first_every_30_s_and_last(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    sink = LogProgress(logging.getLogger("test.progress"), every_s=30.0, clock=clock)
    caplog.set_level(logging.INFO, logger="test.progress")
    for t, done in [(0, 1), (10, 5), (31, 6), (45, 8), (50, 10)]:
        clock.now = t
        sink(ProgressUpdate("model calls q", done, 10))
    assert [r.getMessage() for r in caplog.records] == [
        "model calls q 1/10",
        "model calls q 6/10, 0.2/s, ETA 21 s",  # 6 in 31 s; 4 left at 0.194/s
        "model calls q 10/10, 0.2/s, done in 50 s",
    ]


def test_log_progress_restarts_a_finished_task(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    sink = LogProgress(logging.getLogger("test.progress"), clock=clock)
    caplog.set_level(logging.INFO, logger="test.progress")
    sink(ProgressUpdate("shards", 2, 2))
    clock.now = 100.0
    sink(ProgressUpdate("shards", 1, 3))
    assert [r.getMessage() for r in caplog.records] == ["shards 2/2", "shards 1/3"]


def test_progress_line_shows_cache_hits() -> None:
    update = ProgressUpdate("model calls label", 120, 300, cache_hits=20)
    assert (
        progress_line(update, 60.0) == "model calls label 120/300, 2.0/s, ETA 90 s (20 cache hits)"
    )
    assert progress_line(ProgressUpdate("x", 0, 5), 10.0) == "x 0/5"


class OneHitIndex:
    """An index double answering every query with one hit per modality, counting queries."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def search_lexical(self, query: str, k: int) -> list[SearchHit]:
        self.queries.append(query)
        return [SearchHit("c#0", "doc", 1.0)]

    def search_dense(self, vector: np.ndarray, k: int) -> list[SearchHit]:
        return [SearchHit("c#0", "doc", float(vector[0]))]


def test_retrieval_queries_report_each_question() -> None:
    items = [QAItem(qid=f"q{i}", question=f"question {i}", label="fact_single") for i in range(3)]
    heard: list[ProgressUpdate] = []
    index = OneHitIndex()
    cands = collect_candidates(
        index,  # type: ignore[arg-type]
        lambda texts: np.ones((len(texts), 2), dtype=np.float32),
        items,
        5,
        heard.append,
    )
    assert len(cands) == 3 and index.queries == ["question 0", "question 1", "question 2"]
    assert [(u.task, u.done, u.total) for u in heard] == [
        ("retrieval queries", 1, 3),
        ("retrieval queries", 2, 3),
        ("retrieval queries", 3, 3),
    ]
