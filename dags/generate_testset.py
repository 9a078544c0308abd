"""
### generate_testset — balanced, critiqued test-set generation after each corpus snapshot

Runs when `ingest_corpus` announces a snapshot that passed its GX checks (the **corpus asset**),
and on manual trigger to regenerate chosen labels or documents.

| task | library call | notes |
|---|---|---|
| `plan` | `plan_generation` | retires items whose document changed, orders contexts (changed documents first), shards them |
| `generate_shard` | `generate_shard` | mapped over context shards; statements, questions, labels, critiques; pool `llm_api` |
| `finalize` | `finalize_generation` | unanswerable pairs, dedup, quotas, top-up rounds, baseline, immutable version, GX; emits the **test-set asset** |

Every model call is cached by content, so a retried or re-run task makes no new calls and yields
the same candidates and the same version.

**Manual runs**: `labels` (e.g. `["reasoning"]`) or `doc_ids` regenerate only those; `per_label`
and `seed` override the configured quota and seed.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from airflow.sdk import Metadata, Param, TriggerRule, dag, task
from assets import CORPUS_ASSET, TESTSET_ASSET
from dag_defaults import START_DATE, default_args

from ragtrail.paths import safe_name
from ragtrail.records import LABELS


def generation_run_id(airflow_run_id: str) -> str:
    """A path- and key-safe generation run id, stable across retries of one DAG run."""
    return "generate-" + safe_name(airflow_run_id)


@dag(
    dag_id="generate_testset",
    schedule=CORPUS_ASSET,
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    tags=["ragtrail", "generation"],
    doc_md=__doc__,
    default_args=default_args(),
    params={
        "corpus": Param("handbook", type="string", pattern=r"^[a-z0-9_-]+$", maxLength=64),
        "snapshot_id": Param(None, type=["null", "string"]),
        "per_label": Param(None, type=["null", "integer"], minimum=1, maximum=100000),
        "seed": Param(None, type=["null", "integer"]),
        "labels": Param([], type="array", items={"type": "string", "enum": list(LABELS)}),
        "doc_ids": Param([], type="array", items={"type": "string", "minLength": 1}),
    },
)
def generate_testset() -> None:
    @task(multiple_outputs=True)
    def plan(
        params: dict[str, Any] | None = None,
        triggering_asset_events: Any = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Corpus and snapshot from the corpus asset event (or Params); plan and shard."""
        from ragtrail.pipeline import tasks

        assert params is not None and run_id is not None  # injected by Airflow
        events = (
            list(triggering_asset_events.get(CORPUS_ASSET, [])) if triggering_asset_events else []
        )
        extra = dict(max(events, key=lambda e: e.timestamp).extra or {}) if events else {}
        return tasks.plan_generation(
            corpus=extra.get("corpus") or params["corpus"],
            run_id=generation_run_id(run_id),
            snapshot_id=extra.get("snapshot_id") or params.get("snapshot_id"),
            per_label=params.get("per_label"),
            seed=params.get("seed"),
            labels=list(params.get("labels") or []),
            doc_ids=list(params.get("doc_ids") or []),
        )

    @task
    def list_shards(shards: list[list[str]]) -> list[list[str]]:
        """Re-publish the shard list as a return value: Airflow maps only over those."""
        return shards

    @task(pool="llm_api")
    def generate_shard(corpus: str, generation_run: str, chunk_ids: list[str]) -> dict[str, Any]:
        """Candidates for one shard of contexts (LLM-heavy; cached by content)."""
        from ragtrail.pipeline import tasks

        return tasks.generate_shard(corpus=corpus, run_id=generation_run, chunk_ids=chunk_ids)

    # none_failed: a run whose quotas were already met has zero shards and still finalises.
    @task(outlets=[TESTSET_ASSET], trigger_rule=TriggerRule.NONE_FAILED, pool="llm_api")
    def finalize(corpus: str, generation_run: str) -> Generator[Metadata, None, dict[str, Any]]:
        """Version the set, validate it, and announce it to evaluation."""
        from ragtrail.pipeline import tasks

        summary = tasks.finalize_generation(corpus=corpus, run_id=generation_run)
        if summary["version"]:
            yield Metadata(
                TESTSET_ASSET,
                {
                    "corpus": corpus,
                    "version": summary["version"],
                    "snapshot_id": summary["snapshot_id"],
                    "accepted": summary["accepted"],
                },
            )
        return summary

    planned = plan()
    shards = generate_shard.partial(
        corpus=planned["corpus"], generation_run=planned["run_id"]
    ).expand(chunk_ids=list_shards(planned["shards"]))
    shards >> finalize(corpus=planned["corpus"], generation_run=planned["run_id"])


generate_testset()
