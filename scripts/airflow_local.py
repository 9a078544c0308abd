#!/usr/bin/env python
"""Run ragtrail's DAGs under a real Airflow 3 scheduler on this machine, without Docker.

One throw-away (or kept) installation: SQLite metadata DB, LocalExecutor, this repository's
``dags/`` and ``plugins/``, one ``RAGTRAIL_HOME`` shared by every process. The api-server,
scheduler, dag-processor and triggerer run as separate processes, each in its own process
group, logging to ``$AIRFLOW_HOME/stack-logs/<component>.log``.

Usage (from the repository root, with the project venv)::

    .venv/bin/python scripts/airflow_local.py up --home /tmp/ragtrail-airflow [--port 8080]
        [--unpause] [--trigger]

``up`` migrates the DB, applies ``airflow_settings.yaml`` (scripts/airflow_bootstrap.py),
starts the four components, waits until they report healthy and the DAGs are parsed, then
keeps them running until Ctrl-C / SIGTERM, and stops them all. ``--unpause`` unpauses
ingest_corpus, generate_testset, evaluate_retrieval and retrain_models (which runs only when a
drift decision fires); ``--trigger`` triggers ingest_corpus on
its default Params (the shipped sample corpus) in the slot of its latest missed interval, so
unpausing does not start a second, scheduled ingest. ``env`` prints the environment as
``export`` lines for running the ``airflow`` CLI against the same installation.

The same :class:`AirflowStack` drives ``tests/system/test_airflow_scheduler.py``, so the
documented way to run the stack is the tested way. Standard library only.

Notes for a small machine: the default ``[core] parallelism`` (32) makes the LocalExecutor spawn
32 worker processes; here it is 4, with 2 tasks per DAG at a time and one torch thread per task
(``RAGTRAIL_TORCH_THREADS``). The scheduler and triggerer run with ``--skip-serve-logs``: the
api-server reads task logs straight from the shared log folder, and Airflow's log servers
would otherwise listen on all interfaces (ports 8793/8794).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RAGTRAIL_DAGS = ("ingest_corpus", "generate_testset", "evaluate_retrieval", "retrain_models")
COMPONENTS: dict[str, list[str]] = {
    "api-server": ["api-server"],  # host/port from AIRFLOW__API__HOST / AIRFLOW__API__PORT
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
HEALTH_KEYS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
# Settings a parent shell may carry that must not leak into a throw-away installation.
_INHERITED_PREFIXES = ("AIRFLOW__", "RAGTRAIL_")
_INHERITED_NAMES = ("AIRFLOW_HOME", "AIRFLOW_CONFIG", "PYTHONPATH")
_EXPORTED_PREFIXES = ("AIRFLOW", "RAGTRAIL_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "PYTHONPATH")


class StackError(RuntimeError):
    """The stack did not come up, or a request to it failed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(airflow_home: Path, repo: Path = REPO_ROOT) -> dict[str, str]:
    """Airflow settings of a self-contained installation in ``airflow_home`` (SQLite)."""
    return {
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(repo / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(airflow_home / "logs"),
        # Local-only value; every process must share it (workers authenticate with it).
        "AIRFLOW__API_AUTH__JWT_SECRET": "ragtrail-local-stack-only-" + "not-a-secret-" * 3,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


@dataclass(frozen=True)
class StackConfig:
    """Ports, homes and limits of one local stack."""

    airflow_home: Path
    ragtrail_home: Path
    repo: Path = REPO_ROOT
    api_port: int = 0  # 0: pick a free one
    parallelism: int = 4
    max_active_tasks_per_dag: int = 2
    torch_threads: int = 1
    all_admins: bool = True  # SimpleAuthManager without logins: local / test installs only
    extra_env: Mapping[str, str] = field(default_factory=dict)


def stack_env(config: StackConfig, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment of every stack process (and of CLI calls against it).

    ``base`` defaults to :func:`base_env`; the scheduler-specific settings (executor, ports,
    execution API URL, parallelism, ragtrail's home and backends) are laid over it, then
    ``config.extra_env``. Airflow/ragtrail settings of the calling shell are dropped.
    """
    api_port = config.api_port or free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_INHERITED_PREFIXES) and k not in _INHERITED_NAMES
    }
    env.update(base if base is not None else base_env(config.airflow_home, config.repo))
    env.update(
        {
            "AIRFLOW_HOME": str(config.airflow_home),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(config.parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(config.max_active_tasks_per_dag),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": str(config.all_admins),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            # Log servers are skipped (--skip-serve-logs); free ports in case one starts anyway.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            # One ragtrail installation for every process: the DAGs pass only ids and URIs.
            "RAGTRAIL_HOME": str(config.ragtrail_home),
            "RAGTRAIL_INDEX_BACKEND": "embedded",
            "RAGTRAIL_TORCH_THREADS": str(config.torch_threads),
            # include/ first: this checkout's library wins over any installed copy; the root
            # makes `tests.*` helpers (scripted test doubles) importable in workers.
            "PYTHONPATH": os.pathsep.join([str(config.repo / "include"), str(config.repo)]),
        }
    )
    env.update(config.extra_env)
    return env


def airflow_cli() -> list[str]:
    """The ``airflow`` console script next to this interpreter, else the one on PATH."""
    beside = Path(sys.executable).with_name("airflow")
    return [str(beside)] if beside.exists() else ["airflow"]


class AirflowStack:
    """Prepares, starts, watches and stops the four Airflow components of one installation."""

    def __init__(self, env: Mapping[str, str], cwd: Path | None = None) -> None:
        self.env = dict(env)
        self.home = Path(self.env["AIRFLOW_HOME"])
        self.log_dir = self.home / "stack-logs"
        self.cwd = cwd or Path(self.env.get("RAGTRAIL_HOME", self.home))
        self.base_url = self.env["AIRFLOW__API__BASE_URL"]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._token: str | None = None

    # ------------------------------------------------------------------------- lifecycle

    def run_cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """One ``airflow`` CLI call against this installation; raises with its output."""
        done = subprocess.run(
            [*airflow_cli(), *args],
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise StackError(f"airflow {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done

    def prepare(self, *, pools_only: bool = False, timeout: float = 300) -> None:
        """``airflow db migrate``, then airflow_settings.yaml through the bootstrap script."""
        for path in (self.home, self.log_dir, self.cwd, Path(self.env["RAGTRAIL_HOME"])):
            path.mkdir(parents=True, exist_ok=True)
        self.run_cli("db", "migrate", timeout=timeout)
        bootstrap = [sys.executable, str(REPO_ROOT / "scripts" / "airflow_bootstrap.py")]
        if pools_only:
            bootstrap.append("--pools-only")
        done = subprocess.run(
            bootstrap, env=self.env, cwd=self.cwd, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise StackError(f"airflow_bootstrap.py failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        """Start every component in its own process group (``start_new_session``)."""
        for name, args in COMPONENTS.items():
            log = (self.log_dir / f"{name}.log").open("ab")
            try:
                self.processes[name] = subprocess.Popen(
                    [*airflow_cli(), *args],
                    env=self.env,
                    cwd=self.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            finally:
                log.close()  # the child holds its own descriptor

    def exited(self) -> dict[str, int]:
        """Components that have exited, with their return codes."""
        return {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM every process group (and strays), wait ``grace`` s, then SIGKILL what is left."""
        pids = self._all_pids()
        for proc in self.processes.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            for proc in self.processes.values():
                proc.poll()  # reap our direct children
            time.sleep(0.2)
        for proc in self.processes.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in pids:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for proc in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def _all_pids(self) -> list[int]:
        """Our components and every descendant (task workers may leave the process group)."""
        roots = {p.pid for p in self.processes.values() if p.poll() is None}
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                pid, ppid = _pid_ppid(stat.read_text())
            except (OSError, ValueError):
                continue
            children.setdefault(ppid, []).append(pid)
        found, todo = [], list(roots)
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    # -------------------------------------------------------------------------- waiting

    def wait_until(
        self, what: str, check: Callable[[], Any], timeout: float, interval: float = 1.0
    ) -> Any:
        """Poll ``check()`` until it returns a truthy value; fail on timeout or a dead component."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if dead := self.exited():
                raise StackError(f"components exited while waiting for {what}: {dead}")
            try:
                if result := check():
                    return result
                last_error = None
            except (OSError, StackError, ValueError) as exc:  # not up yet
                last_error = exc
            time.sleep(interval)
        raise StackError(f"timed out after {timeout:.0f}s waiting for {what} ({last_error!r})")

    def health(self) -> dict[str, str]:
        """Status per component from the api-server's (unauthenticated) health endpoint."""
        body = self._request("GET", "/api/v2/monitor/health", auth=False)
        return {key: (body.get(key) or {}).get("status", "unknown") for key in HEALTH_KEYS}

    def wait_healthy(self, timeout: float = 120) -> None:
        """Until the api-server answers and reports every component healthy."""
        self.wait_until(
            "a healthy scheduler, dag-processor and triggerer",
            lambda: all(s == "healthy" for s in self.health().values()),
            timeout,
        )

    def wait_dags(self, dag_ids: Sequence[str] = RAGTRAIL_DAGS, timeout: float = 120) -> None:
        """Until the dag-processor has stored ``dag_ids``; fail at once on an import error."""

        def parsed() -> bool:
            errors = self.get("/api/v2/importErrors")["import_errors"]
            if errors:
                raise AssertionError(f"DAG import errors: {json.dumps(errors, indent=1)}")
            known = {d["dag_id"] for d in self.get("/api/v2/dags", limit=100)["dags"]}
            return set(dag_ids) <= known

        self.wait_until(f"DAGs {list(dag_ids)} to be parsed", parsed, timeout)

    # ----------------------------------------------------------------------- REST (v2 API)

    def token(self) -> str:
        """A JWT from SimpleAuthManager's no-credentials endpoint (``all_admins`` installs)."""
        if self._token is None:
            self._token = self._request("GET", "/auth/token", auth=False)["access_token"]
        return self._token

    def get(self, path: str, **query: Any) -> Any:
        return self._request("GET", path, query=query)

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        return self._request("POST", path, body=body)

    def patch(self, path: str, body: Mapping[str, Any]) -> Any:
        return self._request("PATCH", path, body=body)

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, Any] | None = None,
        auth: bool = True,
    ) -> Any:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:2000]
            raise StackError(f"{method} {path} -> HTTP {exc.code}: {detail}") from exc
        return json.loads(raw, parse_constant=_reject_constant) if raw else None

    # ------------------------------------------------------------------ ragtrail workflow

    def unpause(self, dag_ids: Sequence[str]) -> None:
        for dag_id in dag_ids:
            self.patch(f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger_in_missed_slot(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Trigger a paused, time-scheduled DAG in the slot of its next scheduled run.

        Unpausing a cron DAG with ``catchup=False`` starts its latest missed interval at once.
        A manual run with that interval's logical date takes the slot: the scheduler sees a run
        for it, skips creating the scheduled one and moves on to the next interval. Call this
        while the DAG is still paused, then unpause it.
        """
        dag = self.get(f"/api/v2/dags/{dag_id}")
        if not dag["is_paused"]:
            raise StackError(f"{dag_id} must be paused when triggered in its missed slot")
        logical_date = dag.get("next_dagrun_logical_date") or datetime.now(UTC).isoformat()
        run = self.post(
            f"/api/v2/dags/{dag_id}/dagRuns",
            {"logical_date": logical_date, "conf": dict(conf or {})},
        )
        return str(run["dag_run_id"])

    # ------------------------------------------------------------------------- diagnosis

    def log_tails(self, lines: int = 60, task_lines: int = 80) -> str:
        """The last lines of every component log and of every task log, for failure reports."""
        parts = []
        for path in sorted(self.log_dir.glob("*.log")):
            parts.append(_tail(path, lines))
        task_logs = sorted(
            (self.home / "logs").glob("dag_id=*/**/*.log"), key=lambda p: p.stat().st_mtime
        )
        for path in task_logs[-12:]:
            parts.append(_tail(path, task_lines))
        return "\n".join(parts)


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        return f"===== {path}: {exc}"
    return f"===== {path} (last {len(text)} lines)\n" + "\n".join(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-strict JSON constant {name} in an Airflow API response")


def _pid_ppid(stat: str) -> tuple[int, int]:
    """(pid, ppid) from a /proc/<pid>/stat line (the command name may contain spaces)."""
    pid = int(stat.split(" ", 1)[0])
    fields = stat.rsplit(")", 1)[1].split()
    return pid, int(fields[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


# ------------------------------------------------------------------------------------- CLI


def _config_from_args(args: argparse.Namespace) -> StackConfig:
    home = Path(args.home).resolve()
    ragtrail_home = Path(args.ragtrail_home).resolve() if args.ragtrail_home else home / "ragtrail"
    return StackConfig(
        airflow_home=home / "airflow",
        ragtrail_home=ragtrail_home,
        api_port=args.port,
        parallelism=args.parallelism,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "env"])
    parser.add_argument("--home", required=True, help="folder for AIRFLOW_HOME and RAGTRAIL_HOME")
    parser.add_argument("--ragtrail-home", help="RAGTRAIL_HOME (default: <home>/ragtrail)")
    parser.add_argument("--port", type=int, default=8080, help="api-server port on 127.0.0.1")
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--unpause", action="store_true", help="unpause the four ragtrail DAGs")
    parser.add_argument("--trigger", action="store_true", help="trigger ingest_corpus once")
    args = parser.parse_args(argv)
    config = _config_from_args(args)
    env = stack_env(config)
    if args.command == "env":
        keep = sorted(k for k in env if k.startswith(_EXPORTED_PREFIXES))
        print("\n".join(f"export {k}={json.dumps(env[k])}" for k in keep))
        return 0

    stack = AirflowStack(env, cwd=config.ragtrail_home)
    stop = False

    def _on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        stack.prepare()
        stack.start()
        stack.wait_healthy()
        stack.wait_dags()
        if args.trigger:
            print("triggered ingest_corpus:", stack.trigger_in_missed_slot("ingest_corpus"))
        if args.unpause:
            stack.unpause(RAGTRAIL_DAGS[1:])
            stack.unpause(RAGTRAIL_DAGS[:1])  # the producer last: consumers are ready for it
        print(f"Airflow is up on {stack.base_url} (logs: {stack.log_dir}); Ctrl-C stops it.")
        while not stop and not stack.exited():
            time.sleep(1)
        if dead := stack.exited():
            print(f"components exited: {dead}", file=sys.stderr)
            return 1
        return 0
    except StackError as exc:
        print(f"{exc}\n{stack.log_tails()}", file=sys.stderr)
        return 1
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
