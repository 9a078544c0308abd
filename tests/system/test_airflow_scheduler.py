"""System test: the four DAGs chained by Assets under a real Airflow 3 scheduler.

What runs: ``scripts/airflow_local.py``'s stack on a throw-away AIRFLOW_HOME (SQLite,
LocalExecutor, parallelism 4, this repository's dags/ and plugins/), api-server on a free
127.0.0.1 port, scheduler, dag-processor and triggerer as separate process groups; one
RAGTRAIL_HOME for every process, embedded index, one torch thread per task, and the generation
LLM set to a scripted test double (``RAGTRAIL_GENERATION__LLM=scripted:...``, NOT a model).

The test unpauses generate_testset, evaluate_golden_sets and evaluate_retrieval, triggers
ingest_corpus on its default Params (the shipped sample corpus, corpus "handbook") in the slot
of its missed interval, then unpauses it, and follows the chain through the REST API:

ingest_corpus -> corpus Asset -> generate_testset -> test-set Asset -> evaluate_retrieval
                              -> evaluate_golden_sets (its golden runs handed over to
                                 evaluate_retrieval, which waits for them and skips them)

It checks the run types and the consumed asset events of each link, the asset-event extras
(the documented contract of plugins/assets.py), that every XCom is strict JSON, that the
evaluation report exists under RAGTRAIL_HOME/reports/, and that the api-server serves the
plugin's "ragtrail reports" view of it: an invalid token refused, and with a valid one the
corpus index, the corpus page listing the night, and (by following that page's links) the
night's report and its Data Docs as HTML. Contract violations are collected and reported
together; a failed task stops the test at once with its log. The whole test has one time
budget (``RAGTRAIL_SYSTEM_TEST_TIMEOUT``, seconds); every process is stopped at the end.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

from tests.dags import _airflow_env as ENV
from tests.scripted_llm import SPEC as SCRIPTED_SPEC
from tests.system import _stack as S

pytestmark = [
    pytest.mark.system,
    pytest.mark.airflow,
    pytest.mark.skipif(
        importlib.util.find_spec("airflow") is None,
        reason="apache-airflow is not installed (pip install -e '.[airflow]')",
    ),
]

# ~2.5-3 min on a quiet 2-core machine; the hard limit leaves room for a busy CI runner.
BUDGET_S = float(os.environ.get("RAGTRAIL_SYSTEM_TEST_TIMEOUT", "600"))
SCRIPTED_LLM = SCRIPTED_SPEC
CORPUS = "handbook"
# plugins/assets.py documents these extras of the test-set asset; evaluate_retrieval reads
# corpus, snapshot_id and the QA set from them.
TESTSET_EXTRAS = ("corpus", "snapshot_id", "qa_set", "qa_set_version")
CORPUS_EXTRAS = ("corpus", "snapshot_id", "manifest_uri", "chunks", "embedded")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running stack; stopped (process groups, SIGTERM then SIGKILL) whatever happens."""
    local = S.load_airflow_local()
    root = tmp_path_factory.mktemp("system")
    config = local.StackConfig(
        airflow_home=root / "airflow",
        ragtrail_home=root / "ragtrail",
        extra_env={
            "RAGTRAIL_GENERATION__LLM": SCRIPTED_LLM,
            # the session's tiny scorer (tests/conftest.py), not the bundled SmolLM2
            "RAGTRAIL_EVIDENCE__SCORER": os.environ["RAGTRAIL_EVIDENCE__SCORER"],
        },
    )
    # The Airflow tests' base settings (tests/dags/_airflow_env.py) on this test's own home.
    base = {k: v for k, v in ENV.airflow_env(root).items() if k != ENV.MARKER}
    env = local.stack_env(config, base=base)
    stack = local.AirflowStack(env, cwd=root)
    stack.deadline = S.Deadline(BUDGET_S)
    try:
        stack.prepare()
        stack.start()
        stack.wait_healthy(timeout=min(180, stack.deadline.left))
        stack.wait_dags(timeout=min(180, stack.deadline.left))
    except BaseException as exc:
        tails = stack.log_tails()
        stack.stop()
        pytest.fail(f"the Airflow stack did not come up: {exc}\n{tails}", pytrace=False)
    _milestone(stack, f"stack up on {stack.base_url}, DAGs parsed")
    yield stack
    stack.stop()


def _one(events: list[dict[str, Any]], name: str, where: str) -> dict[str, Any]:
    named = [e for e in events if e["name"] == name]
    assert len(named) == 1, f"expected one {name} event from {where}, got {events}"
    return named[0]


def _milestone(stack: Any, what: str) -> None:
    print(f"[{stack.deadline.elapsed:6.1f}s] {what}", flush=True)


def _check_chain(stack: Any, problems: list[str], seen: dict[str, Any]) -> None:
    deadline: S.Deadline = stack.deadline
    ragtrail_home = Path(stack.env["RAGTRAIL_HOME"])

    # Consumers first, so they are listening when the producer's event arrives.
    stack.unpause(["generate_testset", "evaluate_golden_sets", "evaluate_retrieval"])
    ingest_run_id = stack.trigger_in_missed_slot("ingest_corpus")  # default Params
    stack.unpause(["ingest_corpus"])

    # ---- ingest_corpus -> corpus asset
    ingest = S.wait_for_run(
        stack,
        "ingest_corpus",
        lambda r: r["dag_run_id"] == ingest_run_id,
        deadline,
        what="the triggered ingest_corpus run",
    )
    ingest_xcom = S.xcom_values(stack, "ingest_corpus", ingest_run_id)
    # ---- corpus asset -> generate_testset -> test-set asset
    generate = S.wait_for_run(
        stack,
        "generate_testset",
        lambda r: r["run_type"] == "asset_triggered",
        deadline,
        what="generate_testset triggered by the corpus asset",
    )
    gen_run_id = generate["dag_run_id"]
    _milestone(stack, f"generate_testset {gen_run_id} succeeded")
    # Events are read once the runs they created have started: Airflow 3.3.2's events endpoint
    # answers 500 while a created run is still queued (its start_date is null).
    corpus_event = _one(
        S.asset_events_from(stack, "ingest_corpus", ingest_run_id), "ragtrail_corpus", "ingest"
    )
    extra = corpus_event["extra"] or {}
    if missing := [k for k in CORPUS_EXTRAS if k not in extra]:
        problems.append(f"corpus asset event lacks {missing}: {extra}")
    assert extra.get("corpus") == CORPUS, extra
    snapshot_id = seen["snapshot_id"] = ingest_xcom[("plan", -1, "return_value")]["snapshot_id"]
    _milestone(stack, f"ingest_corpus {ingest_run_id} succeeded")
    assert extra.get("snapshot_id") == snapshot_id, (extra, snapshot_id)
    shard_results = [
        v
        for (task, _, key), v in ingest_xcom.items()
        if task == "ingest_shard" and key == "return_value"
    ]
    assert shard_results, f"no ingest_shard results in {sorted(ingest_xcom)}"
    embedded = sum(int(r["embedded"]) for r in shard_results)
    if embedded <= 0:
        problems.append(f"the shards of a fresh home embedded nothing: {shard_results}")
    if extra.get("embedded") != embedded:
        problems.append(
            f"corpus asset event reports embedded={extra.get('embedded')!r}, "
            f"but the ingest_shard tasks embedded {embedded} chunks"
        )

    consumed = S.consumed_asset_events(stack, "generate_testset", gen_run_id)
    assert corpus_event["id"] in {e["id"] for e in consumed}, (
        f"generate_testset {gen_run_id} did not consume the corpus event: {consumed}"
    )
    S.xcom_values(stack, "generate_testset", gen_run_id)  # strict JSON
    # ---- test-set asset -> evaluate_retrieval (NOT a manual or scheduled run)
    try:
        evaluation = S.wait_for_run(
            stack,
            "evaluate_retrieval",
            lambda r: r["run_type"] == "asset_triggered",
            deadline,
            what="evaluate_retrieval triggered by the test-set asset",
        )
    except S.RunFailed as exc:
        problems.append(f"evaluate_retrieval failed:\n{exc}")
        return
    eval_run_id = evaluation["dag_run_id"]
    _milestone(stack, f"evaluate_retrieval {eval_run_id} succeeded")
    testset_event = _one(
        S.asset_events_from(stack, "generate_testset", gen_run_id), "ragtrail_testset", "generate"
    )
    ts_extra = testset_event["extra"] or {}
    if missing := [k for k in TESTSET_EXTRAS if k not in ts_extra]:
        problems.append(
            f"test-set asset event lacks {missing} (documented in plugins/assets.py): {ts_extra}"
        )
    if ts_extra.get("corpus") != CORPUS or ts_extra.get("snapshot_id") != snapshot_id:
        problems.append(f"test-set event names another corpus/snapshot: {ts_extra}")
    version = ts_extra.get("qa_set_version")
    if version and version not in str(ts_extra.get("qa_set")):
        problems.append(f"test-set event's qa_set does not name version {version}: {ts_extra}")

    consumed = S.consumed_asset_events(stack, "evaluate_retrieval", eval_run_id)
    assert testset_event["id"] in {e["id"] for e in consumed}, (
        f"evaluate_retrieval {eval_run_id} did not consume the test-set event: {consumed}"
    )
    eval_xcom = S.xcom_values(stack, "evaluate_retrieval", eval_run_id)  # strict JSON
    _check_golden_reuse(stack, eval_xcom, deadline, problems)
    evaluated = _evaluated_sets(eval_xcom).get("generated", {})
    if version and evaluated.get("qa_set_version") != version:
        problems.append(
            f"evaluation ran on QA set {evaluated.get('qa_set_version')!r}, "
            f"not the announced test-set version {version!r}"
        )
    report = eval_xcom[("publish", -1, "return_value")]
    report_path = Path(report["report_path"])
    if not (report_path.is_file() and S.inside(report_path, ragtrail_home / "reports")):
        problems.append(f"no report HTML under {ragtrail_home / 'reports'}: {report}")
    assert report_path.suffix == ".html", report
    seen["night"] = report_path.parent.name  # reports/<night>/report.html

    # ---- exactly one ingest run: the trigger took the missed slot, no scheduled duplicate
    runs = [(r["dag_run_id"], r["run_type"]) for r in S.dag_runs(stack, "ingest_corpus")]
    assert runs == [(ingest_run_id, "manual")], runs
    assert ingest["state"] == "success"


def _check_golden_reuse(
    stack: Any, eval_xcom: dict[tuple[str, int, str], Any], deadline: Any, problems: list[str]
) -> None:
    """evaluate_golden_sets ran on the corpus event beside the generation and handed its golden
    run over; evaluate_retrieval planned that run (waiting for it when the generation ended
    first) and its per-set steps skipped it instead of evaluating the golden set again."""
    try:
        golden = S.wait_for_run(
            stack,
            "evaluate_golden_sets",
            lambda r: r["run_type"] == "asset_triggered",
            deadline,
            what="evaluate_golden_sets triggered by the corpus asset",
        )
    except S.RunFailed as exc:
        problems.append(f"evaluate_golden_sets failed:\n{exc}")
        return
    golden_xcom = S.xcom_values(stack, "evaluate_golden_sets", golden["dag_run_id"])
    handed = golden_xcom[("hand_over", -1, "return_value")]["sets"]
    planned = eval_xcom[("plan", -1, "return_value")]["sets"]
    reused = [s["run_id"] for s in planned if s["kind"] == "golden" and s["reused"]]
    if not handed or reused != handed:
        problems.append(f"golden runs handed over {handed}, evaluate_retrieval planned {planned}")
    skipped = {
        value["name"]
        for (task, _, key), value in eval_xcom.items()
        if task in ("evaluate", "sufficiency", "evidence")
        and key == "return_value"
        and str(value.get("skipped", "")).startswith("evaluated as golden-")
    }
    golden_names = {s["name"] for s in planned if s["kind"] == "golden"}
    if skipped != golden_names:
        problems.append(f"per-set steps skipped {skipped}, not the golden sets {golden_names}")
    cited = {
        value["name"]
        for (task, _, key), value in eval_xcom.items()
        if task == "cite" and key == "return_value" and "skipped" not in value
    }
    if not golden_names <= cited:  # the golden sets' citations are this DAG's
        problems.append(f"cite cited {cited}, not every golden set {golden_names}")


def _check_zero_recall(stack: Any, snapshot_id: str, problems: list[str]) -> None:
    """A manual evaluation whose ground truth matches nothing: every recall is 0.

    Undefined ratios (the gap to a best recall of 0) must still leave the task as strict JSON.
    """
    qa_set = Path(stack.env["RAGTRAIL_HOME"]) / "zero_recall_qa.jsonl"
    rows = [
        {
            "qid": f"z{label}{i}",
            "question": question,
            "label": label,
            "ground_doc_ids": ["no-such-folder/no-such-document.md"],
        }
        for label in ("fact_single", "summary", "reasoning")
        for i, question in enumerate(["How many days of annual leave?", "Who approves leave?"])
    ]
    qa_set.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    conf = {
        "corpus": CORPUS,
        "snapshot_id": snapshot_id,
        "qa_set": str(qa_set),
        "text_weights": [0.0, 1.0],
    }
    run_id = stack.post(
        "/api/v2/dags/evaluate_retrieval/dagRuns", {"logical_date": None, "conf": conf}
    )["dag_run_id"]
    try:
        S.wait_for_run(
            stack,
            "evaluate_retrieval",
            lambda r: r["dag_run_id"] == run_id,
            stack.deadline,
            what="a manual evaluate_retrieval run where every recall is 0",
        )
    except S.RunFailed as exc:
        problems.append(f"evaluate_retrieval with recall 0 everywhere failed:\n{exc}")
        return
    _milestone(stack, f"zero-recall evaluate_retrieval {run_id} succeeded")
    # the night evaluates the corpus's golden sets too; the file's set is named after its stem
    evaluated_sets = _evaluated_sets(S.xcom_values(stack, "evaluate_retrieval", run_id))
    evaluated = evaluated_sets.get(qa_set.stem)
    assert evaluated is not None, f"no set {qa_set.stem!r} among {sorted(evaluated_sets)}"
    recalls = [row.get("best_recall") for row in evaluated.get("best", [])]
    assert recalls and all(r == 0 for r in recalls), f"not a zero-recall run: {evaluated}"


VIEW = "/ragtrail/"
"""Where plugins/ragtrail_plugin.py mounts the reports view on the api-server."""


def _view(stack: Any, url: str, *, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """GET a page of the reports view with the stack's token (or ``headers``): (status,
    content type, body)."""
    headers = headers or {"Authorization": f"Bearer {stack.token()}"}
    request = urllib.request.Request(urljoin(stack.base_url, url), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read().decode("utf-8", errors="replace")
            return response.status, response.headers.get("Content-Type", ""), body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode(errors="replace")


def _check_reports_view(stack: Any, night: str, problems: list[str]) -> None:
    """The api-server serves the night evaluate_retrieval published, through the plugin's view:
    the corpus index lists the corpus, its page the night, and that page's links give the
    night's report and Data Docs as HTML; nothing without a token."""
    # This stack runs SimpleAuthManager with all_admins (every request is an admin, the REST
    # API's too): an invalid token is still refused, by the view as by the API.
    bad = {"Authorization": "Bearer not-a-jwt"}
    code, _, body = _view(stack, VIEW, headers=bad)
    api_code, _, _ = _view(stack, "/api/v2/dags", headers=bad)
    assert code == api_code == 403, f"an invalid token got {code} (API: {api_code}): {body[:300]}"
    index_url = urljoin(stack.base_url, VIEW)
    code, kind, index = _view(stack, index_url)
    assert code == 200 and kind.startswith("text/html"), (code, kind, index[:500])
    corpus_links = [link for link in re.findall(r'href="([^"]+)"', index) if "corpora/" in link]
    assert corpus_links == [f"corpora/{CORPUS}"], f"corpus index links: {corpus_links}"
    corpus_url = urljoin(index_url, corpus_links[0])
    code, _, page = _view(stack, corpus_url)
    assert code == 200 and f'id="night-{night}"' in page, (code, night, page[:2000])
    links = {urljoin(corpus_url, link) for link in re.findall(r'href="([^"]+)"', page)}
    for name, path in (("report", "report.html"), ("Data Docs", "data_docs/index.html")):
        url = next((u for u in links if u.endswith(f"/runs/{night}/{path}")), None)
        if url is None:
            problems.append(f"the corpus page does not link the night's {name}: {sorted(links)}")
            continue
        code, kind, body = _view(stack, url)
        if code != 200 or not kind.startswith("text/html") or "<html" not in body.lower():
            problems.append(f"the night's {name} at {url}: HTTP {code} {kind} {body[:300]}")
        elif name == "report" and "ragtrail retrieval evaluation" not in body:
            problems.append(f"{url} is not the evaluation report: {body[:300]}")
    _milestone(stack, f"reports view serves night {night}")


def _evaluated_sets(xcom: dict[tuple[str, int, str], Any]) -> dict[str, Any]:
    """The mapped ``evaluate`` results (one task per QA set), by set name."""
    return {
        value["name"]: value
        for (task, _index, key), value in xcom.items()
        if task == "evaluate" and key == "return_value"
    }


def _collect(problems: list[str], check: Callable[[], None]) -> None:
    """Run one check; a failure becomes a problem (reported with the Airflow logs)."""
    try:
        check()
    except AssertionError as exc:
        problems.append(f"AssertionError: {exc}")
    except Exception:  # a bug in the test or an API surprise
        problems.append(traceback.format_exc(limit=-4))


def test_assets_chain_ingest_generate_evaluate(stack: Any) -> None:
    problems: list[str] = []
    seen: dict[str, Any] = {}
    _collect(problems, lambda: _check_chain(stack, problems, seen))
    if "night" in seen:
        _collect(problems, lambda: _check_reports_view(stack, seen["night"], problems))
    if "snapshot_id" in seen and stack.deadline.left > 0:
        _collect(problems, lambda: _check_zero_recall(stack, seen["snapshot_id"], problems))
    if problems:
        report = "\n\n".join(f"[{i}] {p}" for i, p in enumerate(problems, 1))
        pytest.fail(
            f"{len(problems)} problem(s) after {stack.deadline.elapsed:.0f}s:\n{report}\n\n"
            f"===== Airflow logs\n{stack.log_tails()}",
            pytrace=False,
        )
    print(f"asset chain verified in {stack.deadline.elapsed:.0f}s")
