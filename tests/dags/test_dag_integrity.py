"""DagBag integrity: every DAG imports, follows the project conventions and parses fast.

Conventions checked (ARCHITECTURE.md, "Layout"): tags, ``doc_md``, an owner and retries on every
task, ``catchup=False``, imports from ``airflow.sdk`` only, no Variable/Connection use in DAG
files, no heavy library import at parse time, validated Params, pools declared in
airflow_settings.yaml. Runs on a throw-away AIRFLOW_HOME; needs no metadata DB.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.dags import _airflow_env as ENV

ENV.ensure_airflow_env()  # before anything imports airflow (no-op after tests/conftest.py)


def _load(name: str, path: Path) -> ModuleType:
    """Import a file outside any package (scripts/) as module ``name``, once per process."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


pytestmark = pytest.mark.airflow

EXPECTED_DAGS = {"ingest_corpus", "generate_testset", "evaluate_golden_sets", "evaluate_retrieval"}
DAG_FILES = sorted(p for p in ENV.DAGS_DIR.glob("*.py") if not p.name.startswith("_"))
PARSE_BUDGET_S = 2.0
# Libraries a DAG file must not pull in at parse time (they belong inside task callables).
HEAVY_MODULES = (
    "torch",
    "transformers",
    "sentence_transformers",
    "great_expectations",
    "pandas",
    "elasticsearch",
    "boto3",
    "sqlalchemy",
    "ragtrail.pipeline.tasks",
    "ragtrail.runtime",
)


def _bootstrap() -> ModuleType:
    return _load("ragtrail_airflow_bootstrap", ENV.BOOTSTRAP_SCRIPT)


def _settings_pools() -> set[str]:
    return set(_bootstrap().parse_settings(ENV.SETTINGS_FILE).pools)


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    # Airflow 3.3's DagBag no longer takes include_examples: it only reads dag_folder.
    return DagBag(dag_folder=str(ENV.DAGS_DIR), known_pools=_settings_pools() | {"default_pool"})


def test_no_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}


def test_no_parse_warnings(dagbag: Any) -> None:
    assert dagbag.captured_warnings == {}


def test_expected_dags_present(dagbag: Any) -> None:
    assert set(dagbag.dag_ids) >= EXPECTED_DAGS
    files_with_dags = {Path(dag.fileloc).name for dag in dagbag.dags.values()}
    assert files_with_dags == {p.name for p in DAG_FILES}, "every DAG file defines a DAG"


def test_pools_are_declared_in_settings(dagbag: Any) -> None:
    assert dagbag.dag_warnings == set()


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_DAGS))
def test_dag_conventions(dagbag: Any, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    assert "ragtrail" in dag.tags
    assert dag.doc_md and dag.doc_md.strip()
    assert dag.catchup is False
    assert dag.start_date is not None
    assert dag.max_active_runs == 1
    for task in dag.tasks:
        assert task.owner and task.owner != "airflow", f"{dag_id}.{task.task_id} has no owner"
        assert task.retries >= 1, f"{dag_id}.{task.task_id} has no retries"
        assert task.retry_delay.total_seconds() > 0


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_dag_file_imports_only_airflow_sdk(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
            names = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            if module == "airflow" or module.startswith("airflow."):
                assert module == "airflow.sdk" or module.startswith("airflow.sdk."), (
                    f"{path.name}:{node.lineno} imports {module}; use airflow.sdk"
                )
            if module.startswith("ragtrail.pipeline") and node.col_offset == 0:
                pytest.fail(f"{path.name}:{node.lineno} imports {module} at module level")
        forbidden = {"Variable", "Connection", "BaseHook"} & set(names)
        assert not forbidden, f"{path.name}:{node.lineno}: no {forbidden} in DAG files"


_PARSE_PROBE = """
import json, runpy, sys, time
sys.path.insert(0, sys.argv[2])  # Airflow puts the plugins folder on sys.path
import airflow.sdk
from airflow.sdk import Asset, Metadata, Param, dag, task  # the DAG processor has these loaded
before = set(sys.modules)
start = time.perf_counter()
runpy.run_path(sys.argv[1], run_name="ragtrail_parse_probe")
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "new_modules": sorted(set(sys.modules) - before)}))
"""


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_dag_file_parses_fast_without_heavy_imports(path: Path, record_property: Any) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PARSE_PROBE, str(path), str(ENV.PLUGINS_DIR)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    record_property("parse_seconds", round(probe["seconds"], 4))
    print(f"{path.name}: parsed in {probe['seconds'] * 1000:.1f} ms")
    heavy = [
        m for m in probe["new_modules"] if m.split(".")[0] in HEAVY_MODULES or m in HEAVY_MODULES
    ]
    assert not heavy, f"{path.name} imports {heavy} at parse time"
    assert probe["seconds"] < PARSE_BUDGET_S, f"{path.name} parsed in {probe['seconds']:.2f}s"


def test_default_params_validate(dagbag: Any) -> None:
    for dag_id in EXPECTED_DAGS:
        dagbag.dags[dag_id].params.validate()


@pytest.mark.parametrize(
    ("dag_id", "name", "bad_value"),
    [
        ("ingest_corpus", "corpus", "Bad Name!"),
        ("ingest_corpus", "corpus", ""),
        ("ingest_corpus", "shard_size", 0),
        ("ingest_corpus", "shard_size", 1001),
        ("ingest_corpus", "source", ""),
        ("ingest_corpus", "allow_mass_removal", "yes"),
        ("ingest_corpus", "allow_mass_removal", 1),
        ("ingest_corpus", "allow_mass_removal", None),
        ("evaluate_retrieval", "corpus", "../etc"),
        ("evaluate_retrieval", "text_weights", [0.1, 1.5]),
        ("evaluate_retrieval", "text_weights", []),
        ("evaluate_retrieval", "text_weights", ["a"]),
        ("evaluate_retrieval", "qa_set", 3),
        ("generate_testset", "labels", ["trivia"]),
        ("generate_testset", "per_label", 0),
        ("generate_testset", "corpus", "Bad Name!"),
    ],
)
def test_params_reject_bad_values(dagbag: Any, dag_id: str, name: str, bad_value: Any) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    param = dagbag.dags[dag_id].params.get_param(name)
    with pytest.raises(ParamValidationError):
        param.resolve(bad_value)


@pytest.mark.parametrize(
    ("name", "good_value"),
    [
        ("qa_set", None),
        ("qa_set", "/data/qa.jsonl"),
        ("snapshot_id", None),
        ("text_weights", [0, 1]),
    ],
)
def test_evaluate_params_accept(dagbag: Any, name: str, good_value: Any) -> None:
    param = dagbag.dags["evaluate_retrieval"].params.get_param(name)
    assert param.resolve(good_value) == good_value


def test_ingest_wiring(dagbag: Any) -> None:
    from assets import CORPUS_ASSET

    dag = dagbag.dags["ingest_corpus"]
    assert dag.schedule == "0 1 * * *"
    shard = dag.get_task("ingest_shard")
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    assert isinstance(shard, MappedOperator), "ingest_shard must be mapped over the shards"
    assert shard.pool == "embedding"
    assert shard.max_active_tis_per_dagrun == 1
    finalize = dag.get_task("finalize")
    assert finalize.outlets == []
    assert finalize.trigger_rule == "none_failed"
    quality = dag.get_task("quality")
    assert quality.outlets == [CORPUS_ASSET], "only a snapshot that passed GX is announced"
    # golden sets are registered before the corpus is announced (calibration and drift read them)
    assert "finalize" in dag.get_task("golden").upstream_task_ids
    assert "golden" in quality.upstream_task_ids
    assert "ingest_shard" in finalize.upstream_task_ids
    assert dag.params["golden"] == []


def test_generate_wiring(dagbag: Any) -> None:
    from airflow.sdk.definitions.mappedoperator import MappedOperator
    from assets import CORPUS_ASSET, TESTSET_ASSET

    dag = dagbag.dags["generate_testset"]
    assert dag.schedule == CORPUS_ASSET
    # the calibration runs beside the plan, the drafting and the baseline; judging waits for it
    assert "calibrate" not in dag.get_task("plan").upstream_task_ids
    for name in ("draft_shard", "judge_shard"):
        shard = dag.get_task(name)
        assert isinstance(shard, MappedOperator), "generation is mapped over context shards"
        assert shard.pool == "llm_api"
    for name in ("draft_shard", "baseline"):
        assert "plan" in dag.get_task(name).upstream_task_ids
        assert "calibrate" not in dag.get_task(name).upstream_task_ids
    assert {"calibrate", "draft_shard"} <= dag.get_task("judge_shard").upstream_task_ids
    finalize = dag.get_task("finalize")
    assert {"judge_shard", "baseline"} <= finalize.upstream_task_ids
    assert finalize.outlets == [TESTSET_ASSET]
    assert finalize.trigger_rule == "none_failed"


def test_evaluate_wiring(dagbag: Any) -> None:
    from assets import (
        CITATION_METRICS_ASSET,
        DRIFT_ASSET,
        RETRIEVAL_METRICS_ASSET,
        TESTSET_ASSET,
    )

    dag = dagbag.dags["evaluate_retrieval"]
    assert dag.schedule == TESTSET_ASSET
    assert dag.get_task("evaluate").pool == "embedding"
    assert dag.get_task("cite").pool == "llm_api"
    assert "evaluate" in dag.get_task("cite").upstream_task_ids  # after every set's retrieval
    announce = dag.get_task("announce_citations")
    assert announce.outlets == [CITATION_METRICS_ASSET]
    assert announce.trigger_rule == "none_failed"
    # citations, sufficiency and evidence each wait for retrieval only: parallel branches
    for evaluation in ("cite", "sufficiency", "evidence"):
        task_ = dag.get_task(evaluation)
        assert "evaluate" in task_.upstream_task_ids  # and the XComs of resolve and plan
        assert task_.upstream_task_ids <= {
            "evaluate",
            f"list_sets_for_{evaluation}",
            "plan",
            "resolve",
        }
        others = {"cite", "sufficiency", "evidence"} - {evaluation}
        assert not others & task_.get_flat_relative_ids(upstream=True), evaluation
    # drift waits for every branch's announcement; one with no rated set ends skipped (no
    # empty Asset event), and drift still runs
    drift = dag.get_task("drift")
    announcements = {"announce_citations", "announce_sufficiency", "announce_evidence"}
    assert announcements <= drift.upstream_task_ids <= announcements | {"plan", "resolve"}
    assert drift.trigger_rule == "none_failed"
    for announcing in announcements:
        assert dag.get_task(announcing).trigger_rule == "none_failed"
    assert dag.get_task("publish").outlets == [RETRIEVAL_METRICS_ASSET]
    assert dag.get_task("drift").outlets == []  # every decision is stored, none announced here
    assert dag.get_task("announce_drift").outlets == [DRIFT_ASSET]  # only a fired one


def test_golden_evaluation_wiring(dagbag: Any) -> None:
    """The golden sets are evaluated on the corpus Asset, beside the generation: the evaluation's
    judges calibrate beside the plan and the retrieval; the sufficiency and evidence branches wait
    for them; the hand-over waits for both branches of every set and announces nothing. There is
    no citation branch: `evaluate_retrieval` cites the handed-over golden runs beside the test
    set; their first round is asked ahead after the retrieval, and nothing waits for it."""
    from airflow.sdk.definitions.mappedoperator import MappedOperator
    from assets import CORPUS_ASSET

    dag = dagbag.dags["evaluate_golden_sets"]
    assert dag.schedule == CORPUS_ASSET
    assert dag.get_task("calibrate").upstream_task_ids == {"resolve"}
    assert dag.get_task("plan").upstream_task_ids == {"resolve"}
    assert dag.get_task("evaluate").pool == "embedding"
    for name in ("sufficiency", "evidence"):
        task_ = dag.get_task(name)
        assert isinstance(task_, MappedOperator) and task_.pool == "llm_api"
        assert {"evaluate", "calibrate"} <= task_.upstream_task_ids, name
    assert "cite" not in dag.task_ids
    ask = dag.get_task("ask_citations")
    assert ask.upstream_task_ids == {"evaluate", "plan", "resolve"} and ask.pool == "llm_api"
    assert not ask.downstream_task_ids
    hand_over = dag.get_task("hand_over")
    assert {"sufficiency", "evidence"} <= hand_over.upstream_task_ids
    assert hand_over.trigger_rule == "none_failed"
    assert all(not task_.outlets for task_ in dag.tasks)


class _Events(dict):
    """Stands in for Airflow's TriggeringAssetEventsAccessor (a Mapping keyed by Asset)."""


def _event(hour: int, **extra: Any) -> SimpleNamespace:
    from datetime import UTC, datetime

    return SimpleNamespace(timestamp=datetime(2026, 1, 1, hour, tzinfo=UTC), extra=extra)


def test_resolve_prefers_newest_asset_event(dagbag: Any) -> None:
    from assets import TESTSET_ASSET

    resolve = dagbag.dags["evaluate_retrieval"].get_task("resolve").python_callable
    params = {"corpus": "handbook", "snapshot_id": None}
    older = _event(1, **_testset_event("old", "s1", "ts-old"))
    newer = _event(2, **_testset_event("wiki", "s2", "ts-abc"))
    target = resolve(
        params=params,
        triggering_asset_events=_Events({TESTSET_ASSET: [newer, older]}),
        run_id="asset_triggered__2026-01-01T01:00:00+00:00",
    )
    assert target["corpus"] == "wiki"
    assert target["snapshot_id"] == "s2"
    assert target["qa_set"] == "testset:ts-abc"
    assert target["origin"] == "asset_event"
    assert target["run_id"] == "retrieval-asset_triggered__2026-01-01T01_00_00_00_00"


def _testset_event(corpus: str, snapshot_id: str, version: str) -> dict[str, Any]:
    from ragtrail.pipeline.events import TestsetEvent

    event = TestsetEvent(
        corpus=corpus,
        snapshot_id=snapshot_id,
        qa_set=f"testset:{version}",
        qa_set_version=version,
        accepted=4,
        regenerated=True,
    )
    return event.to_extra()


def test_resolve_refuses_an_event_of_another_shape(dagbag: Any) -> None:
    from assets import TESTSET_ASSET

    resolve = dagbag.dags["evaluate_retrieval"].get_task("resolve").python_callable
    partial = _event(1, corpus="wiki", snapshot_id="s2", qa_set="testset:ts-abc", extra_key=1)
    with pytest.raises(ValueError, match=r"missing \['accepted'.*unknown \['extra_key'\]"):
        resolve(
            params={"corpus": "handbook", "snapshot_id": None},
            triggering_asset_events=_Events({TESTSET_ASSET: [partial]}),
            run_id="r",
        )


def test_resolve_falls_back_to_params(dagbag: Any) -> None:
    resolve = dagbag.dags["evaluate_retrieval"].get_task("resolve").python_callable
    target = resolve(
        params={"corpus": "handbook", "snapshot_id": "", "text_weights": [0, 1]},
        triggering_asset_events=_Events(),
        run_id="manual__x",
    )
    assert target == {
        "corpus": "handbook",
        "snapshot_id": None,
        "qa_set": None,
        "text_weights": [0.0, 1.0],
        "run_id": "retrieval-manual__x",
        "origin": "params",
    }


def test_generation_resolve_reads_the_corpus_event(dagbag: Any) -> None:
    from assets import CORPUS_ASSET

    resolve = dagbag.dags["generate_testset"].get_task("resolve").python_callable
    from ragtrail.pipeline.events import COUNT_KEYS, CorpusEvent

    counts = dict.fromkeys(COUNT_KEYS, 0)
    corpus_event = CorpusEvent(
        corpus="wiki",
        snapshot_id="s9",
        changed=False,
        manifest_uri=None,
        data_docs_uri=None,
        **counts,
    )
    event = _event(3, **corpus_event.to_extra())
    state = resolve(
        params={"corpus": "handbook"},
        triggering_asset_events=_Events({CORPUS_ASSET: [event]}),
        run_id="r1",
    )
    assert (state["corpus"], state["snapshot_id"], state["changed"]) == ("wiki", "s9", False)
    assert state["labels"] == [] and state["run_id"] == "generate-r1"


def test_every_dag_is_the_core_definition(dagbag: Any) -> None:
    """Each DAG has exactly the core flow's steps (plus resolve and the list-publishing tasks)."""
    from ragtrail.pipeline.night import NIGHT

    for flow in NIGHT:
        dag = dagbag.dags[flow.dag_id]
        expected = {"resolve", *(s.name for s in flow.steps)} | {
            f"list_{s.map_over}_for_{s.name}" for s in flow.steps if s.map_over
        }
        assert set(dag.task_dict) == expected
        for step in flow.steps:
            assert dag.get_task(step.name).pool == (step.pool or "default_pool")
        assert set(dag.params) == set(flow.params)


def test_assets_are_unique() -> None:
    import assets

    names = [a.name for a in assets.ALL_ASSETS]
    uris = [a.uri for a in assets.ALL_ASSETS]
    assert len(set(names)) == len(names) and len(set(uris)) == len(uris)
    assert all(uri.startswith("ragtrail://") for uri in uris)


def test_plugin_loads_and_links_reports(dagbag: Any) -> None:
    from airflow import plugins_manager

    plugins_dir = str(ENV.PLUGINS_DIR)
    errors = {k: v for k, v in plugins_manager.get_import_errors().items() if plugins_dir in k}
    assert errors == {}
    info = {p["name"]: p for p in plugins_manager.get_plugin_info(["external_views"])}
    assert "ragtrail" in info

    import ragtrail_plugin

    # the served view always; a Data Docs site of its own when configured (the reports URL no
    # longer adds a link: the view serves the same files, the user's access checked)
    custom = ragtrail_plugin.build_external_views(
        {
            "RAGTRAIL_REPORTS_URL": "https://reports.example/r/",
            "RAGTRAIL_DATA_DOCS_URL": "https://dd",
        }
    )
    assert [v["href"] for v in custom] == ["/ragtrail/", "https://dd"]
    assert [v["name"] for v in ragtrail_plugin.build_external_views({})] == ["ragtrail reports"]


def test_bootstrap_settings_have_pools_and_no_secrets() -> None:
    settings = _bootstrap().parse_settings(ENV.SETTINGS_FILE)
    slots = {name: pool["slots"] for name, pool in settings.pools.items()}
    assert slots == {"llm_api": 4, "es_bulk": 2, "gpu": 1, "embedding": 1}
    assert set(settings.connections) == {"ragtrail_es", "ragtrail_llm", "ragtrail_s3"}
    assert settings.variables == {}  # corpus, source, shard size are Params; nothing else reads one
    assert all("password" not in conn for conn in settings.connections.values())
    assert "endpoint_url" in json.loads(settings.connections["ragtrail_s3"]["extra"])
