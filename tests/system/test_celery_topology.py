"""System test: the production topology, really run (CeleryExecutor, a ``gpu`` queue, pools).

What runs: ``scripts/airflow_local.py``'s Celery stack (the topology of docker/docker-compose.yml)
on the servers ``scripts/services.sh`` starts on 127.0.0.1: Airflow's metadata DB and Celery's
result backend in a fresh PostgreSQL database, Redis as the broker (this stack's keys under
their own prefix), ragtrail's metadata in a second fresh PostgreSQL database, its artifacts and
reports in a fresh bucket on moto_server (S3), the embedded index under one RAGTRAIL_HOME.
api-server, scheduler, dag-processor and triggerer, and two Celery workers: ``default@<host>``
(queue ``default``, concurrency 2) and ``gpu@<host>`` (queue ``gpu``, concurrency 1). Pools come
from airflow_settings.yaml; ``llm_api`` is narrowed to 1 slot here, so that the default worker's
two slots could overlap two LLM tasks if the pool did not bind. The LLM roles are the scripted
test double (``tests/scripted_llm.py``, NOT a model); retraining trains a tiny random Llama.

The night: ingest_corpus (triggered) -> corpus Asset -> generate_testset -> test-set Asset ->
evaluate_retrieval, then a manual retrain_models run (citation model) on the same corpus.

A worker dies in the middle of a task. Before ingest starts, the test locks ragtrail's
``documents`` table (``LOCK TABLE ... IN EXCLUSIVE MODE``: readers pass, writers wait), so the
first ``ingest_shard`` indexes its chunks and then waits on its first document row. The test
waits for exactly that (a running ingest_shard and a database backend blocked by its lock),
SIGKILLs the default worker's whole process tree (worker, pool, supervisor, task), ends the dead
client's database session, releases the lock and starts a replacement worker,
``default2@<host>``. Airflow must notice the missing heartbeats (heartbeat timeout 30 s here)
and retry the task on the live worker (retry delay capped at 5 s here, minutes in the DAGs).

Assertions:

- (a) every task of a ``queue="gpu"`` step of ragtrail.pipeline.night (train, gate,
  train_evidence, gate_evidence) ran on queue ``gpu`` on ``gpu@<host>``; every other task on
  queue ``default`` on a default worker (TaskInstance ``queue`` and ``hostname``, REST API v2);
- (b) no pool ever ran more task instances at once than its slots (start/end of every try,
  REST API): no two overlap in the 1-slot pools ``llm_api``, ``embedding`` and ``gpu``; and the
  check could fail: ``llm_api`` and ``embedding`` each had two mapped instances of one task
  that the DAG would run side by side;
- (c) the killed ingest_shard ran twice: try 1 on ``default@<host>`` (ended by the heartbeat
  timeout), try 2 on ``default2@<host>``, success; the run succeeded and the corpus has no
  duplicated or lost rows: the documents are the manifest's files less the quarantined ones,
  each chunk id once, the index holds exactly those documents and as many chunks as the DB, and
  the shards' reported counts add up to the rows;
- (d) the backends: no ``airflow.db`` or ragtrail SQLite file was written, ragtrail's rows are in
  PostgreSQL, the ingest manifest and the HTML report are in the S3 bucket, and every socket a
  stack process listens on is bound to 127.0.0.1.

One time budget for everything (``RAGTRAIL_SYSTEM_TEST_TIMEOUT``, seconds); every process is
stopped and the databases, bucket and Redis keys are dropped at the end.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.dags import _airflow_env as ENV
from tests.scripted_llm import SPEC as SCRIPTED_SPEC
from tests.system import _stack as S

pytestmark = [
    pytest.mark.system,
    pytest.mark.airflow,
    pytest.mark.postgres,
    pytest.mark.s3,
    pytest.mark.skipif(
        importlib.util.find_spec("airflow.providers.celery") is None,
        reason="apache-airflow-providers-celery is not installed (pip install -e '.[airflow]')",
    ),
]

BUDGET_S = float(os.environ.get("RAGTRAIL_SYSTEM_TEST_TIMEOUT", "900"))
SERVERS = {
    "pg_url": "RAGTRAIL_TEST_PG_URL",
    "redis_url": "TEST_REDIS_URL",
    "s3_endpoint_url": "RAGTRAIL_TEST_S3_ENDPOINT",
}
CORPUS = "handbook"
HEARTBEAT_TIMEOUT_S = 30
ONE_SLOT_POOLS = ("llm_api", "embedding", "gpu")
TEST_SETTINGS = {
    # the LLM roles: a scripted test double; the evidence scorer: the session's tiny Llama
    "RAGTRAIL_GENERATION__LLM": SCRIPTED_SPEC,
    # retraining a tiny random Llama (the base model, a Param) in seconds
    "RAGTRAIL_CITATION_TRAINING__TEACHER": SCRIPTED_SPEC,
    "RAGTRAIL_CITATION_TRAINING__MAX_TRAIN_PROMPTS": "3",
    "RAGTRAIL_CITATION_TRAINING__LORA_R": "4",
    "RAGTRAIL_CITATION_TRAINING__LORA_ALPHA": "8",
    "RAGTRAIL_CITATION_TRAINING__SFT_STEPS": "2",
    "RAGTRAIL_CITATION_TRAINING__RL_STEPS": "2",
    "RAGTRAIL_CITATION_TRAINING__NUM_GENERATIONS": "2",
    "RAGTRAIL_CITATION_TRAINING__MAX_COMPLETION_LENGTH": "8",
    "RAGTRAIL_CITATION_TRAINING__TARGET_MAX_NEW_TOKENS": "24",
    "RAGTRAIL_CITATION_TRAINING__REWARD_THRESHOLD": "0.0",
    "RAGTRAIL_CITATION_TRAINING__MAX_LENGTH": "16000",
    # the tiny model writes nothing usable: failed answers may not fail the gate here
    "RAGTRAIL_CITATION_TRAINING__MAX_FAILED_SHARE": "1.0",
    "RAGTRAIL_PROMOTION__N_RESAMPLES": "200",
    # a dead worker's task is failed after 30 s without heartbeats and retried 5 s later
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S),
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
    "AIRFLOW__CORE__MAX_TASK_RETRY_DELAY": "5",
}


@dataclass
class Topology:
    """The running stack, where it keeps its state, and the tiny base model for retraining."""

    local: ModuleType
    stack: Any
    backends: Any
    tiny_model: Path
    deadline: S.Deadline


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    """A running Celery stack on fresh databases and a fresh bucket; everything is stopped and
    dropped afterwards, whatever happens."""
    servers = {key: os.environ.get(var) for key, var in SERVERS.items()}
    if missing := [SERVERS[k] for k, v in servers.items() if not v]:
        pytest.skip(f'{", ".join(missing)} not set: start `eval "$(bash scripts/services.sh up)"`')
    local = S.load_airflow_local()
    deadline = S.Deadline(BUDGET_S)
    root = tmp_path_factory.mktemp("celery")
    tiny = _tiny_base_model(root / "tiny")
    backends = local.CeleryBackends.on_servers(
        f"t{uuid.uuid4().hex[:10]}",
        pg_url=servers["pg_url"],
        redis_url=servers["redis_url"],
        s3_endpoint_url=servers["s3_endpoint_url"],
    )
    config = local.StackConfig(
        airflow_home=root / "airflow",
        ragtrail_home=root / "ragtrail",
        celery=backends,
        extra_env={
            **TEST_SETTINGS,
            "RAGTRAIL_EVIDENCE__SCORER": os.environ["RAGTRAIL_EVIDENCE__SCORER"],
        },
    )
    # The Airflow tests' base settings (tests/dags/_airflow_env.py) on this test's own home.
    base = {k: v for k, v in ENV.airflow_env(root).items() if k != ENV.MARKER}
    env = local.stack_env(config, base=base)
    stack = local.AirflowStack(
        env, cwd=root, components=local.core_components() | local.worker_components()
    )
    try:
        local.provision(backends)
        from ragtrail.storage.db import upgrade

        upgrade(backends.ragtrail_db_url)  # its tables exist before the first task: see the lock
        stack.prepare()
        stack.start()
        stack.wait_healthy(timeout=min(180, deadline.left))
        stack.wait_dags(timeout=min(180, deadline.left))
    except BaseException as exc:
        tails = stack.log_tails()
        stack.stop()
        local.drop(backends)
        pytest.fail(f"the Celery stack did not come up: {exc}\n{tails}", pytrace=False)
    topo = Topology(local, stack, backends, tiny, deadline)
    _milestone(topo, f"stack up on {stack.base_url}, DAGs parsed")
    try:
        yield topo
    finally:
        stack.stop()
        local.drop(backends)


def _tiny_base_model(out: Path) -> Path:
    from ragtrail.paths import sample_corpus_dir
    from tests.tiny_models import build_tiny_llama

    texts = [p.read_text(encoding="utf-8") for p in sorted(sample_corpus_dir().rglob("*.md"))]
    texts.append('{"sentences": [{"text": "A fact.", "citations": [1, 2]}]} [1] [2] [3] 0123456789')
    return build_tiny_llama(out, texts, vocab_size=900, max_positions=16384)


def _milestone(topo: Topology, what: str) -> None:
    print(f"[{topo.deadline.elapsed:6.1f}s] {what}", flush=True)


# ------------------------------------------------------------------ the dying worker


class DocumentsLock:
    """Holds ``LOCK TABLE documents IN EXCLUSIVE MODE`` on ragtrail's database: every write to
    ``documents`` waits, reads go on. A second connection watches who waits and can end a
    session (pg_stat_activity is a snapshot per transaction, so the watcher autocommits)."""

    def __init__(self, sqlalchemy_url: str) -> None:
        import psycopg

        url = S.load_airflow_local().libpq_url(sqlalchemy_url)
        self.holder = psycopg.connect(url)
        self.holder.execute("LOCK TABLE documents IN EXCLUSIVE MODE")
        self.watcher = psycopg.connect(url, autocommit=True)

    def blocked(self) -> list[tuple[int, str]]:
        """(pid, query) of every session waiting for this lock."""
        rows = self.watcher.execute(
            "SELECT pid, query FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            (self.holder.info.backend_pid,),
        )
        return [(int(pid), str(query)) for pid, query in rows.fetchall()]

    def end_session(self, pid: int) -> None:
        """What the server does when a client's machine is gone: its transaction rolls back."""
        self.watcher.execute("SELECT pg_terminate_backend(%s)", (pid,))

    def release(self) -> None:
        self.holder.rollback()
        self.holder.close()
        self.watcher.close()


def _wait_for_blocked_shard(
    topo: Topology, lock: DocumentsLock, run_id: str
) -> tuple[dict[str, Any], list[tuple[int, str]]]:
    """The running ingest_shard whose first document write waits for the lock."""
    stack, since = topo.stack, time.monotonic()
    while topo.deadline.left > 0:
        tis = S.task_instances(stack, "ingest_corpus", run_id)
        if bad := [t for t in tis if t["state"] in S.BAD_TI_STATES]:
            raise S.RunFailed(f"ingest_corpus {run_id} has {bad} before the kill")
        running = [t for t in tis if t["task_id"] == "ingest_shard" and t["state"] == "running"]
        blocked = lock.blocked()
        if running and blocked:
            return running[0], blocked
        if blocked and time.monotonic() - since > 60:
            raise AssertionError(f"a task other than ingest_shard writes documents: {blocked}")
        if not blocked:
            since = time.monotonic()
        time.sleep(0.5)
    raise AssertionError("timed out waiting for an ingest_shard blocked on its first document")


def _ingest_through_a_dead_worker(topo: Topology, facts: dict[str, Any]) -> None:
    """Trigger ingest_corpus, kill the default worker inside ingest_shard, replace the worker,
    and wait for the run to succeed with exactly that task retried."""
    stack, local = topo.stack, topo.local
    lock = DocumentsLock(topo.backends.ragtrail_db_url)
    try:
        run_id = stack.trigger_in_missed_slot("ingest_corpus")  # default Params: sample corpus
        stack.unpause(["ingest_corpus"])
        victim, blocked = _wait_for_blocked_shard(topo, lock, run_id)
        facts["sockets_while_running"] = local.listening_sockets(stack.all_pids())
        killed = stack.kill_component("worker-default")
        _milestone(topo, f"killed worker-default ({len(killed)} processes) in {_name(victim)}")
        for pid, _query in blocked:
            lock.end_session(pid)
    finally:
        lock.release()
    replacement = local.CeleryWorker("default", 2, node="default2")
    stack.components |= local.worker_components([replacement])
    stack.start_component(replacement.name)
    key = (victim["task_id"], victim["map_index"])
    S.wait_for_run(
        stack,
        "ingest_corpus",
        lambda r: r["dag_run_id"] == run_id,
        topo.deadline,
        what="ingest_corpus after its worker died",
        allowed_retries={key},
    )
    _milestone(topo, f"ingest_corpus {run_id} succeeded")
    facts.update(ingest=run_id, victim=key)


def _name(ti: dict[str, Any]) -> str:
    return f"{ti['dag_id']}.{ti['task_id']}[{ti['map_index']}] try {ti['try_number']}"


# ------------------------------------------------------------------------- the night


def _night(topo: Topology, facts: dict[str, Any]) -> None:
    """generate_testset and evaluate_retrieval through the Assets; a manual retraining of the
    citation model on the gpu worker while the default worker evaluates."""
    stack = topo.stack
    generate = S.wait_for_run(
        stack,
        "generate_testset",
        lambda r: r["run_type"] == "asset_triggered",
        topo.deadline,
        what="generate_testset triggered by the corpus asset",
    )
    _milestone(topo, f"generate_testset {generate['dag_run_id']} succeeded")
    # After generation, so that the split reads the same QA sets every time (the golden set and
    # the new test set). The tiny model cannot win the gate, so no complete night is needed.
    plan = S.xcom_values(stack, "ingest_corpus", facts["ingest"])[("plan", -1, "return_value")]
    conf = {
        "corpus": CORPUS,
        "snapshot_id": plan["snapshot_id"],
        "base_model": f"hf:{topo.tiny_model}",
        "models": ["citation"],
    }
    retrain_id = stack.post(
        "/api/v2/dags/retrain_models/dagRuns", {"logical_date": None, "conf": conf}
    )["dag_run_id"]
    stack.unpause(["retrain_models"])
    evaluate = S.wait_for_run(
        stack,
        "evaluate_retrieval",
        lambda r: r["run_type"] == "asset_triggered",
        topo.deadline,
        what="evaluate_retrieval triggered by the test-set asset",
    )
    _milestone(topo, f"evaluate_retrieval {evaluate['dag_run_id']} succeeded")
    S.wait_for_run(
        stack,
        "retrain_models",
        lambda r: r["dag_run_id"] == retrain_id,
        topo.deadline,
        what="a manual retrain_models run",
    )
    _milestone(topo, f"retrain_models {retrain_id} succeeded")
    facts["runs"] = {
        "ingest_corpus": facts["ingest"],
        "generate_testset": generate["dag_run_id"],
        "evaluate_retrieval": evaluate["dag_run_id"],
        "retrain_models": retrain_id,
    }


def _timeline(tries: list[dict[str, Any]]) -> str:
    """One line per try, by start: offset and duration in seconds, worker, pool, task."""
    if not tries:
        return "(no tries)"
    ordered = sorted(tries, key=lambda t: t["start_date"])
    zero = S.when(ordered[0]["start_date"])
    lines = []
    for t in ordered:
        start = S.when(t["start_date"])
        end = S.when(t["end_date"]) if t["end_date"] else start
        lines.append(
            f"{(start - zero).total_seconds():7.1f} {(end - start).total_seconds():6.1f}s "
            f"{t['hostname']:<16} {t['pool']:<12} {_name(t)} {t['state']}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- checks


def _tries(topo: Topology, runs: dict[str, str]) -> list[dict[str, Any]]:
    """Every try of every task instance of ``runs`` that ran on a worker."""
    tries = []
    for dag_id, run_id in runs.items():
        for ti in S.task_instances(topo.stack, dag_id, run_id):
            if ti["try_number"] > 1:
                tries += S.task_tries(topo.stack, dag_id, run_id, ti["task_id"], ti["map_index"])
            else:
                tries.append(ti)
    return [t for t in tries if t["start_date"] and t["state"] != "skipped"]


def _check_routing(tries: list[dict[str, Any]], host: str, problems: list[str]) -> None:
    from ragtrail.pipeline.night import NIGHT

    gpu_steps = {s.name for f in NIGHT for s in f.steps if s.queue == "gpu"}
    ran_gpu = {t["task_id"] for t in tries if t["task_id"] in gpu_steps}
    if ran_gpu != gpu_steps:
        problems.append(f"gpu steps that never ran: {sorted(gpu_steps - ran_gpu)}")
    default_hosts = {f"default@{host}", f"default2@{host}"}
    for t in tries:
        on_gpu = t["task_id"] in gpu_steps
        queue, hosts = ("gpu", {f"gpu@{host}"}) if on_gpu else ("default", default_hosts)
        if t["queue"] != queue or t["hostname"] not in hosts:
            problems.append(
                f"{_name(t)} ran on queue {t['queue']!r} on {t['hostname']!r}; "
                f"expected queue {queue!r} on one of {sorted(hosts)}"
            )


def _check_pools(topo: Topology, tries: list[dict[str, Any]], problems: list[str]) -> None:
    slots = {p["name"]: p["slots"] for p in topo.stack.get("/api/v2/pools")["pools"]}
    for pool in ONE_SLOT_POOLS:
        if slots.get(pool) != 1:
            problems.append(f"pool {pool} has {slots.get(pool)} slots, the test expects 1")
    spans: dict[str, list[Any]] = defaultdict(list)
    siblings: dict[tuple[str, str, str], int] = defaultdict(int)
    for t in tries:
        end = t["end_date"] or t["start_date"]
        spans[t["pool"]].append((S.when(t["start_date"]), S.when(end)))
        if t["map_index"] >= 0 and t["try_number"] == 1:
            siblings[(t["pool"], t["dag_id"], t["task_id"])] += 1
    for pool, intervals in sorted(spans.items()):
        if pool in slots and (most := S.max_overlap(intervals)) > slots[pool]:
            problems.append(f"pool {pool} ({slots[pool]} slots) ran {most} task instances at once")
    for pool in ("llm_api", "embedding"):  # the pools whose check could fail in this night
        if max((n for (p, _, _), n in siblings.items() if p == pool), default=0) < 2:
            problems.append(f"no task of pool {pool} had two mapped instances to hold back")


def _check_retried(topo: Topology, facts: dict[str, Any], host: str, problems: list[str]) -> None:
    task_id, map_index = facts["victim"]
    tries = S.task_tries(topo.stack, "ingest_corpus", facts["ingest"], task_id, map_index)
    seen = [(t["try_number"], t["state"], t["hostname"]) for t in tries]
    if len(tries) != 2:
        problems.append(f"the killed {task_id}[{map_index}] ran {len(tries)} times: {seen}")
        return
    first, second = tries
    if first["hostname"] != f"default@{host}" or first["state"] not in ("failed", "up_for_retry"):
        problems.append(f"try 1 of the killed task was not the dead worker's: {seen}")
    if second["hostname"] != f"default2@{host}" or second["state"] != "success":
        problems.append(f"the retry did not succeed on the replacement worker: {seen}")


def _check_rows(topo: Topology, facts: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    stack = topo.stack
    xcom = S.xcom_values(stack, "ingest_corpus", facts["ingest"])
    plan = xcom[("plan", -1, "return_value")]
    shards = [
        v for (task, _, key), v in xcom.items() if task == "ingest_shard" and key == "return_value"
    ]
    rows = json.loads(
        subprocess.run(
            [sys.executable, "-m", "tests.system._corpus_rows", CORPUS, plan["snapshot_id"]],
            env=stack.env,
            cwd=stack.cwd,
            capture_output=True,
            text=True,
            timeout=min(180, max(30, topo.deadline.left)),
            check=True,
        ).stdout
    )
    manifest = sorted(path for shard in plan["shards"] for path in shard)
    expected = sorted(set(manifest) - set(rows["quarantined"]))
    if rows["documents"] != expected:
        lost = sorted(set(expected) - set(rows["documents"]))
        extra = sorted(set(rows["documents"]) - set(expected))
        problems.append(f"documents differ from the manifest: lost {lost}, extra {extra}")
    chunk_ids = rows["chunk_ids"]
    if len(chunk_ids) != len(set(chunk_ids)):
        problems.append(f"{len(chunk_ids) - len(set(chunk_ids))} duplicated chunk rows")
    if rows["index_documents"] != rows["documents"]:
        problems.append("the index holds other documents than the metadata DB")
    if rows["index_chunks"] != len(chunk_ids):
        problems.append(f"the index holds {rows['index_chunks']} chunks, the DB {len(chunk_ids)}")
    reported = {k: sum(int(s[k]) for s in shards) for k in ("documents", "chunks", "quarantined")}
    found = {
        "documents": len(rows["documents"]),
        "chunks": len(chunk_ids),
        "quarantined": len(rows["quarantined"]),
    }
    if reported != found:
        problems.append(f"the shards reported {reported}, the stores hold {found}")
    if rows["dialect"] != "postgresql":
        problems.append(f"ragtrail's metadata went to {rows['dialect']}, not PostgreSQL")
    return plan


def _check_backends(
    topo: Topology, facts: dict[str, Any], plan: dict[str, Any], problems: list[str]
) -> None:
    stack, backends = topo.stack, topo.backends
    written = [
        p
        for p in (stack.home / "airflow.db", Path(stack.env["RAGTRAIL_HOME"]) / "ragtrail.db")
        if p.exists()
    ]
    if written:
        problems.append(f"SQLite metadata written despite PostgreSQL: {written}")
    client = topo.local.s3_client(backends)
    keys = [
        obj["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=backends.bucket)
        for obj in page.get("Contents", [])
    ]
    manifest_key = plan["manifest_uri"].removeprefix(f"s3://{backends.bucket}/")
    if not plan["manifest_uri"].startswith(f"s3://{backends.bucket}/") or manifest_key not in keys:
        problems.append(f"the manifest {plan['manifest_uri']} is not in the bucket")
    if not [k for k in keys if k.endswith("report.html")]:
        problems.append(f"no report.html in s3://{backends.bucket} ({len(keys)} objects)")
    sockets = facts["sockets_while_running"] + topo.local.listening_sockets(stack.all_pids())
    if not sockets:
        problems.append("found no listening socket at all (the api-server has one)")
    if wide := [s for s in sockets if s[1] != "127.0.0.1"]:
        problems.append(f"stack processes listen beyond 127.0.0.1: {wide}")


def test_celery_topology_routes_pools_and_survives_a_dead_worker(topology: Topology) -> None:
    topo, stack = topology, topology.stack
    host = stack.components["worker-gpu"].env[topo.local.WORKER_HOSTNAME_VARIABLE].split("@")[1]
    facts: dict[str, Any] = {}
    problems: list[str] = []
    try:
        pool = {"pool": "llm_api", "slots": 1, "include_deferred": False}
        stack.patch("/api/v2/pools/llm_api", pool, update_mask="slots")
        stack.unpause(["generate_testset", "evaluate_retrieval"])  # listening before ingest
        _ingest_through_a_dead_worker(topo, facts)
        _night(topo, facts)
        tries = _tries(topo, facts["runs"])
        print(_timeline(tries), flush=True)
        _check_routing(tries, host, problems)
        _check_pools(topo, tries, problems)
        _check_retried(topo, facts, host, problems)
        plan = _check_rows(topo, facts, problems)
        _check_backends(topo, facts, plan, problems)
    except (AssertionError, topo.local.StackError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        problems.append(f"{type(exc).__name__}: {exc}\n{detail}")
    if problems:
        report = "\n\n".join(f"[{i}] {p}" for i, p in enumerate(problems, 1))
        pytest.fail(
            f"{len(problems)} problem(s) after {topo.deadline.elapsed:.0f}s:\n{report}\n\n"
            f"===== Airflow logs\n{stack.log_tails()}",
            pytrace=False,
        )
    _milestone(topo, "topology verified")
