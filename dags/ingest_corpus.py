"""
### ingest_corpus — nightly incremental corpus ingestion

Lists the source folder (or ``s3://`` prefix), diffs it against the documents already known for
the corpus, and parses, chunks and embeds only what was added or changed.

| task | library call | notes |
|---|---|---|
| `plan` | `plan_ingest` | hashes every file, writes the snapshot manifest, splits changes into shards |
| `ingest_shard` | `ingest_shard` | mapped over the shards; pool `embedding`, one shard at a time (the index has one writer) |
| `finalize` | `finalize_ingest` | removes deleted documents, reconciles the index, closes the snapshot |
| `quality` | `check_corpus_quality` | Great Expectations checks; only a passing snapshot emits the **corpus asset** |

The corpus asset event carries `corpus`, `snapshot_id`, `manifest_uri` and the ingest counts;
`evaluate_retrieval` (and test-set generation) are scheduled on it.

**Manual runs**: set `source`, `corpus` and `shard_size` in the trigger form. Every task is
idempotent, so clearing and rerunning a run does not duplicate documents or chunks.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from airflow.sdk import Metadata, Param, TriggerRule, dag, task
from assets import CORPUS_ASSET
from dag_defaults import START_DATE, default_args

from ragtrail.paths import sample_corpus_dir

COUNT_KEYS = (
    "added",
    "updated",
    "unchanged",
    "removed",
    "quarantined",
    "documents",
    "chunks",
    "embedded",
)


@dag(
    dag_id="ingest_corpus",
    schedule="0 1 * * *",
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    tags=["ragtrail", "ingest"],
    doc_md=__doc__,
    default_args=default_args(),
    params={
        "source": Param(
            str(sample_corpus_dir()),
            type="string",
            minLength=1,
            title="Source",
            description="Folder path or s3://bucket/prefix holding the documents.",
        ),
        "corpus": Param(
            "handbook",
            type="string",
            pattern=r"^[a-z0-9_-]+$",
            maxLength=64,
            title="Corpus",
            description="Corpus name: lower-case letters, digits, '_' and '-'.",
        ),
        "shard_size": Param(
            25,
            type="integer",
            minimum=1,
            maximum=1000,
            title="Shard size",
            description="Changed files per mapped ingest_shard task.",
        ),
    },
)
def ingest_corpus() -> None:
    @task(multiple_outputs=True)
    def plan(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Diff the source against the corpus and split the changes into shards."""
        from ragtrail.pipeline import tasks

        assert params is not None  # injected by Airflow
        return tasks.plan_ingest(
            source=params["source"],
            corpus=params["corpus"],
            shard_size=int(params["shard_size"]),
        )

    @task
    def list_shards(shards: list[list[str]]) -> list[list[str]]:
        """Re-publish the shard list as a return value: Airflow maps only over those."""
        return shards

    @task(pool="embedding", max_active_tis_per_dagrun=1)
    def ingest_shard(corpus: str, snapshot_id: str, rel_paths: list[str]) -> dict[str, Any]:
        """Parse, chunk, embed and index one shard of changed files."""
        from ragtrail.pipeline import tasks

        return tasks.ingest_shard(corpus=corpus, snapshot_id=snapshot_id, rel_paths=rel_paths)

    # none_failed: a night with only deletions (zero shards) still finalises the snapshot.
    @task(trigger_rule=TriggerRule.NONE_FAILED)
    def finalize(corpus: str, snapshot_id: str) -> dict[str, Any]:
        """Apply removals, reconcile the index and close the snapshot."""
        from ragtrail.pipeline import tasks

        return tasks.finalize_ingest(corpus=corpus, snapshot_id=snapshot_id)

    @task(outlets=[CORPUS_ASSET])
    def quality(summary: dict[str, Any]) -> Generator[Metadata, None, dict[str, Any]]:
        """GX checks of documents, chunks and quarantine; only a passing corpus is announced.

        A failed fail-severity expectation raises, so the corpus asset is not updated and nothing
        downstream (evaluation, test-set generation) runs on a broken snapshot.
        """
        from ragtrail.pipeline import tasks

        result = tasks.check_corpus_quality(
            corpus=summary["corpus"], snapshot_id=summary["snapshot"]
        )
        extra: dict[str, Any] = {
            "corpus": summary["corpus"],
            "snapshot_id": summary["snapshot"],
            "manifest_uri": summary["manifest_uri"],
            "data_docs_uri": result["data_docs_uri"],
        }
        extra.update({key: summary[key] for key in COUNT_KEYS if key in summary})
        yield Metadata(CORPUS_ASSET, extra)
        return result

    planned = plan()
    shards = ingest_shard.partial(
        corpus=planned["corpus"], snapshot_id=planned["snapshot_id"]
    ).expand(rel_paths=list_shards(planned["shards"]))
    finalized = finalize(corpus=planned["corpus"], snapshot_id=planned["snapshot_id"])
    shards >> finalized
    quality(finalized)


ingest_corpus()
