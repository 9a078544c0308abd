"""Runs, the generalised metrics history and per-query results, on SQLite and PostgreSQL.

Includes migration 0003 on existing rows: points written by the 0002 schema become evaluation
``retrieval`` with facets ``{label, text_weight}``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import IntegrityError

from ragtrail.evaluate.contract import Aggregate, EvaluationResult, QueryValue, facet_key
from ragtrail.storage import tables
from ragtrail.storage.db import alembic_config, upgrade, utcnow
from ragtrail.storage.runs_store import (
    ABANDONED,
    FAILED,
    RUNNING,
    MetricPoint,
    RunOwner,
    RunRecord,
    RunStore,
)


@pytest.fixture
def store(engine: Engine) -> RunStore:
    upgrade(engine)
    return RunStore(engine)


def _metric(
    metric: str, label: str, value: float | None, text_weight: float | None = 0.5, **extra: Any
) -> MetricPoint:
    facets: dict[str, Any] = {"label": label}
    if text_weight is not None:
        facets["text_weight"] = text_weight
    fields: dict[str, Any] = {
        "run_id": "r1",
        "evaluation": "retrieval",
        "metric": metric,
        "facets": facets,
        "value": value,
        "ci_low": None if value is None else value - 0.1,
        "ci_high": None if value is None else value + 0.1,
        "n": 20,
        "corpus": "handbook",
        "corpus_snapshot": "s1",
        "qa_set_version": "qa-1",
        "models": {"index_backend": "embedded", "embedding_model": "mini"},
    }
    fields.update(extra)
    return MetricPoint(**fields)


# -- runs ------------------------------------------------------------------------------------


def test_run_lifecycle(store: RunStore) -> None:
    store.start_run("r1", "nightly", {"seed": 13, "weights": [0.0, 0.5]})
    run = store.get_run("r1")
    assert isinstance(run, RunRecord)
    assert run.status == "running" and run.params == {"seed": 13, "weights": [0.0, 0.5]}
    store.finish_run("r1", "complete", "s3://b/reports/r1/index.html")
    run = store.get_run("r1")
    assert run.status == "complete" and run.report_uri.endswith("index.html")
    assert run.finished_at >= run.started_at
    store.finish_run("r1", "success")  # the report location stays
    assert store.get_run("r1").report_uri.endswith("index.html")
    store.start_run("r1", "nightly", {"seed": 14})
    run = store.get_run("r1")
    assert run.status == "running" and run.params == {"seed": 14}
    assert run.finished_at is None and run.report_uri is None
    with pytest.raises(KeyError):
        store.finish_run("nope", "failed")
    assert store.get_run("nope") is None


def test_run_columns_come_from_params_or_arguments(store: RunStore) -> None:
    params = {"corpus": "hb", "snapshot_id": "s9", "qa_set_version": "qa-x"}
    store.start_run("r1", "evaluate_retrieval", params)
    run = store.get_run("r1")
    assert (run.corpus, run.snapshot_id, run.qa_set_version) == ("hb", "s9", "qa-x")
    store.start_run("r2", "evaluate_retrieval", {}, corpus="other", qa_set_version="qa-y")
    assert store.get_run("r2").corpus == "other"
    with pytest.raises(ValueError, match="non-finite"):
        store.start_run("r3", "x", {"weight": float("nan")})


def test_list_runs_newest_first_with_counts(store: RunStore) -> None:
    store.start_run("old", "evaluate_retrieval", {"corpus": "hb"})
    store.start_run("new", "evaluate_retrieval", {"corpus": "hb"})
    store.start_run("elsewhere", "evaluate_retrieval", {"corpus": "other"})
    store.replace_metrics("old", [_metric("mrr", "summary", 0.5, run_id="old")])
    store.replace_query_results(
        "old", "retrieval", [QueryValue("q1", {"label": "summary"}, "mrr", 1.0)]
    )
    listed = store.list_runs("hb")
    assert [item.run.run_id for item in listed] == ["new", "old"]
    assert (listed[1].n_metrics, listed[1].n_query_values, listed[1].evaluations) == (
        1,
        1,
        ("retrieval",),
    )
    assert (listed[0].n_metrics, listed[0].evaluations) == (0, ())
    assert len(store.list_runs()) == 3


# -- metrics history ---------------------------------------------------------------------------


def test_previous_run_is_the_latest_earlier_run_on_the_same_version(store: RunStore) -> None:
    def start(run_id: str, version: str, corpus: str = "hb", kind: str = "evaluate_retrieval"):
        store.start_run(run_id, kind, {"corpus": corpus, "qa_set_version": version})
        store.finish_run(run_id, "success")

    start("n1.gold", "gs-1")
    start("n1.generated", "ts-1")
    start("n2.gold", "gs-1")
    start("other-corpus", "gs-1", corpus="other")
    start("other-kind", "gs-1", kind="nightly")
    start("n3.gold", "gs-1")
    start("n3.generated", "ts-2")
    assert store.previous_run("n1.gold") is None
    previous = store.previous_run("n3.gold")
    assert previous is not None and previous.run_id == "n2.gold"
    assert store.previous_run("n2.gold").run_id == "n1.gold"  # type: ignore[union-attr]
    assert store.previous_run("n3.generated") is None  # a new version has no history
    # Runs that did not complete are never a previous run.
    start("n4.gold", "gs-1")
    store.start_run("n5.gold", "evaluate_retrieval", {"corpus": "hb", "qa_set_version": "gs-1"})
    start("n6.gold", "gs-1")
    store.claim_run("n6.gold", None)
    assert store.fail_run("n6.gold", "6 of 6 answers failed")
    store.start_run("n7.gold", "evaluate_retrieval", {"corpus": "hb", "qa_set_version": "gs-1"})
    assert store.previous_run("n7.gold").run_id == "n4.gold"  # type: ignore[union-attr]
    store.start_run("bare", "evaluate_retrieval", {})
    assert store.previous_run("bare") is None
    with pytest.raises(KeyError):
        store.previous_run("missing")


def test_replace_metrics_is_idempotent(store: RunStore) -> None:
    rows = [
        _metric("ndcg@10", "summary", 0.7),
        _metric("ndcg@10", "summary", 0.6, text_weight=0.0),
        _metric("ndcg@10", "reasoning", 0.5),
        _metric("citation_f1", "summary", 0.9, text_weight=None),
    ]
    store.replace_metrics("r1", rows)
    store.replace_metrics("r1", rows)
    assert len(store.metrics_history()) == 4
    store.replace_metrics("r2", [_metric("ndcg@10", "summary", 0.8, run_id="r2")])
    store.replace_metrics("r1", rows[:2])
    history = store.metrics_history(metric="ndcg@10", label="summary")
    # oldest first; r1 was replaced after r2, so its points are now the newest
    assert [(h.run_id, h.text_weight, h.value) for h in history] == [
        ("r2", 0.5, 0.8),
        ("r1", 0.5, 0.7),
        ("r1", 0.0, 0.6),
    ]
    assert all(h.created_at.utcoffset() == timedelta(0) for h in history)
    everything = store.metrics_history()
    assert len(everything) == 3
    assert store.metrics_history(limit=2) == everything[-2:]
    assert store.metrics_history(label="unanswerable") == []


def test_replace_metrics_rejects_duplicate_points(store: RunStore) -> None:
    rows = [_metric("f1", "summary", 0.1, None), _metric("f1", "summary", 0.2, None)]
    with pytest.raises(ValueError, match="duplicate"):
        store.replace_metrics("r1", rows)
    with pytest.raises(ValueError, match="run"):
        store.replace_metrics("r1", [_metric("f1", "summary", 0.1, run_id="r2")])
    assert store.metrics_history() == []


def test_database_enforces_one_point_per_facet_set_even_without_text_weight(
    engine: Engine, store: RunStore
) -> None:
    row = {
        "run_id": "r1",
        "corpus_snapshot": "s",
        "qa_set_version": "q",
        "metric": "f1",
        "n": 1,
        "created_at": utcnow(),
        "evaluation": "citations",
        "facet_key": facet_key({"mixture": "1-3/3/3"}),
        "facets": {"mixture": "1-3/3/3"},
        "models": {},
        "judges": {},
        "undefined": {},
        "value": 0.5,
    }
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(tables.metrics_history.insert(), [row, dict(row)])


def test_any_facet_set_round_trips_and_is_queryable(store: RunStore) -> None:
    point = _metric(
        "citation_f1",
        "summary",
        None,
        text_weight=None,
        evaluation="citations",
        facets={"mixture": "1-3/3/3", "scenario": "rtg-vanilla", "stratum": 2},
        judges={"entailment": "nli-v1"},
        undefined={
            "value": "no citation in any answer",
            "ci_low": "no citation in any answer",
            "ci_high": "no citation in any answer",
        },
    )
    store.replace_metrics("r1", [point, _metric("mrr", "summary", 0.25)])
    found = store.metrics_history(
        facets={"stratum": 2, "scenario": "rtg-vanilla", "mixture": "1-3/3/3"}
    )
    assert len(found) == 1
    got = found[0]
    assert got.value is None and got.ci_low is None and got.label is None
    assert got.undefined["value"] == "no citation in any answer"
    assert got.judges == {"entailment": "nli-v1"} and got.evaluation == "citations"
    assert got.facets == {"mixture": "1-3/3/3", "scenario": "rtg-vanilla", "stratum": 2}
    assert [p.metric for p in store.metrics_history(evaluation="retrieval")] == ["mrr"]
    assert [p.metric for p in store.metrics_history(corpus="handbook")] == ["citation_f1", "mrr"]
    with pytest.raises(ValueError, match="without a reason"):
        store.replace_metrics("r1", [_metric("mrr", "summary", None)])


# -- per-query results and whole evaluations -----------------------------------------------------


def test_record_evaluation_stores_points_and_per_query_values_together(store: RunStore) -> None:
    facets = {"label": "summary", "text_weight": 0.5}
    result = EvaluationResult(
        evaluator="retrieval",
        config={"seed": 1},
        primary_metric="recall@5",
        greater_is_better=True,
        queries=(
            QueryValue("q1", facets, "recall@5", 1.0),
            QueryValue("q2", facets, "recall@5", 0.0),
        ),
        aggregates=(
            Aggregate.of(
                "recall@5",
                facets,
                value=0.5,
                ci_low=float("nan"),
                ci_high=float("nan"),
                n=2,
                reasons={"ci_low": "no bootstrap", "ci_high": "no bootstrap"},
            ),
        ),
    )
    for _ in range(2):  # idempotent
        store.record_evaluation(
            "r1",
            result,
            corpus="hb",
            corpus_snapshot="s1",
            qa_set_version="qa-1",
            models={"embedding_model": "mini"},
        )
    (point,) = store.metrics_history()
    assert (point.value, point.ci_low, point.ci_high, point.n) == (0.5, None, None, 2)
    assert point.undefined == {"ci_low": "no bootstrap", "ci_high": "no bootstrap"}
    stored = store.query_results("r1")
    assert [(q.qid, q.value, q.facets) for q in stored] == [
        ("q1", 1.0, facets),
        ("q2", 0.0, facets),
    ]
    assert store.query_results("r1", "citations") == []


# -- migration 0003 on existing rows --------------------------------------------------------------


def test_migration_0003_turns_old_points_into_retrieval_facets(engine: Engine) -> None:
    upgrade(engine, "0002")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (run_id, kind, status, started_at, params) "
                "VALUES ('old', 'evaluate_retrieval', 'success', :t, :p)"
            ),
            {"t": utcnow(), "p": '{"corpus": "hb", "qa_set_version": "qa-1", "snapshot_id": "s1"}'},
        )
        for label, weight, value in (("summary", 0.5, 0.75), ("summary", 0.0, 0.5), ("x", None, 1)):
            conn.execute(
                text(
                    "INSERT INTO metrics_history (run_id, corpus_snapshot, qa_set_version, "
                    "backend, model, metric, label, text_weight, value, ci_low, ci_high, "
                    "n_questions, created_at) VALUES ('old', 's1', 'qa-1', 'embedded', 'mini', "
                    "'recall@5', :l, :w, :v, NULL, NULL, 4, :t)"
                ),
                {"l": label, "w": weight, "v": value, "t": utcnow()},
            )
    upgrade(engine)
    store = RunStore(engine)
    run = store.get_run("old")
    assert (run.corpus, run.snapshot_id, run.qa_set_version) == ("hb", "s1", "qa-1")
    points = {p.facet_key: p for p in store.metrics_history()}
    assert set(points) == {
        '{"label":"summary","text_weight":0.5}',
        '{"label":"summary","text_weight":0.0}',
        '{"label":"x"}',
    }
    point = points['{"label":"summary","text_weight":0.5}']
    assert (point.evaluation, point.corpus, point.value, point.n) == ("retrieval", "hb", 0.75, 4)
    assert point.models == {"index_backend": "embedded", "embedding_model": "mini"}
    assert point.judges == {} and point.undefined == {}
    # and back: downgrade keeps what 0002 can hold
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT label, text_weight, backend, n_questions FROM metrics_history")
        ).all()
    assert sorted(rows, key=str) == sorted(
        [
            ("summary", 0.5, "embedded", 4),
            ("summary", 0.0, "embedded", 4),
            ("x", None, "embedded", 4),
        ],
        key=str,
    )


# -- owners, heartbeats, failed and abandoned runs (issue 22) ------------------------------------


def _gone_pid() -> int:
    """The pid of a process that has exited and been reaped (a killed run's owner)."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_failed_run_keeps_its_reason_until_it_is_claimed_again(store: RunStore) -> None:
    owner = RunOwner.this_process()
    store.start_run("r1", "evaluate_retrieval", {"corpus": "hb"}, owner=owner)
    run = store.get_run("r1")
    assert (run.owner_host, run.owner_pid) == (owner.host, owner.pid)
    assert run.heartbeat_at is not None and run.complete is False
    assert store.fail_run("r1", "citations failed: 6 of 6 answers failed")
    run = store.get_run("r1")
    assert (run.status, run.status_detail) == (FAILED, "citations failed: 6 of 6 answers failed")
    assert run.finished_at is not None and not run.complete
    assert run.state_text() == "failed (citations failed: 6 of 6 answers failed)"
    assert not store.fail_run("r1", "again")  # only a running run is failed
    assert not store.fail_run("nope", "x")
    claimed = store.claim_run("r1", RunOwner("elsewhere", None))
    assert (claimed.status, claimed.status_detail, claimed.finished_at) == (RUNNING, None, None)
    assert (claimed.owner_host, claimed.owner_pid, claimed.started_at) == (
        "elsewhere",
        None,
        run.started_at,
    )
    assert "still running (host elsewhere, last heartbeat" in claimed.state_text()
    store.finish_run("r1", "success")
    assert store.get_run("r1").complete
    with pytest.raises(KeyError):
        store.claim_run("nope", None)
    with pytest.raises(ValueError, match="failed or abandoned"):
        store.fail_run("r1", "x", status="success")


def test_stale_runs_are_abandoned_with_the_reason(store: RunStore) -> None:
    here = RunOwner.this_process()
    store.start_run("alive", "evaluate_retrieval", {}, owner=here)
    store.start_run("killed", "evaluate_retrieval", {}, owner=RunOwner(here.host, _gone_pid()))
    store.start_run("other-host", "evaluate_retrieval", {}, owner=RunOwner("far-away", 1))
    store.start_run("silent", "evaluate_retrieval", {}, owner=RunOwner(here.host, None))
    store.start_run("done", "evaluate_retrieval", {}, owner=RunOwner(here.host, _gone_pid()))
    store.finish_run("done", "success")
    with store.engine.begin() as conn:  # "silent" last reported two hours ago
        conn.execute(
            tables.runs.update()
            .where(tables.runs.c.run_id == "silent")
            .values(heartbeat_at=utcnow() - timedelta(hours=2))
        )
    settled = store.settle_stale_runs(timedelta(hours=1))
    assert sorted(r.run_id for r in settled) == ["killed", "silent"]
    killed = store.get_run("killed")
    assert killed.status == ABANDONED and "is gone" in (killed.status_detail or "")
    silent = store.get_run("silent")
    assert silent.status == ABANDONED
    assert (silent.status_detail or "").startswith(f"no heartbeat from host {here.host} since")
    assert "runs.stale_after_s=3600" in (silent.status_detail or "")
    # a pid on another host cannot be checked; a live one stays; a finished run is left alone
    assert {r: store.get_run(r).status for r in ("alive", "other-host", "done")} == {
        "alive": RUNNING,
        "other-host": RUNNING,
        "done": "success",
    }
    assert store.settle_stale_runs(timedelta(hours=1)) == []


def test_a_heartbeat_keeps_a_run_and_its_night_alive(store: RunStore) -> None:
    old = utcnow() - timedelta(hours=2)
    for run_id in ("night_1.gold", "night_1.generated", "nightX1.gold", "lone"):
        store.start_run(run_id, "evaluate_retrieval", {}, owner=RunOwner("h", None))
    with store.engine.begin() as conn:
        conn.execute(tables.runs.update().values(heartbeat_at=old))
    store.heartbeat(["lone"], nights=["night_1"])  # "_" is no wildcard
    beats = {r.run.run_id: r.run.heartbeat_at > old for r in store.list_runs()}
    assert beats == {
        "night_1.gold": True,
        "night_1.generated": True,
        "nightX1.gold": False,
        "lone": True,
    }
    settled = store.settle_stale_runs(timedelta(hours=1))
    assert [r.run_id for r in settled] == ["nightX1.gold"]


def test_migration_0008_adds_the_owner_columns_to_existing_runs(engine: Engine) -> None:
    upgrade(engine, "0007")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (run_id, kind, status, started_at, params) "
                "VALUES ('old', 'evaluate_retrieval', 'running', :t, '{}')"
            ),
            {"t": utcnow() - timedelta(days=3)},
        )
    upgrade(engine)
    store = RunStore(engine)
    run = store.get_run("old")
    assert (run.owner_host, run.owner_pid, run.heartbeat_at, run.status_detail) == (
        None,
        None,
        None,
        None,
    )
    (settled,) = store.settle_stale_runs(timedelta(hours=1))  # stale since its start
    assert settled.run_id == "old" and "an unknown owner" in (settled.status_detail or "")
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0007")
    with engine.connect() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("runs")}
    assert "owner_pid" not in columns and "status" in columns
