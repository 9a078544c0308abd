"""Helpers of the system test: the local stack of scripts/airflow_local.py, and REST look-ups.

Everything is read through Airflow's v2 REST API on the api-server (a JWT from
SimpleAuthManager's all-admins token endpoint), never by importing Airflow in the test process:
the pytest session has its own AIRFLOW_HOME (tests/dags/_airflow_env.py) that must stay apart.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.dags import _airflow_env as ENV

BAD_TI_STATES = frozenset({"failed", "up_for_retry", "upstream_failed"})
FINISHED_RUN_STATES = frozenset({"success", "failed"})


def load_airflow_local() -> ModuleType:
    """scripts/airflow_local.py as a module (scripts/ is not a package), once per process."""
    name = "ragtrail_airflow_local"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, ENV.REPO_ROOT / "scripts" / "airflow_local.py"
        )
        assert spec and spec.loader
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


class RunFailed(AssertionError):
    """A DAG run failed or one of its tasks failed / went up for retry."""


class Deadline:
    """One time budget for the whole test; every wait draws from it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()

    @property
    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start


def dag_runs(stack: Any, dag_id: str) -> list[dict[str, Any]]:
    return stack.get(f"/api/v2/dags/{dag_id}/dagRuns", limit=100)["dag_runs"]


def task_instances(stack: Any, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
    return stack.get(path, limit=100)["task_instances"]


def task_log_tail(stack: Any, dag_id: str, run_id: str, task_id: str, lines: int = 60) -> str:
    """The end of every attempt's log file of one task (mapped indexes included)."""
    folder = stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    parts = []
    for path in sorted(folder.rglob("*.log")):
        text = path.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"----- {path.relative_to(stack.home)}\n" + "\n".join(text))
    return "\n".join(parts) or f"(no log files under {folder})"


def wait_for_run(
    stack: Any,
    dag_id: str,
    matches: Callable[[dict[str, Any]], bool],
    deadline: Deadline,
    *,
    what: str,
    allowed_retries: Collection[tuple[str, int]] = (),
) -> dict[str, Any]:
    """Poll until a run of ``dag_id`` matching ``matches`` has finished; returns it.

    Fails at once (``RunFailed``, with the task's log) when one of its tasks fails or goes up
    for retry: the DAGs retry after minutes, far beyond the test's budget. ``allowed_retries``
    names the ``(task_id, map_index)`` a test expects to go up for retry.
    """
    while True:
        if dead := stack.exited():
            raise AssertionError(f"Airflow components exited while waiting for {what}: {dead}")
        runs = [r for r in dag_runs(stack, dag_id) if matches(r)]
        for run in runs:
            run_id = run["dag_run_id"]
            bad = [
                ti
                for ti in task_instances(stack, dag_id, run_id)
                if ti["state"] in BAD_TI_STATES
                and not (
                    ti["state"] == "up_for_retry"
                    and (ti["task_id"], ti["map_index"]) in allowed_retries
                )
            ]
            if bad:
                names = sorted({f"{ti['task_id']}[{ti['map_index']}]={ti['state']}" for ti in bad})
                logs = "\n".join(task_log_tail(stack, dag_id, run_id, t["task_id"]) for t in bad)
                raise RunFailed(f"{what}: {dag_id} run {run_id} has {names}\n{logs}")
            if run["state"] in FINISHED_RUN_STATES:
                if run["state"] != "success":
                    raise RunFailed(f"{what}: {dag_id} run {run_id} ended {run['state']}")
                return run
        if deadline.left <= 0:
            seen = [(r["dag_run_id"], r["run_type"], r["state"]) for r in runs]
            raise AssertionError(
                f"timed out after {deadline.elapsed:.0f}s waiting for {what}; runs seen: {seen}"
            )
        time.sleep(2)


def asset_events_from(stack: Any, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Asset events a DAG run emitted (name, extra, ids)."""
    body = stack.get("/api/v2/assets/events", source_dag_id=dag_id, source_run_id=run_id, limit=100)
    return body["asset_events"]


def consumed_asset_events(stack: Any, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Asset events that triggered a DAG run."""
    return stack.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/upstreamAssetEvents")["asset_events"]


def xcom_values(stack: Any, dag_id: str, run_id: str) -> dict[tuple[str, int, str], Any]:
    """Every XCom of a run, ``(task_id, map_index, key) -> value``.

    Values come back as the stored JSON and are parsed strictly (NaN / Infinity refused by
    :meth:`AirflowStack._request`), so reading them all is the strict-JSON check.
    """
    base = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
    entries = stack.get(f"{base}/~/xcomEntries", limit=100)["xcom_entries"]
    values = {}
    for entry in entries:
        task_id, key, index = entry["task_id"], entry["key"], entry["map_index"]
        got = stack.get(f"{base}/{task_id}/xcomEntries/{key}", map_index=index)
        values[(task_id, index, key)] = got["value"]
    return values


def inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def task_tries(stack: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> list[Any]:
    """Every try of one task instance (its history and the current try), oldest first."""
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/tries"
    tries = stack.get(path)["task_instances"]
    return sorted(tries, key=lambda t: t["try_number"])


def when(stamp: str) -> datetime:
    """An API timestamp (ISO 8601, ``Z`` or an offset) as an aware datetime."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def max_overlap(intervals: Iterable[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one instant (one that ends as another starts: not both)."""
    spans = list(intervals)
    events = sorted(
        [(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans],
        key=lambda e: (e[0], e[1]),  # at equal times the end (-1) comes first
    )
    best = current = 0
    for _, step in events:
        current += step
        best = max(best, current)
    return best
