"""scripts/airflow_local.py without starting anything: environment, ports, process tree."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.dags import _airflow_env as ENV
from tests.system._stack import load_airflow_local

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
    assert stack._all_pids() == []  # nothing started, nothing to stop
    stack.stop()  # and stopping nothing is harmless
