"""End to end: ``dag.test()`` of the whole night with the real task code, on a migrated SQLite DB.

ingest_corpus -> generate_testset and evaluate_golden_sets -> evaluate_retrieval run on the shipped
sample corpus with the real library (embedded index, bundled MiniLM, GX), the generation LLM being
the configuration-selected scripted test backend (``tests/scripted_llm.py``; a test double, not a model).

``dag.test()`` runs a *manual* DAG run: it records the producer's asset event, but a later
``dag.test()`` of the consumer does not consume it. So each consumer gets its inputs through its
Params, and the test proves the hand-off separately: the consumer's real ``resolve`` task, given
the event row the producer recorded in Airflow's DB, yields exactly the state the Params gave.
(The real scheduler, with events consumed by itself, is exercised by tests/system.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.dags import _airflow_env as ENV
from tests.scripted_llm import SPEC as SCRIPTED_SPEC

ENV.ensure_airflow_env()  # before anything imports airflow (no-op after tests/conftest.py)

pytestmark = pytest.mark.airflow

GOLDEN = "handbook_qa"
"""The configured golden set's name (the stem of sample/qa/handbook_qa.jsonl)."""
MIRRORS = 5
"""Copies of the corpus the degraded night syncs in: as many as Recall@5 has places."""


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
    # enough generated items that the ones two versions share can be tested for drift
    monkeypatch.setenv("RAGTRAIL_GENERATION__PER_LABEL", "4")
    monkeypatch.setenv("RAGTRAIL_DRIFT__N_RESAMPLES", "2000")
    from ragtrail.paths import sample_qa_set

    monkeypatch.setenv("RAGTRAIL_GOLDEN_SETS", json.dumps({"handbook": [str(sample_qa_set())]}))
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

    source = ragtrail_home.parent / "source"
    shutil.copytree(sample_corpus_dir(), source)
    n_files = sum(1 for p in source.rglob("*") if p.is_file())
    conf = {"source": str(source), "corpus": "handbook", "shard_size": 8}

    # ---- ingest_corpus, which registers the configured golden set (no CLI step by hand)
    first = _run(dags["ingest_corpus"], conf)
    (golden,) = _xcom(first, "golden")["golden"]
    assert (golden["name"], golden["corpus"], golden["created"]) == (GOLDEN, "handbook", True)
    assert golden["quality"]["success"] is True
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

    # ---- generate_testset, on what the corpus event announced; the judges calibrate on the
    # golden set the ingest registered
    gen_conf = {"corpus": extra["corpus"], "snapshot_id": extra["snapshot_id"]}
    generation = _run(dags["generate_testset"], gen_conf)
    calibrated = _xcom(generation, "calibrate")["judges"]
    assert calibrated and {j["status"] for j in calibrated.values()} == {"calibrated"}, calibrated
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

    # ---- evaluate_golden_sets, on the same corpus event (beside the generation): the golden
    # set's run, handed over to the evaluation of the same snapshot and settings
    golden_evaluation = _run(dags["evaluate_golden_sets"], gen_conf)
    from_event = _consumer_state(
        dags["evaluate_golden_sets"], CORPUS_ASSET, corpus_event, golden_evaluation.run_id
    )
    assert _without_origin(from_event) == _without_origin(_xcom(golden_evaluation, "resolve"))
    assert _xcom(golden_evaluation, "calibrate")["judges"], "the evaluation's judges calibrate"
    golden_run = f"{evaluation_run_id(golden_evaluation)}.{GOLDEN}"
    assert _xcom(golden_evaluation, "hand_over")["sets"] == [golden_run]
    (golden_scan,) = _mapped_xcoms(golden_evaluation, "evaluate")
    assert (golden_scan["run_id"], golden_scan["qa_set_version"]) == (golden_run, golden["version"])

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
    assert [(s["name"], s["kind"], s["run_id"], s["reused"]) for s in plan["sets"]] == [
        (GOLDEN, "golden", golden_run, True),  # the golden sets' evaluation made it
        ("generated", "generated", f"{evaluation_run_id(evaluation)}.generated", False),
    ]
    evaluated = {r["name"]: r for r in _mapped_xcoms(evaluation, "evaluate")}  # one task per set
    assert evaluated["generated"]["qa_set_version"] == finalized["version"]
    assert evaluated[GOLDEN] == {"name": GOLDEN, "skipped": f"evaluated as {golden_run}"}
    for step in ("sufficiency", "evidence"):
        (skipped,) = [r for r in _mapped_xcoms(evaluation, step) if r["name"] == GOLDEN]
        assert skipped["skipped"] == f"evaluated as {golden_run}", (step, skipped)
    # the golden sets' evaluation leaves the citations to this DAG: cited in the golden run
    (cited,) = [r for r in _mapped_xcoms(evaluation, "cite") if r["name"] == GOLDEN]
    assert "skipped" not in cited and cited["run_id"] == golden_run, cited
    report = _xcom(evaluation, "publish")
    assert report["success"] is True
    html = _local_path(report["report_path"]).read_text()
    # The Airflow-published report has the test-set sections the CLI report has.
    assert finalized["version"] in html and "funnel" in html.lower()
    assert f"QA set: {GOLDEN}" in html and "QA set: generated" in html
    metrics_event = _asset_event(evaluation, "ragtrail_retrieval_metrics")
    assert metrics_event.extra["qa_set"] == testset_event.extra["qa_set"]  # the generated set
    assert set(metrics_event.extra["sets"]) == {GOLDEN, "generated"}
    assert set(metrics_event.extra) - {"undefined"} == set(RetrievalMetricsEvent.field_names())
    # No RAGTRAIL_REPORTS_URL here: the link is null and the event says why.
    assert metrics_event.extra["report_url"] is None
    assert "RAGTRAIL_REPORTS_URL" in metrics_event.extra["undefined"]["report_url"]
    assert metrics_event.extra["report_uri"] == report["report_uri"]
    # The first night has no baseline: each set's decision is stored, the announcement ends
    # skipped and no drift event is registered (only a fired decision may trigger retraining).
    drift = _xcom(evaluation, "drift")
    assert set(drift["sets"]) == {GOLDEN, "generated"} and drift["fired"] is False
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

    # ---- a degraded corpus, from the DAGs alone: drift fires on the golden set and on the items
    # the new generated version shares with the previous one
    _degrade(source, removed=_ground_docs_of(finalized["version"])[:1])
    _night_two(dags, conf, first_version=finalized["version"], golden_version=golden["version"])


def _ground_docs_of(version: str) -> list[str]:
    """The documents the generated version's items come from, most items first."""
    from collections import Counter

    from ragtrail.runtime import Runtime
    from ragtrail.testset.store import TestSetStore

    rt = Runtime()
    try:
        items = TestSetStore(rt.engine).version_items(version)
    finally:
        rt.close()
    return [doc for doc, _ in Counter(c.context.doc_id for c in items).most_common()]


def _degrade(source: Path, removed: list[str]) -> None:
    """Remove ``removed`` (their generated items retire: a new version) and sync in
    :data:`MIRRORS` copies of every document under folders that sort first. A copy differs
    from its original only by trailing newlines (byte-identical files would be quarantined as
    duplicates; every format here parses the same with them), so its chunks are the original's: they tie with them and win the tie (chunk
    ids break it), the top five of a query are mirror copies and the original document drops
    out of Recall@5."""
    for rel in removed:
        (source / rel).unlink()
    originals = sorted(p for p in source.rglob("*") if p.is_file())
    for n in range(1, MIRRORS + 1):
        for path in originals:
            target = source / f"0-mirror-{n}" / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes() + b"\n" * n)


def _night_two(
    dags: dict[str, Any], conf: dict[str, Any], *, first_version: str, golden_version: str
) -> None:
    from assets import DRIFT_ASSET

    from ragtrail.pipeline.events import DriftEvent

    ingested = _run(dags["ingest_corpus"], conf)
    assert _xcom(ingested, "finalize")["removed"] == 1
    (golden,) = _xcom(ingested, "golden")["golden"]
    assert (golden["version"], golden["created"]) == (golden_version, False)  # unchanged file
    corpus_event = dict(_asset_event(ingested, "ragtrail_corpus").extra)
    generation = _run(
        dags["generate_testset"],
        {"corpus": "handbook", "snapshot_id": corpus_event["snapshot_id"]},
    )
    testset_event = dict(_asset_event(generation, "ragtrail_testset").extra)
    second_version = testset_event["qa_set_version"]
    assert second_version != first_version
    evaluation = _run(
        dags["evaluate_retrieval"],
        {
            "corpus": "handbook",
            "snapshot_id": testset_event["snapshot_id"],
            "qa_set": testset_event["qa_set"],
        },
    )
    plan = _xcom(evaluation, "plan")  # no golden evaluation of this snapshot: evaluated here
    assert [(s["name"], s["reused"]) for s in plan["sets"]] == [
        (GOLDEN, False),
        ("generated", False),
    ]
    drift = _xcom(evaluation, "drift")
    assert drift["fired"] is True, drift
    on_golden, on_generated = drift["sets"][GOLDEN], drift["sets"]["generated"]
    assert on_golden["fired"] and on_golden["baseline_kind"] == "first", on_golden
    assert "baseline_version" not in on_golden  # the same golden version, all items paired
    # The generated set changed version: its baseline is the first night's run on the
    # predecessor version, compared on the items both versions hold.
    assert on_generated["fired"], on_generated
    assert on_generated["baseline_version"] == first_version
    assert on_generated["qa_set_version"] == second_version
    assert on_generated["paired"] >= 5, on_generated
    assert any(cell["metric"] == "recall@5" for cell in on_generated["drifted"]), on_generated
    event = DriftEvent.from_extra(dict(_asset_event(evaluation, "ragtrail_drift").extra))
    assert set(event.decisions) == {GOLDEN, "generated"} and event.fired
    # retrain_models listens to the drift asset; its resolve makes its state from this event
    state = _consumer_state(
        dags["retrain_models"], DRIFT_ASSET, _asset_event(evaluation, "ragtrail_drift"), "r1"
    )
    assert state["origin"] == "asset_event" and state["corpus"] == "handbook"
    assert state["drift_decision_id"] == event.decision_id and state["models"] == event.models
