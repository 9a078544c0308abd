"""
### evaluate_retrieval — Recall@k per question label across the text-weight scan

Runs whenever `generate_testset` publishes a new test-set version (the **test-set asset**), on
the version's test set, and on manual trigger.

| task | library call | notes |
|---|---|---|
| `resolve_target` | — | corpus, snapshot and test-set version from the triggering asset event; Params on manual runs |
| `evaluate` | `evaluate_retrieval` | hybrid retrieval per `text_weight`, bootstrap CIs; pool `embedding` |
| `publish` | `publish_retrieval_report` | GX checks on the results, HTML report, upload; emits the **retrieval metrics asset** |

**Manual runs**: `corpus` and `snapshot_id` choose what to evaluate (no `snapshot_id` = the
corpus's latest completed snapshot); `qa_set` overrides the project's default QA set and
`text_weights` the BM25 weights to scan (each in [0, 1]; 0 = dense only, 1 = BM25 only).
On asset-triggered runs the corpus and snapshot always come from the asset event.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from airflow.sdk import Metadata, Param, dag, task
from assets import RETRIEVAL_METRICS_ASSET, TESTSET_ASSET
from dag_defaults import START_DATE, default_args

from ragtrail.paths import safe_name

DEFAULT_TEXT_WEIGHTS = [0.0, 0.05, 0.1, 0.2, 0.5, 1.0]


def evaluation_run_id(airflow_run_id: str) -> str:
    """A path- and key-safe evaluation run id, stable across retries of one DAG run."""
    return "retrieval-" + safe_name(airflow_run_id)


@dag(
    dag_id="evaluate_retrieval",
    schedule=TESTSET_ASSET,
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    tags=["ragtrail", "evaluation"],
    doc_md=__doc__,
    default_args=default_args(),
    params={
        "corpus": Param(
            "handbook",
            type="string",
            pattern=r"^[a-z0-9_-]+$",
            maxLength=64,
            title="Corpus",
            description="Corpus to evaluate on manual runs (asset events override it).",
        ),
        "snapshot_id": Param(
            None,
            type=["null", "string"],
            title="Snapshot id",
            description="Corpus snapshot to evaluate on manual runs; empty = the latest one.",
        ),
        "qa_set": Param(
            None,
            type=["null", "string"],
            title="QA set",
            description="A QA set file or testset:<version>; empty = the project's sample set.",
        ),
        "text_weights": Param(
            DEFAULT_TEXT_WEIGHTS,
            type="array",
            items={"type": "number", "minimum": 0, "maximum": 1},
            minItems=1,
            title="Text weights",
            description="BM25 weights to scan, each in [0, 1].",
        ),
    },
)
def evaluate_retrieval() -> None:
    @task(multiple_outputs=True)
    def resolve_target(
        params: dict[str, Any] | None = None,
        triggering_asset_events: Any = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Pick corpus and snapshot: the newest corpus asset event wins over the Params."""
        assert params is not None and run_id is not None  # injected by Airflow
        events = (
            list(triggering_asset_events.get(TESTSET_ASSET, [])) if triggering_asset_events else []
        )
        qa_set = params.get("qa_set") or None
        if events:
            extra = dict(max(events, key=lambda event: event.timestamp).extra or {})
            corpus = extra.get("corpus") or params["corpus"]
            snapshot_id = extra.get("snapshot_id") or None
            if extra.get("version"):
                qa_set = f"testset:{extra['version']}"
            origin = "asset_event"
        else:
            corpus = params["corpus"]
            snapshot_id = params.get("snapshot_id") or None
            origin = "params"
        return {
            "corpus": corpus,
            "snapshot_id": snapshot_id,
            "qa_set": qa_set,
            "run_id": evaluation_run_id(run_id),
            "origin": origin,
        }

    @task(pool="embedding")
    def evaluate(
        corpus: str,
        snapshot_id: str | None,
        qa_set: str | None,
        run_id: str,
        params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Scan the text weights on the QA set and store the metrics (embeds the queries)."""
        from ragtrail.pipeline import tasks

        assert params is not None  # injected by Airflow
        weights = params.get("text_weights") or None
        return tasks.evaluate_retrieval(
            corpus=corpus,
            qa_set=qa_set,
            text_weights=[float(w) for w in weights] if weights else None,
            run_id=run_id,
            snapshot_id=snapshot_id,
        )

    @task(outlets=[RETRIEVAL_METRICS_ASSET])
    def publish(
        corpus: str, evaluation: dict[str, Any]
    ) -> Generator[Metadata, None, dict[str, Any]]:
        """Validate the metrics, render and upload the report, announce the metrics asset."""
        from ragtrail.pipeline import tasks

        report = tasks.publish_retrieval_report(run_id=evaluation["run_id"])
        yield Metadata(
            RETRIEVAL_METRICS_ASSET,
            {
                "run_id": evaluation["run_id"],
                "corpus": corpus,
                "snapshot_id": evaluation.get("snapshot_id"),
                "qa_set_version": evaluation.get("qa_set_version"),
                "metrics_uri": evaluation.get("metrics_uri"),
                "report_uri": report.get("report_uri"),
            },
        )
        return {**report, "run_id": evaluation["run_id"]}

    target = resolve_target()
    evaluation = evaluate(
        corpus=target["corpus"],
        snapshot_id=target["snapshot_id"],
        qa_set=target["qa_set"],
        run_id=target["run_id"],
    )
    publish(corpus=target["corpus"], evaluation=evaluation)


evaluate_retrieval()
