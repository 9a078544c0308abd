"""End to end: ``dag.test()`` of the whole night with the real task code, on a migrated SQLite DB.

ingest_corpus -> generate_testset -> evaluate_retrieval run on the shipped sample corpus with the
real library (embedded index, bundled MiniLM, GX), the generation LLM being the configuration-
selected scripted test backend (``tests/scripted_llm.py``; a test double, not a model).

``dag.test()`` runs a *manual* DAG run: it records the producer's asset event, but a later
``dag.test()`` of the consumer does not consume it. So each consumer gets its inputs through its
Params, and the test proves the hand-off separately: the consumer's real ``resolve`` task, given
the event row the producer recorded in Airflow's DB, yields exactly the state the Params gave.
(The real scheduler, with events consumed by itself, is exercised by tests/system.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dags import _airflow_env as ENV
from tests.scripted_llm import SPEC as SCRIPTED_SPEC

ENV.ensure_airflow_env()  # before anything imports airflow (no-op after tests/conftest.py)

pytestmark = pytest.mark.airflow


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def airflow_db() -> None:
    """Migrate the session's SQLite metadata DB and create the pools (idempotent)."""
    ENV.migrate_db()
    ENV.create_pools()


@pytest.fixture(scope="module")
def dags(airflow_db: None) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ENV.DAGS_DIR))
    assert bag.import_errors == {}
    for dag in bag.dags.values():
        for task in dag.tasks:
            task.retries = 0  # dag.test() honours retry_delay: a failure would stall for minutes
    return bag.dags


@pytest.fixture
def ragtrail_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh embedded installation: the library reads RAGTRAIL_* on every task call."""
    for var in ("RAGTRAIL_CONFIG", "RAGTRAIL_DATABASE_URL", "RAGTRAIL_ARTIFACT_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAGTRAIL_INDEX_BACKEND", "embedded")
    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM", SCRIPTED_SPEC)
    monkeypatch.setenv("RAGTRAIL_GENERATION__PER_LABEL", "2")
    monkeypatch.setenv("RAGTRAIL_RETRIEVAL__BOOTSTRAP_SAMPLES", "200")
    home = tmp_path / "ragtrail"
    monkeypatch.setenv("RAGTRAIL_HOME", str(home))
    monkeypatch.chdir(tmp_path)  # no stray ./ragtrail.yaml
    return home


# ---------------------------------------------------------------------------------- helpers


def _run(dag: Any, conf: dict[str, Any]) -> Any:
    dag_run = dag.test(run_conf=conf)
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    assert dag_run.state == "success", f"{dag.dag_id} failed: {states}"
    return dag_run


def _xcom(dag_run: Any, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.settings import Session
    from sqlalchemy import select

    with Session() as session:
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_run.dag_id,
                XComModel.run_id == dag_run.run_id,
                XComModel.task_id == task_id,
                XComModel.map_index == -1,
                XComModel.key == "return_value",
            )
        ).one()
        return XComModel.deserialize_value(row)


def _asset_events(dag_run: Any, asset_name: str) -> list[Any]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.settings import Session
    from sqlalchemy import select

    with Session() as session:
        events = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(
                AssetModel.name == asset_name,
                AssetEvent.source_dag_id == dag_run.dag_id,
                AssetEvent.source_run_id == dag_run.run_id,
            )
        ).all()
        for event in events:
            session.expunge(event)
        return list(events)


def _asset_event(dag_run: Any, asset_name: str) -> Any:
    events = _asset_events(dag_run, asset_name)
    assert len(events) == 1, f"expected one {asset_name} event from {dag_run.run_id}"
    return events[0]


def _mapped_xcoms(dag_run: Any, task_id: str) -> list[Any]:
    from airflow.models.xcom import XComModel
    from airflow.settings import Session
    from sqlalchemy import select

    with Session() as session:
        rows = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_run.dag_id,
                XComModel.run_id == dag_run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
        ).all()
        return [XComModel.deserialize_value(row) for row in rows]


def _consumer_state(dag: Any, asset: Any, event: Any, run_id: str) -> dict[str, Any]:
    """What the consumer's real resolve task makes of the producer's recorded event."""
    resolve = dag.get_task("resolve").python_callable
    params = {name: dag.params[name] for name in dag.params}
    return resolve(params=params, triggering_asset_events={asset: [event]}, run_id=run_id)


def _without_origin(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "origin"}


# ------------------------------------------------------------------ real library, sample corpus


def evaluation_run_id(dag_run: Any) -> str:
    """The ragtrail run id of an evaluate_retrieval DAG run (what its resolve task made)."""
    return str(_xcom(dag_run, "resolve")["run_id"])


def _local_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def test_the_night_end_to_end_with_real_task_code(
    dags: dict[str, Any], ragtrail_home: Path
) -> None:
    from assets import CORPUS_ASSET, TESTSET_ASSET

    from ragtrail.paths import sample_corpus_dir
    from ragtrail.pipeline.events import CorpusEvent, RetrievalMetricsEvent, TestsetEvent

    n_files = sum(1 for p in sample_corpus_dir().rglob("*") if p.is_file())
    conf = {"source": str(sample_corpus_dir()), "corpus": "handbook", "shard_size": 8}

    # ---- ingest_corpus
    first = _run(dags["ingest_corpus"], conf)
    summary = _xcom(first, "finalize")
    assert summary["added"] >= 1 and summary["changed"] is True
    assert summary["added"] + summary["quarantined"] <= n_files
    assert summary["updated"] == summary["unchanged"] == summary["removed"] == 0
    shards = _mapped_xcoms(first, "ingest_shard")
    assert len(shards) == -(-summary["added"] // 8)  # ceil: one mapped task per shard
    embedded = sum(shard["embedded"] for shard in shards)
    assert embedded > 0 and summary["embedded"] == embedded  # summed over the shards
    corpus_event = _asset_event(first, "ragtrail_corpus")
    extra = dict(corpus_event.extra)
    assert CorpusEvent.from_extra(extra).snapshot_id == extra["snapshot_id"]
    assert set(extra) == set(CorpusEvent.field_names())
    assert extra["snapshot_id"] == _xcom(first, "plan")["snapshot_id"]
    assert (extra["embedded"], extra["chunks"]) == (embedded, summary["chunks"])
    assert _xcom(first, "quality")["success"] is True

    # ---- generate_testset, on what the corpus event announced
    gen_conf = {"corpus": extra["corpus"], "snapshot_id": extra["snapshot_id"]}
    generation = _run(dags["generate_testset"], gen_conf)
    from_event = _consumer_state(
        dags["generate_testset"], CORPUS_ASSET, corpus_event, generation.run_id
    )
    assert _without_origin(from_event) == _without_origin(_xcom(generation, "resolve"))
    finalized = _xcom(generation, "finalize")
    assert finalized["version"] and sum(finalized["accepted"].values()) >= 4
    assert finalized["regenerated"] is True
    testset_event = _asset_event(generation, "ragtrail_testset")
    assert set(testset_event.extra) == set(TestsetEvent.field_names())
    assert testset_event.extra["qa_set"] == f"testset:{finalized['version']}"

    # ---- a golden set of the corpus, registered as `ragtrail qaset add` does
    from ragtrail.paths import sample_qa_set
    from ragtrail.pipeline.golden import register_golden_set
    from ragtrail.runtime import Runtime

    rt = Runtime()
    try:
        golden = register_golden_set(rt, sample_qa_set(), corpus="handbook", name="team-qa")
    finally:
        rt.close()

    # ---- evaluate_retrieval, on what the test-set event announced, plus the golden set
    eval_conf = {
        "corpus": testset_event.extra["corpus"],
        "snapshot_id": testset_event.extra["snapshot_id"],
        "qa_set": testset_event.extra["qa_set"],
    }
    evaluation = _run(dags["evaluate_retrieval"], eval_conf)
    from_event = _consumer_state(
        dags["evaluate_retrieval"], TESTSET_ASSET, testset_event, evaluation.run_id
    )
    assert _without_origin(from_event) == _without_origin(_xcom(evaluation, "resolve"))
    plan = _xcom(evaluation, "plan")
    assert [(s["name"], s["kind"]) for s in plan["sets"]] == [
        ("team-qa", "golden"),
        ("generated", "generated"),
    ]
    evaluated = {r["name"]: r for r in _mapped_xcoms(evaluation, "evaluate")}  # one task per set
    assert evaluated["generated"]["qa_set_version"] == finalized["version"]
    assert evaluated["team-qa"]["qa_set_version"] == golden.version
    assert evaluated["team-qa"]["run_id"] == f"{evaluation_run_id(evaluation)}.team-qa"
    report = _xcom(evaluation, "publish")
    assert report["success"] is True
    html = _local_path(report["report_path"]).read_text()
    # The Airflow-published report has the test-set sections the CLI report has.
    assert finalized["version"] in html and "funnel" in html.lower()
    assert "QA set: team-qa" in html and "QA set: generated" in html
    metrics_event = _asset_event(evaluation, "ragtrail_retrieval_metrics")
    assert metrics_event.extra["qa_set"] == testset_event.extra["qa_set"]  # the generated set
    assert set(metrics_event.extra["sets"]) == {"team-qa", "generated"}
    assert set(metrics_event.extra) - {"undefined"} == set(RetrievalMetricsEvent.field_names())
    # No RAGTRAIL_REPORTS_URL here: the link is null and the event says why.
    assert metrics_event.extra["report_url"] is None
    assert "RAGTRAIL_REPORTS_URL" in metrics_event.extra["undefined"]["report_url"]
    assert metrics_event.extra["report_uri"] == report["report_uri"]
    # The first night has no baseline: each set's decision is stored, the announcement ends
    # skipped and no drift event is registered (only a fired decision may trigger retraining).
    drift = _xcom(evaluation, "drift")
    assert set(drift["sets"]) == {"team-qa", "generated"} and drift["fired"] is False
    assert {d["status"] for d in drift["sets"].values()} == {"no_baseline"}
    states = {ti.task_id: ti.state for ti in evaluation.get_task_instances()}
    assert states["drift"] == "success" and states["announce_drift"] == "skipped"
    assert _asset_events(evaluation, "ragtrail_drift") == []

    # ---- an unchanged source: no new snapshot, nothing embedded, the event says so
    second = _run(dags["ingest_corpus"], conf)
    again = _xcom(second, "finalize")
    assert again["changed"] is False and again["snapshot"] == extra["snapshot_id"]
    assert again["added"] == again["updated"] == again["removed"] == again["embedded"] == 0
    assert again["unchanged"] == summary["added"] and again["chunks"] == summary["chunks"]
    assert _mapped_xcoms(second, "ingest_shard") == []  # zero shards, finalize still ran
    unchanged_event = dict(_asset_event(second, "ragtrail_corpus").extra)
    assert unchanged_event["changed"] is False
    assert unchanged_event["snapshot_id"] == extra["snapshot_id"]
