#!/usr/bin/env python
"""Run ragtrail's DAGs under a real Airflow 3 scheduler on this machine, without Docker.

Two topologies, both with this repository's ``dags/`` and ``plugins/`` and one ``RAGTRAIL_HOME``
shared by every process; each process runs in its own process group and logs to
``$AIRFLOW_HOME/stack-logs/<component>.log``:

- ``--executor local`` (default): SQLite metadata DB, LocalExecutor; api-server, scheduler,
  dag-processor and triggerer.
- ``--executor celery``: the production topology of ``docker/docker-compose.yml`` on loopback
  services. Airflow's metadata DB and Celery's result backend on PostgreSQL, Redis as the
  broker, two Celery workers (queue ``default``, concurrency 2, and queue ``gpu``, concurrency
  1: the training and gate tasks of ``retrain_models``), ragtrail's metadata on PostgreSQL, its
  artifacts and reports on S3, the embedded index. ``up`` creates what it needs, named after
  the home folder (databases ``airflow_celery_<id>`` and ``ragtrail_celery_<id>``, bucket
  ``ragtrail-<id>``, Redis keys under ``ragtrail-<id>:``), so ``up`` on the same home again
  reuses them. The servers come from ``scripts/services.sh up``, whose exports are the
  defaults of ``--pg-url`` (a PostgreSQL user that may create databases), ``--redis-url`` and
  ``--s3-endpoint``.

Usage (from the repository root, with the project venv)::

    .venv/bin/python scripts/airflow_local.py up --home /tmp/ragtrail-airflow [--port 8080]
        [--unpause] [--trigger] [--env RAGTRAIL_REPORTS_URL=URL ...] [--keep-ragtrail-env]

    eval "$(bash scripts/services.sh up)"
    .venv/bin/python scripts/airflow_local.py up --executor celery --home /tmp/ragtrail-celery \
        [--pg-url URL] [--redis-url URL] [--s3-endpoint URL] [--unpause] [--trigger]
    .venv/bin/python scripts/airflow_local.py drop --executor celery --home /tmp/ragtrail-celery

``up`` migrates the DB, applies ``airflow_settings.yaml`` (scripts/airflow_bootstrap.py),
starts the components, waits until they report healthy and the DAGs are parsed, then
keeps them running until Ctrl-C / SIGTERM, and stops them all. ``--unpause`` unpauses
ingest_corpus, generate_testset, evaluate_golden_sets, evaluate_retrieval and retrain_models
(which runs only when a drift decision fires); ``--trigger`` triggers ingest_corpus on
its default Params (the shipped sample corpus) in the slot of its latest missed interval, so
unpausing does not start a second, scheduled ingest. ``env`` prints the environment as
``export`` lines for running the ``airflow`` CLI against the same installation. ``drop``
(Celery, with the stack stopped) removes its databases, bucket and Redis keys; delete the home
folder yourself.

ragtrail settings: the stack drops every ``AIRFLOW__*`` and ``RAGTRAIL_*`` variable of the
calling shell (a throw-away installation must not pick up another one's database).
``--env KEY=VALUE`` (repeatable) sets a variable for every process, e.g.
``--env RAGTRAIL_REPORTS_URL=http://127.0.0.1:9001/reports``; ``--keep-ragtrail-env`` keeps the
shell's ``RAGTRAIL_*`` settings instead (``--env`` still wins; ``RAGTRAIL_HOME`` is always
``--ragtrail-home``, default ``<home>/ragtrail``).

The same :class:`AirflowStack` drives ``tests/system/test_airflow_scheduler.py`` (LocalExecutor)
and ``tests/system/test_celery_topology.py`` (Celery), so the documented way to run the stack
is the tested way; ``tests/unit/test_airflow_local.py`` checks that docker/docker-compose.yml
runs the same worker commands with the same settings. Standard library only, except the Celery
mode's set-up and clean-up (the venv's psycopg, boto3 and redis clients).

Notes for a small machine: the default ``[core] parallelism`` (32) makes the LocalExecutor spawn
32 worker processes; here it is 4, with 2 tasks per DAG at a time and one torch thread per task
(``RAGTRAIL_TORCH_THREADS``). The scheduler, triggerer and Celery workers run with
``--skip-serve-logs``: the api-server reads task logs straight from the shared log folder, and
Airflow's log servers would otherwise listen on all interfaces (ports 8793/8794). Every other
server binds 127.0.0.1; Celery workers listen on nothing (they talk to Redis), and flower is not
started. Two Celery workers on one machine report one host name, so each worker's tasks report
its Celery name instead (``[core] hostname_callable`` = :func:`worker_hostname`), as separate
machines would.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
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
RAGTRAIL_DAGS = (
    "ingest_corpus",
    "generate_testset",
    "evaluate_golden_sets",
    "evaluate_retrieval",
    "retrain_models",
)
COMPONENTS: dict[str, list[str]] = {
    "api-server": ["api-server"],  # host/port from AIRFLOW__API__HOST / AIRFLOW__API__PORT
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
HEALTH_KEYS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
EXECUTORS = {"local": "LocalExecutor", "celery": "CeleryExecutor"}
# Settings a parent shell may carry that must not leak into a throw-away installation.
_INHERITED_PREFIXES = ("AIRFLOW__", "RAGTRAIL_")
_INHERITED_NAMES = ("AIRFLOW_HOME", "AIRFLOW_CONFIG", "PYTHONPATH")
_EXPORTED_PREFIXES = ("AIRFLOW", "RAGTRAIL_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "PYTHONPATH")
_SETTING_PREFIX = "RAGTRAIL_"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Where each Celery worker's tasks find the name they report as their host (see worker_hostname).
WORKER_HOSTNAME_VARIABLE = "AIRFLOW_LOCAL_WORKER_HOSTNAME"
WORKER_HOSTNAME_CALLABLE = "scripts.airflow_local.worker_hostname"


@dataclass(frozen=True)
class Component:
    """One long-running ``airflow`` process: its arguments and its own variables."""

    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


def core_components() -> dict[str, Component]:
    """api-server, scheduler, dag-processor and triggerer."""
    return {name: Component(tuple(args)) for name, args in COMPONENTS.items()}


@dataclass(frozen=True)
class CeleryWorker:
    """One Celery worker of the production topology: the queue it serves and its concurrency.

    The command is the one docker/docker-compose.yml runs (a unit test compares them): the log
    server is skipped (it would listen on every interface), mingle and gossip are off (two
    workers need no start-up sync, and Redis carries less chatter).
    """

    queue: str
    concurrency: int
    node: str = ""  # the node name before '@'; default: the queue (a replacement takes another)

    @property
    def name(self) -> str:
        """The component name, which is also its log file's name."""
        return f"worker-{self.node or self.queue}"

    def celery_hostname(self, host: str = "%h") -> str:
        """Celery's node name (``%h``: the machine's host name, expanded by Celery)."""
        return f"{self.node or self.queue}@{host}"

    def args(self, host: str = "%h") -> list[str]:
        """The ``airflow`` arguments that start this worker."""
        return [
            "celery",
            "worker",
            "--queues",
            self.queue,
            "--concurrency",
            str(self.concurrency),
            "--celery-hostname",
            self.celery_hostname(host),
            "--skip-serve-logs",
            "--without-mingle",
            "--without-gossip",
        ]


CELERY_WORKERS = (CeleryWorker("default", 2), CeleryWorker("gpu", 1))
"""The workers of the production topology: queue ``default`` for everything but training, and
queue ``gpu`` for the training and gate tasks (``Step.queue`` in ragtrail.pipeline.night)."""


def worker_hostname() -> str:
    """The host name a task reports (``[core] hostname_callable`` of the local Celery workers).

    Airflow records it on the task instance and checks it on every heartbeat. Two workers on one
    machine would both report the machine's name; each local worker's environment names it
    after its Celery node instead, so the task instances say which worker ran them.
    """
    return os.environ.get(WORKER_HOSTNAME_VARIABLE) or socket.getfqdn()


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
class CeleryBackends:
    """Where one Celery stack keeps its state, all on servers it shares with others.

    ``airflow_db_url`` holds Airflow's metadata and Celery's results; ``key_prefix`` keeps this
    stack's queues apart from any other stack on the same Redis (both have queues named
    ``default`` and ``gpu``); ``artifact_uri`` (``s3://bucket/prefix``) and ``s3_endpoint_url``
    are ragtrail's artifact store, None for artifacts under ``RAGTRAIL_HOME``.
    """

    airflow_db_url: str
    ragtrail_db_url: str
    broker_url: str
    key_prefix: str
    artifact_uri: str | None = None
    s3_endpoint_url: str | None = None
    workers: tuple[CeleryWorker, ...] = CELERY_WORKERS

    @classmethod
    def on_servers(
        cls,
        stack_id: str,
        *,
        pg_url: str,
        redis_url: str,
        s3_endpoint_url: str | None = None,
        bucket: str | None = None,
    ) -> CeleryBackends:
        """Names for stack ``stack_id`` on a PostgreSQL server (``pg_url``: any database of it,
        as a SQLAlchemy URL), a Redis server and, optionally, an S3 endpoint."""
        ident = re.sub(r"[^a-z0-9]", "_", stack_id.lower())
        return cls(
            airflow_db_url=with_database(pg_url, f"airflow_celery_{ident}"),
            ragtrail_db_url=with_database(pg_url, f"ragtrail_celery_{ident}"),
            broker_url=redis_url,
            key_prefix=f"ragtrail-{ident}:",
            artifact_uri=(
                f"s3://{bucket or 'ragtrail-' + ident.replace('_', '-')}/ragtrail"
                if s3_endpoint_url
                else None
            ),
            s3_endpoint_url=s3_endpoint_url,
        )

    @property
    def databases(self) -> tuple[str, str]:
        return (_database_of(self.airflow_db_url), _database_of(self.ragtrail_db_url))

    @property
    def bucket(self) -> str | None:
        if not self.artifact_uri:
            return None
        return urllib.parse.urlsplit(self.artifact_uri).netloc


def stack_id_for(home: Path) -> str:
    """A short id that names one home's databases, bucket and Redis keys (stable per path)."""
    return hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:10]


def with_database(url: str, database: str) -> str:
    """``url`` (a SQLAlchemy PostgreSQL URL) pointing at another database of the same server."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))


def _database_of(url: str) -> str:
    return urllib.parse.urlsplit(url).path.lstrip("/")


def celery_env(backends: CeleryBackends) -> dict[str, str]:
    """The settings of every process of a Celery stack: executor, metadata DB, broker, results,
    and ragtrail's metadata DB and artifact store (docker/docker-compose.yml sets the same keys).

    PostgreSQL is reached with psycopg 3 (ragtrail's driver), also for Airflow's async engine:
    left unset, Airflow would derive an asyncpg URL, and asyncpg is not installed.
    """
    env = {
        "AIRFLOW__CORE__EXECUTOR": EXECUTORS["celery"],
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": backends.airflow_db_url,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": backends.airflow_db_url,
        "AIRFLOW__CELERY__BROKER_URL": backends.broker_url,
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + backends.airflow_db_url,
        "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__GLOBAL_KEYPREFIX": backends.key_prefix,
        # A task's message is acknowledged when it ends (task_acks_late); one left by a dead
        # worker returns to the queue after this long. Airflow retries the task much sooner.
        "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "21600",
        "RAGTRAIL_DATABASE_URL": backends.ragtrail_db_url,
    }
    if backends.artifact_uri:
        env["RAGTRAIL_ARTIFACT_URI"] = backends.artifact_uri
    if backends.s3_endpoint_url:
        env["RAGTRAIL_S3_ENDPOINT_URL"] = backends.s3_endpoint_url
    return env


def worker_components(
    workers: Sequence[CeleryWorker] = CELERY_WORKERS, host: str | None = None
) -> dict[str, Component]:
    """Celery workers as stack components, each reporting its Celery node name as its host."""
    host = host or socket.gethostname()
    return {
        worker.name: Component(
            tuple(worker.args(host)),
            {
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": WORKER_HOSTNAME_CALLABLE,
                WORKER_HOSTNAME_VARIABLE: worker.celery_hostname(host),
            },
        )
        for worker in workers
    }


@dataclass(frozen=True)
class StackConfig:
    """Ports, homes, limits and backends of one local stack."""

    airflow_home: Path
    ragtrail_home: Path
    repo: Path = REPO_ROOT
    api_port: int = 0  # 0: pick a free one
    parallelism: int = 4
    max_active_tasks_per_dag: int = 2
    torch_threads: int = 1
    all_admins: bool = True  # SimpleAuthManager without logins: local / test installs only
    celery: CeleryBackends | None = None  # None: LocalExecutor on SQLite
    keep_ragtrail_env: bool = False  # keep the calling shell's ragtrail settings
    extra_env: Mapping[str, str] = field(default_factory=dict)


def stack_env(config: StackConfig, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment of every stack process (and of CLI calls against it).

    ``base`` defaults to :func:`base_env`; the scheduler-specific settings (executor, ports,
    execution API URL, parallelism, ragtrail's home and backends) are laid over it, then the
    Celery backends (:func:`celery_env`), then the calling shell's ragtrail settings when
    ``config.keep_ragtrail_env`` (never its home), then ``config.extra_env``. Other Airflow and
    ragtrail settings of the calling shell are dropped.
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
            "AIRFLOW__CORE__EXECUTOR": EXECUTORS["local"],
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
    if config.celery is not None:
        env.update(celery_env(config.celery))
        if config.celery.s3_endpoint_url:
            # A local S3 (moto, MinIO) takes any key unless told otherwise; real ones come
            # from the calling shell.
            for name, value in (
                ("AWS_ACCESS_KEY_ID", "testing"),
                ("AWS_SECRET_ACCESS_KEY", "testing"),
                ("AWS_DEFAULT_REGION", "us-east-1"),
            ):
                env.setdefault(name, value)
    if config.keep_ragtrail_env:
        env.update(
            {
                k: v
                for k, v in os.environ.items()
                if k.startswith(_SETTING_PREFIX) and k != "RAGTRAIL_HOME"
            }
        )
    env.update(config.extra_env)
    return env


def parse_env_assignments(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (``--env``) as a mapping; refuses malformed names and the home."""
    parsed: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise ValueError(f"--env wants KEY=VALUE with a variable name, not {item!r}")
        if name == "RAGTRAIL_HOME":
            raise ValueError("set the ragtrail home with --ragtrail-home, not --env")
        parsed[name] = value
    return parsed


def airflow_cli() -> list[str]:
    """The ``airflow`` console script next to this interpreter, else the one on PATH."""
    beside = Path(sys.executable).with_name("airflow")
    return [str(beside)] if beside.exists() else ["airflow"]


class AirflowStack:
    """Prepares, starts, watches and stops the four Airflow components of one installation."""

    def __init__(
        self,
        env: Mapping[str, str],
        cwd: Path | None = None,
        components: Mapping[str, Component] | None = None,
    ) -> None:
        self.env = dict(env)
        self.home = Path(self.env["AIRFLOW_HOME"])
        self.log_dir = self.home / "stack-logs"
        self.cwd = cwd or Path(self.env.get("RAGTRAIL_HOME", self.home))
        self.base_url = self.env["AIRFLOW__API__BASE_URL"]
        self.components = dict(components if components is not None else core_components())
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._log_offsets: dict[str, int] = {}  # each log's size when its process started
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
        for name in self.components:
            self.start_component(name)

    def start_component(self, name: str) -> subprocess.Popen[bytes]:
        """Start (or start again, after :meth:`kill_component`) one component."""
        component = self.components[name]
        if name in self.processes and self.processes[name].poll() is None:
            raise StackError(f"{name} is already running (pid {self.processes[name].pid})")
        log = (self.log_dir / f"{name}.log").open("ab")
        self._log_offsets[name] = log.tell()
        try:
            self.processes[name] = subprocess.Popen(
                [*airflow_cli(), *component.args],
                env={**self.env, **component.env},
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()  # the child holds its own descriptor
        return self.processes[name]

    def kill_component(self, name: str) -> list[int]:
        """SIGKILL one component and every process it started, as if its machine died.

        The tree is frozen (SIGSTOP) until no new process appears, then killed, so nothing it
        forks in between escapes (Airflow puts each task in a process group of its own). The
        component is forgotten (:meth:`exited` no longer reports it); returns the killed pids.
        """
        proc = self.processes.pop(name)
        frozen: set[int] = set()
        while True:
            tree = set(_descendants([proc.pid])) - frozen
            if not tree:
                break
            for pid in tree:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            frozen |= tree
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        return sorted(frozen)

    def exited(self) -> dict[str, int]:
        """Components that have exited, with their return codes."""
        return {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM every process group (and strays), wait ``grace`` s, then SIGKILL what is left."""
        pids = self.all_pids()
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

    def all_pids(self) -> list[int]:
        """Our components and every descendant (task workers may leave the process group)."""
        return _descendants([p.pid for p in self.processes.values() if p.poll() is None])

    def pids(self, name: str) -> list[int]:
        """One running component's process and its descendants."""
        proc = self.processes.get(name)
        return _descendants([proc.pid]) if proc is not None and proc.poll() is None else []

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

    def wait_worker_ready(self, name: str, timeout: float = 120) -> None:
        """Until Celery worker ``name`` logs that it is ready (connected, consuming its queue)."""
        log = self.log_dir / f"{name}.log"
        hostname = self.components[name].env.get(WORKER_HOSTNAME_VARIABLE, "")
        start = self._log_offsets.get(name, 0)  # this process's lines, not a killed one's

        def ready() -> bool:
            with log.open("rb") as fh:
                fh.seek(start)
                return f"{hostname} ready.".encode() in fh.read()

        self.wait_until(f"Celery worker {name} to be ready", ready, timeout)

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

    def patch(self, path: str, body: Mapping[str, Any], **query: Any) -> Any:
        return self._request("PATCH", path, body=body, query=query)

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


def _descendants(roots: Sequence[int]) -> list[int]:
    """``roots`` and every process below them, from /proc (roots that are gone are left out)."""
    children: dict[int, list[int]] = {}
    alive: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, ppid = _pid_ppid(stat.read_text())
        except (OSError, ValueError):
            continue
        alive.add(pid)
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [pid for pid in roots if pid in alive]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def listening_sockets(pids: Sequence[int]) -> list[tuple[int, str, int]]:
    """``(pid, address, port)`` of every TCP socket in LISTEN state that ``pids`` hold open."""
    listening: dict[str, tuple[str, int]] = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    listening[fields[9]] = _address(fields[1], family)
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    inode = target[len("socket:[") : -1] if target.startswith("socket:[") else ""
                    if inode in listening:
                        found.append((pid, *listening[inode]))
    return sorted(set(found))


def _address(hex_address: str, family: int) -> tuple[str, int]:
    """A /proc/net/tcp{,6} ``local_address`` field as (address, port)."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if sys.byteorder == "little":  # the kernel prints each 32-bit word in host byte order
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw), int(port, 16)


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


# ----------------------------------------------------------------- Celery set-up / clean-up


def libpq_url(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL (``postgresql+psycopg://...``) as a libpq one."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(scheme="postgresql"))


def provision(backends: CeleryBackends) -> None:
    """Create the stack's databases and bucket when missing (idempotent)."""
    import psycopg  # the venv's PostgreSQL driver (ragtrail's own)

    admin = libpq_url(with_database(backends.airflow_db_url, "postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in backends.databases:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if found.fetchone() is None:
                conn.execute(f'CREATE DATABASE "{name}"')
    if backends.bucket:
        client = s3_client(backends)
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            if backends.bucket not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
                client.create_bucket(Bucket=backends.bucket)


def drop(backends: CeleryBackends) -> None:
    """Remove what :func:`provision` created and the stack's Redis keys (the stack is down)."""
    import psycopg
    import redis

    admin = libpq_url(with_database(backends.airflow_db_url, "postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in backends.databases:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if backends.bucket:
        client = s3_client(backends)
        with contextlib.suppress(client.exceptions.NoSuchBucket):
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=backends.bucket):
                for obj in page.get("Contents", []):
                    client.delete_object(Bucket=backends.bucket, Key=obj["Key"])
            client.delete_bucket(Bucket=backends.bucket)
    broker = redis.Redis.from_url(backends.broker_url)
    try:
        keys = list(broker.scan_iter(match=backends.key_prefix + "*", count=500))
        if keys:
            broker.delete(*keys)
    finally:
        broker.close()


def s3_client(backends: CeleryBackends) -> Any:
    import boto3  # ragtrail's S3 client

    return boto3.client(
        "s3",
        endpoint_url=backends.s3_endpoint_url,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    )


# ------------------------------------------------------------------------------------- CLI


def _config_from_args(args: argparse.Namespace) -> StackConfig:
    home = Path(args.home).resolve()
    ragtrail_home = Path(args.ragtrail_home).resolve() if args.ragtrail_home else home / "ragtrail"
    celery = None
    if args.executor == "celery":
        missing = [flag for flag in ("pg_url", "redis_url") if not getattr(args, flag)]
        if missing:
            flags = ", ".join("--" + m.replace("_", "-") for m in missing)
            raise SystemExit(
                f'--executor celery needs {flags} (or `eval "$(bash scripts/services.sh up)"`)'
            )
        celery = CeleryBackends.on_servers(
            stack_id_for(home),
            pg_url=args.pg_url,
            redis_url=args.redis_url,
            s3_endpoint_url=args.s3_endpoint or None,
            bucket=args.bucket,
        )
    try:
        extra_env = parse_env_assignments(args.env)
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    return StackConfig(
        airflow_home=home / "airflow",
        ragtrail_home=ragtrail_home,
        api_port=args.port,
        parallelism=args.parallelism,
        celery=celery,
        keep_ragtrail_env=args.keep_ragtrail_env,
        extra_env=extra_env,
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line (``up`` / ``env``) documented in the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("command", choices=["up", "env", "drop"])
    parser.add_argument("--home", required=True, help="folder for AIRFLOW_HOME and RAGTRAIL_HOME")
    parser.add_argument("--ragtrail-home", help="RAGTRAIL_HOME (default: <home>/ragtrail)")
    parser.add_argument("--port", type=int, default=8080, help="api-server port on 127.0.0.1")
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--executor", choices=sorted(EXECUTORS), default="local")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("RAGTRAIL_TEST_PG_URL"),
        help="celery: a PostgreSQL server (SQLAlchemy URL; default $RAGTRAIL_TEST_PG_URL)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("TEST_REDIS_URL"),
        help="celery: the Redis broker (default $TEST_REDIS_URL)",
    )
    parser.add_argument(
        "--s3-endpoint",
        default=os.environ.get("RAGTRAIL_TEST_S3_ENDPOINT"),
        help="celery: artifacts on this S3 endpoint (default $RAGTRAIL_TEST_S3_ENDPOINT; "
        "empty: under the ragtrail home)",
    )
    parser.add_argument("--bucket", help="celery: the artifact bucket (default ragtrail-<id>)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable for every process, e.g. a ragtrail setting (repeatable)",
    )
    parser.add_argument(
        "--keep-ragtrail-env",
        action="store_true",
        help="keep the calling shell's ragtrail settings (dropped by default)",
    )
    parser.add_argument("--unpause", action="store_true", help="unpause the five ragtrail DAGs")
    parser.add_argument("--trigger", action="store_true", help="trigger ingest_corpus once")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = _config_from_args(args)
    if args.command == "drop":
        if config.celery is None:
            raise SystemExit("drop removes a Celery stack's databases: use --executor celery")
        drop(config.celery)
        print(f"dropped {', '.join(config.celery.databases)}, the bucket and the Redis keys")
        return 0
    env = stack_env(config)
    if args.command == "env":
        keep = sorted(k for k in env if k.startswith(_EXPORTED_PREFIXES))
        print("\n".join(f"export {k}={json.dumps(env[k])}" for k in keep))
        return 0

    components = core_components()
    if config.celery is not None:
        components |= worker_components(config.celery.workers)
    stack = AirflowStack(env, cwd=config.ragtrail_home, components=components)
    stop = False

    def _on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        if config.celery is not None:
            provision(config.celery)
        stack.prepare()
        stack.start()
        stack.wait_healthy()
        stack.wait_dags()
        for worker in config.celery.workers if config.celery else ():
            stack.wait_worker_ready(worker.name)
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
