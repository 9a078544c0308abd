"""scripts/airflow_local.py without starting Airflow: environment, CLI settings, the Celery
topology and docker/ against it, ports, sockets, process trees."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dags import _airflow_env as ENV
from tests.system._stack import load_airflow_local, max_overlap

local = load_airflow_local()


def _config(tmp_path: Path, **kw: object) -> object:
    return local.StackConfig(airflow_home=tmp_path / "airflow", ragtrail_home=tmp_path / "rt", **kw)


def test_free_port_is_bindable_on_loopback() -> None:
    port = local.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_stack_env_points_every_process_at_one_installation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")  # from the calling shell
    monkeypatch.setenv("RAGTRAIL_CONFIG", "/somewhere/else.yaml")
    env = local.stack_env(_config(tmp_path, api_port=18123, extra_env={"RAGTRAIL_SEED": "5"}))
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert "RAGTRAIL_CONFIG" not in env
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18123/execution/"
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1" and env["AIRFLOW__API__PORT"] == "18123"
    assert int(env["AIRFLOW__CORE__PARALLELISM"]) <= 4  # not the default 32 workers
    assert env["RAGTRAIL_HOME"] == str(tmp_path / "rt")
    assert env["RAGTRAIL_INDEX_BACKEND"] == "embedded"
    assert env["RAGTRAIL_TORCH_THREADS"] == "1"
    assert env["RAGTRAIL_SEED"] == "5"
    include, root = env["PYTHONPATH"].split(os.pathsep)
    assert include == str(local.REPO_ROOT / "include") and root == str(local.REPO_ROOT)
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(local.REPO_ROOT / "dags")
    ports = {env[k] for k in env if k.endswith("LOG_SERVER_PORT")}
    assert len(ports) == 2 and not ports & {"8793", "8794"}


def test_base_env_matches_the_airflow_tests_settings(tmp_path: Path) -> None:
    """The documented stack and tests/dags/_airflow_env.py configure Airflow alike."""
    ours = local.base_env(tmp_path / "airflow")
    tests = {k: v for k, v in ENV.airflow_env(tmp_path).items() if k != ENV.MARKER}
    # The tests log at WARNING only; a local stack keeps Airflow's INFO task logs.
    assert set(tests) - set(ours) == {"AIRFLOW__LOGGING__LOGGING_LEVEL"}
    assert set(ours) <= set(tests)
    differing = {k for k in ours if ours[k] != tests[k]}
    assert differing == {"AIRFLOW__API_AUTH__JWT_SECRET"}  # each a local-only value


def test_pid_ppid_parses_names_with_spaces_and_parens() -> None:
    assert local._pid_ppid("4242 (airflow worker (x)) S 17 4242 4242 0 -1") == (4242, 17)


def test_process_tree_includes_descendants(tmp_path: Path) -> None:
    stack = local.AirflowStack(local.stack_env(_config(tmp_path)))
    assert stack.all_pids() == []  # nothing started, nothing to stop
    stack.stop()  # and stopping nothing is harmless


# ------------------------------------------------------------------- settings from the CLI


def test_env_assignments_are_parsed_and_the_home_is_refused() -> None:
    parsed = local.parse_env_assignments(["RAGTRAIL_REPORTS_URL=http://h/r?a=b", "X="])
    assert parsed == {"RAGTRAIL_REPORTS_URL": "http://h/r?a=b", "X": ""}
    for bad in ("RAGTRAIL_REPORTS_URL", "1X=2", "A B=1"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            local.parse_env_assignments([bad])
    with pytest.raises(ValueError, match="--ragtrail-home"):
        local.parse_env_assignments(["RAGTRAIL_HOME=/elsewhere"])


def _exports(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, str]:
    assert local.main(["env", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    return {k.removeprefix("export "): json.loads(v) for k, v in (x.split("=", 1) for x in lines)}


def test_cli_passes_ragtrail_settings_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGTRAIL_REPORTS_URL", "http://shell/reports")
    monkeypatch.setenv("RAGTRAIL_SEED", "7")
    monkeypatch.setenv("RAGTRAIL_HOME", "/shell/home")
    home = ["--home", str(tmp_path), "--port", "18124"]

    dropped = _exports(capsys, *home)
    assert "RAGTRAIL_REPORTS_URL" not in dropped and "RAGTRAIL_SEED" not in dropped
    assert dropped["RAGTRAIL_HOME"] == str(tmp_path / "ragtrail")

    given = _exports(capsys, *home, "--env", "RAGTRAIL_REPORTS_URL=http://cli/reports")
    assert given["RAGTRAIL_REPORTS_URL"] == "http://cli/reports" and "RAGTRAIL_SEED" not in given

    kept = _exports(
        capsys, *home, "--keep-ragtrail-env", "--env", "RAGTRAIL_REPORTS_URL=http://cli/reports"
    )
    assert kept["RAGTRAIL_SEED"] == "7"
    assert kept["RAGTRAIL_REPORTS_URL"] == "http://cli/reports"  # --env wins over the shell
    assert kept["RAGTRAIL_HOME"] == str(tmp_path / "ragtrail")  # the shell's home never does

    with pytest.raises(SystemExit, match="--ragtrail-home"):
        local.main(["env", *home, "--env", "RAGTRAIL_HOME=/x"])


# ------------------------------------------------------------------------ Celery topology

PG = "postgresql+psycopg://ragtrail@127.0.0.1:54329/ragtrail_test"
REDIS = "redis://127.0.0.1:54331/0"
S3 = "http://127.0.0.1:54330"


def test_celery_cli_needs_its_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RAGTRAIL_TEST_PG_URL", "TEST_REDIS_URL", "RAGTRAIL_TEST_S3_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit, match="--pg-url, --redis-url"):
        local.main(["env", "--home", str(tmp_path), "--executor", "celery"])
    with pytest.raises(SystemExit, match="use --executor celery"):
        local.main(["drop", "--home", str(tmp_path)])


def test_celery_env_names_one_home_s_databases_bucket_and_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--home", str(tmp_path / "a"), "--executor", "celery", "--port", "18125"]
    servers = ["--pg-url", PG, "--redis-url", REDIS, "--s3-endpoint", S3]
    env = _exports(capsys, *argv, *servers)
    assert env == _exports(capsys, *argv, *servers) | {
        k: env[k]
        for k in env
        if k.endswith("LOG_SERVER_PORT")  # free ports, picked each time
    }
    ident = local.stack_id_for(tmp_path / "a")
    airflow_db = f"postgresql+psycopg://ragtrail@127.0.0.1:54329/airflow_celery_{ident}"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == airflow_db
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] == airflow_db  # psycopg, not asyncpg
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == "db+" + airflow_db
    assert env["AIRFLOW__CELERY__BROKER_URL"] == REDIS
    assert env["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__GLOBAL_KEYPREFIX"] == f"ragtrail-{ident}:"
    assert env["RAGTRAIL_DATABASE_URL"].endswith(f"/ragtrail_celery_{ident}")
    assert env["RAGTRAIL_ARTIFACT_URI"] == f"s3://ragtrail-{ident}/ragtrail"
    assert env["RAGTRAIL_S3_ENDPOINT_URL"] == S3
    assert env["RAGTRAIL_INDEX_BACKEND"] == "embedded"
    other = _exports(capsys, "--home", str(tmp_path / "b"), "--executor", "celery", *servers)
    assert other["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] != airflow_db  # each home its own


def test_with_database_keeps_user_host_port_and_query() -> None:
    url = "postgresql+psycopg://u:p@h:5432/db?sslmode=disable"
    assert local.with_database(url, "x") == "postgresql+psycopg://u:p@h:5432/x?sslmode=disable"
    assert local.libpq_url(PG).startswith("postgresql://ragtrail@")


def test_workers_serve_the_night_s_queues_and_name_their_tasks_host() -> None:
    from ragtrail.pipeline.night import NIGHT

    queues = {s.queue for f in NIGHT for s in f.steps if s.queue} | {"default"}
    assert {w.queue for w in local.CELERY_WORKERS} == queues
    workers = local.worker_components(host="box")
    assert set(workers) == {"worker-default", "worker-gpu"}
    gpu = workers["worker-gpu"]
    assert gpu.args[gpu.args.index("--celery-hostname") + 1] == "gpu@box"
    assert "--skip-serve-logs" in gpu.args  # the log server would listen on every interface
    assert gpu.env[local.WORKER_HOSTNAME_VARIABLE] == "gpu@box"
    # Airflow imports the callable by this dotted path in the workers (repository root on the
    # path): it must resolve, and report the worker's name.
    module, _, name = gpu.env["AIRFLOW__CORE__HOSTNAME_CALLABLE"].rpartition(".")
    callable_ = getattr(importlib.import_module(module), name)
    replacement = local.CeleryWorker("default", 2, node="default2")
    assert replacement.name == "worker-default2"
    assert replacement.celery_hostname("box") == "default2@box"
    os.environ[local.WORKER_HOSTNAME_VARIABLE] = "gpu@box"
    try:
        assert callable_() == "gpu@box"
    finally:
        del os.environ[local.WORKER_HOSTNAME_VARIABLE]
    assert callable_() == socket.getfqdn()


# ------------------------------------------------------ docker/ runs what the test verifies


def _compose() -> dict[str, Any]:
    return yaml.safe_load((local.REPO_ROOT / "docker" / "docker-compose.yml").read_text())


def test_compose_runs_the_tested_commands() -> None:
    services = _compose()["services"]
    for worker, service in zip(
        local.CELERY_WORKERS, ("airflow-worker", "airflow-worker-gpu"), strict=True
    ):
        assert services[service]["command"] == worker.args(), service
    for component, service in (
        ("api-server", "airflow-apiserver"),
        ("scheduler", "airflow-scheduler"),
        ("dag-processor", "airflow-dag-processor"),
        ("triggerer", "airflow-triggerer"),
    ):
        assert services[service]["command"] == local.COMPONENTS[component], service


def test_compose_sets_the_tested_celery_and_ragtrail_settings() -> None:
    compose = _compose()
    common = compose["x-airflow-common"]["environment"]
    backends = local.CeleryBackends.on_servers("x", pg_url=PG, redis_url=REDIS, s3_endpoint_url=S3)
    tested = local.celery_env(backends)
    assert sorted(set(tested) - set(common)) == []
    assert common["AIRFLOW__CORE__EXECUTOR"] == tested["AIRFLOW__CORE__EXECUTOR"]
    db = common["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert db.startswith("postgresql+psycopg://")
    assert common["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] == db
    assert common["AIRFLOW__CELERY__RESULT_BACKEND"] == "db+" + db
    assert common["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
    assert common["RAGTRAIL_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert common["RAGTRAIL_ARTIFACT_URI"].startswith("s3://")
    key = "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT"
    assert common[key] == tested[key]
    # every Airflow container shares the task logs (no log server runs) and the ragtrail home
    for name, service in compose["services"].items():
        if name.startswith("airflow-"):
            assert {"airflow-logs:/opt/airflow/logs", "ragtrail-home:/opt/ragtrail-home"} <= set(
                service.get("volumes", compose["x-airflow-common"]["volumes"])
            ), name
    published = [p for s in compose["services"].values() for p in s.get("ports", [])]
    assert published and all(p.startswith("127.0.0.1:") for p in published)


# -------------------------------------------------------------------- processes and sockets


def test_listening_sockets_of_a_process_with_their_addresses() -> None:
    assert local._address("0100007F:1F90", socket.AF_INET) == ("127.0.0.1", 8080)
    v6 = "00000000000000000000000001000000:0050"
    assert local._address(v6, socket.AF_INET6) == ("::1", 80)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert (os.getpid(), "127.0.0.1", port) in local.listening_sockets([os.getpid()])
    assert (os.getpid(), "127.0.0.1", port) not in local.listening_sockets([os.getpid()])


def test_kill_component_kills_descendants_that_left_its_process_group(tmp_path: Path) -> None:
    """As Airflow's task processes do (setpgid): killing the group alone would miss them."""
    stack = local.AirflowStack(local.stack_env(_config(tmp_path)))
    pidfile = tmp_path / "escaped.pid"
    proc = subprocess.Popen(
        ["sh", "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 60' & exec sleep 60"],
        start_new_session=True,
    )
    stack.processes["worker-x"] = proc
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    escaped = int(pidfile.read_text())
    assert os.getpgid(escaped) != os.getpgid(proc.pid)
    killed = stack.kill_component("worker-x")
    assert {proc.pid, escaped} <= set(killed)
    assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while local._alive(escaped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not local._alive(escaped)
    assert "worker-x" not in stack.processes and stack.exited() == {}


def test_max_overlap_counts_touching_intervals_once() -> None:
    t = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=s) for s in range(10)]
    assert max_overlap([]) == 0
    assert max_overlap([(t[0], t[2]), (t[2], t[4])]) == 1  # one ends as the next starts
    assert max_overlap([(t[0], t[3]), (t[2], t[4]), (t[5], t[6])]) == 2
    assert max_overlap([(t[0], t[9]), (t[1], t[2]), (t[1], t[3])]) == 3
