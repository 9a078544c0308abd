"""End to end: ``dag.test()`` of ingest_corpus then evaluate_retrieval on a migrated SQLite DB.

Two levels:

- ``test_wiring_with_stub_library`` swaps ``ragtrail.pipeline.tasks`` for a recording stub and
  checks the Airflow side alone: mapping over shards, the corpus asset event and its Metadata,
  Params reaching the library, the retrieval-metrics asset event. Fast, no model.
- ``test_sample_corpus_end_to_end`` runs the real library on sample/corpus (embedded index,
  bundled MiniLM, GX): ingest, an idempotent re-ingest, then evaluation and the HTML report.

``dag.test()`` runs a *manual* DAG run: it records the producer's asset event (and queues the
consumer when that DAG is unpaused) but a later ``dag.test()`` of the consumer does not consume
it, so ``triggering_asset_events`` is empty there. The tests therefore hand the snapshot from
the recorded asset event to evaluate_retrieval through its Params, as a manual rerun would.
Pools need not exist for ``dag.test()``; the fixture still creates them with the bootstrap
script, which exercises it against a real metadata DB.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dags import _airflow_env as ENV

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


def _asset_event_extra(dag_run: Any, asset_name: str) -> dict[str, Any]:
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
        assert len(events) == 1, f"expected one {asset_name} event from {dag_run.run_id}"
        return dict(events[0].extra)


def _mapped_count(dag_run: Any, task_id: str) -> int:
    return sum(1 for ti in dag_run.get_task_instances() if ti.task_id == task_id)


# ----------------------------------------------------------------------- wiring (stub library)


class _StubTasks(types.ModuleType):
    """Records calls and returns the documented shapes of ragtrail.pipeline.tasks."""

    def __init__(self) -> None:
        super().__init__("ragtrail.pipeline.tasks")
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def plan_ingest(self, source: str, corpus: str, shard_size: int = 25) -> dict[str, Any]:
        self.calls.append(("plan_ingest", {"source": source, "corpus": corpus, "size": shard_size}))
        files = [f"doc{i}.md" for i in range(5)]
        shards = [files[i : i + shard_size] for i in range(0, len(files), shard_size)]
        return {
            "snapshot_id": "snap-stub",
            "corpus": corpus,
            "shards": shards,
            "manifest_uri": "mem://manifest",
            "counts": {"added": 5},
        }

    def ingest_shard(self, corpus: str, snapshot_id: str, rel_paths: list[str]) -> dict[str, Any]:
        self.calls.append(("ingest_shard", {"rel_paths": rel_paths}))
        n = len(rel_paths)
        return {"documents": n, "chunks": 2 * n, "quarantined": 0, "embedded": 2 * n}

    def finalize_ingest(self, corpus: str, snapshot_id: str) -> dict[str, Any]:
        self.calls.append(("finalize_ingest", {"snapshot_id": snapshot_id}))
        return {
            "added": 5,
            "updated": 0,
            "unchanged": 0,
            "removed": 0,
            "quarantined": 0,
            "chunks": 10,
            "snapshot": snapshot_id,
            "corpus": corpus,
            "manifest_uri": "mem://manifest",
        }

    def check_corpus_quality(self, corpus: str, snapshot_id: str) -> dict[str, Any]:
        self.calls.append(("check_corpus_quality", {"snapshot_id": snapshot_id}))
        return {"success": True, "data_docs_uri": "mem://docs"}

    def evaluate_retrieval(
        self,
        corpus: str,
        qa_set: str | None,
        text_weights: list[float] | None,
        run_id: str,
        snapshot_id: str | None = None,
    ) -> dict[str, Any]:
        args = {"corpus": corpus, "qa_set": qa_set, "weights": text_weights}
        self.calls.append(("evaluate_retrieval", {**args, "snapshot_id": snapshot_id}))
        return {
            "run_id": run_id,
            "metrics_uri": f"mem://{run_id}/metrics.json",
            "snapshot_id": snapshot_id,
            "qa_set_version": "qa-v1",
            "best": {},
        }

    def publish_retrieval_report(self, run_id: str) -> dict[str, Any]:
        self.calls.append(("publish_retrieval_report", {"run_id": run_id}))
        return {
            "report_uri": f"mem://{run_id}/report",
            "data_docs_uri": "mem://dd",
            "success": True,
        }


@pytest.fixture
def stub_tasks(monkeypatch: pytest.MonkeyPatch) -> Iterator[_StubTasks]:
    import ragtrail.pipeline

    stub = _StubTasks()
    monkeypatch.setitem(sys.modules, "ragtrail.pipeline.tasks", stub)
    monkeypatch.setattr(ragtrail.pipeline, "tasks", stub, raising=False)
    yield stub


def test_wiring_with_stub_library(dags: dict[str, Any], stub_tasks: _StubTasks) -> None:
    ingest = _run(dags["ingest_corpus"], {"corpus": "wiring", "shard_size": 2})
    assert _mapped_count(ingest, "ingest_shard") == 3  # 5 files in shards of 2
    shard_calls = [c for name, c in stub_tasks.calls if name == "ingest_shard"]
    assert sorted(len(c["rel_paths"]) for c in shard_calls) == [1, 2, 2]
    corpus_event = _asset_event_extra(ingest, "ragtrail_corpus")
    assert corpus_event["corpus"] == "wiring"
    assert corpus_event["snapshot_id"] == "snap-stub"
    assert corpus_event["manifest_uri"] == "mem://manifest"
    assert corpus_event["added"] == 5 and corpus_event["chunks"] == 10
    assert _xcom(ingest, "finalize")["snapshot"] == "snap-stub"

    conf = {"corpus": "wiring", "snapshot_id": corpus_event["snapshot_id"], "text_weights": [0, 1]}
    evaluation = _run(dags["evaluate_retrieval"], conf)
    (evaluate_call,) = [c for name, c in stub_tasks.calls if name == "evaluate_retrieval"]
    assert evaluate_call == {
        "corpus": "wiring",
        "qa_set": None,
        "weights": [0.0, 1.0],
        "snapshot_id": "snap-stub",
    }
    metrics_event = _asset_event_extra(evaluation, "ragtrail_retrieval_metrics")
    assert metrics_event["snapshot_id"] == "snap-stub"
    assert metrics_event["run_id"].startswith("retrieval-")
    assert ":" not in metrics_event["run_id"] and "+" not in metrics_event["run_id"]
    assert metrics_event["report_uri"] == f"mem://{metrics_event['run_id']}/report"


def test_zero_shards_still_finalizes(dags: dict[str, Any], stub_tasks: _StubTasks) -> None:
    stub_tasks.plan_ingest = lambda source, corpus, shard_size=25: {  # type: ignore[method-assign]
        "snapshot_id": "snap-empty",
        "corpus": corpus,
        "shards": [],
        "manifest_uri": "mem://m",
        "counts": {"removed": 1},
    }
    ingest = _run(dags["ingest_corpus"], {"corpus": "deletions-only"})
    states = {ti.task_id: ti.state for ti in ingest.get_task_instances()}
    assert states["finalize"] == "success" and states["quality"] == "success"
    assert _asset_event_extra(ingest, "ragtrail_corpus")["snapshot_id"] == "snap-empty"


# ------------------------------------------------------------------ real library, sample corpus


def _library_ready() -> str | None:
    """Why the real end-to-end run cannot happen yet, or None."""
    from ragtrail.paths import sample_corpus_dir, sample_qa_set

    if importlib.util.find_spec("ragtrail.pipeline.tasks") is None:
        return "ragtrail.pipeline.tasks is not written yet"
    if not any(p.is_file() for p in sample_corpus_dir().rglob("*")):
        return f"no sample corpus at {sample_corpus_dir()}"
    if not sample_qa_set().is_file():
        return f"no sample QA set at {sample_qa_set()}"
    return None


def _local_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


@pytest.mark.slow
def test_sample_corpus_end_to_end(dags: dict[str, Any], ragtrail_home: Path) -> None:
    if reason := _library_ready():
        pytest.skip(reason)
    from ragtrail.paths import sample_corpus_dir

    n_files = sum(1 for p in sample_corpus_dir().rglob("*") if p.is_file())
    conf = {"source": str(sample_corpus_dir()), "corpus": "handbook", "shard_size": 4}

    first = _run(dags["ingest_corpus"], conf)
    summary = _xcom(first, "finalize")
    assert summary["added"] >= 1
    assert summary["added"] + summary["quarantined"] <= n_files
    assert summary["updated"] == summary["unchanged"] == summary["removed"] == 0
    assert summary["chunks"] > 0
    assert _mapped_count(first, "ingest_shard") == -(-summary["added"] // 4)  # ceil
    event = _asset_event_extra(first, "ragtrail_corpus")
    assert event["corpus"] == "handbook"
    assert event["snapshot_id"] == _xcom(first, "plan")["snapshot_id"]
    assert event["added"] == summary["added"] and event["chunks"] == summary["chunks"]
    assert _xcom(first, "quality")["success"] is True

    # Idempotent: the same source again changes nothing and duplicates nothing.
    second = _run(dags["ingest_corpus"], conf)
    again = _xcom(second, "finalize")
    assert again["added"] == again["updated"] == again["removed"] == 0
    assert again["unchanged"] == summary["added"]
    assert again["chunks"] == summary["chunks"]

    evaluation = _run(
        dags["evaluate_retrieval"], {"corpus": "handbook", "snapshot_id": event["snapshot_id"]}
    )
    report = _xcom(evaluation, "publish")
    assert report["success"] is True
    report_file = _local_path(report.get("report_path") or report["report_uri"])
    assert report_file.exists(), report_file
    metrics_event = _asset_event_extra(evaluation, "ragtrail_retrieval_metrics")
    assert metrics_event["snapshot_id"] == event["snapshot_id"]
    assert metrics_event["report_uri"] == report["report_uri"]
