"""The single source of ragtrail's Airflow Asset objects.

Every DAG imports its assets from here, so producer and consumer always agree on the same
name and URI. Names and URIs are part of the scheduling contract stored in the Airflow metadata
DB: renaming one orphans the queued events of the old one, so keep them stable.

The ``ragtrail://`` scheme is a custom one: Airflow 3 accepts any scheme except the reserved
``airflow`` and only normalises schemes that a provider registers, so these URIs are stored
verbatim. They name logical datasets; the concrete artifacts (manifests, metrics, reports)
travel as asset-event extras (see the ``Metadata`` yielded by the producing tasks).

The extras each asset's events carry are defined once, in the core: one event type per Asset in
``ragtrail.pipeline.events`` (strict JSON; a null value comes with its reason under
``undefined``). In short:

- ``CORPUS_ASSET``: ``corpus``, ``snapshot_id``, ``changed`` (false: the source was unchanged and
  no new snapshot was made), ``manifest_uri``, ``data_docs_uri`` and the ingest counts (``added``,
  ``updated``, ``unchanged``, ``removed``, ``quarantined``, ``documents``, ``chunks``, ``embedded``).
- ``TESTSET_ASSET``: ``corpus``, ``snapshot_id``, ``qa_set`` (``testset:<version>``, what
  evaluation reads), ``qa_set_version``, ``accepted``, ``regenerated``.
- ``RETRIEVAL_METRICS_ASSET``: ``run_id``, ``corpus``, ``snapshot_id``, ``qa_set`` and
  ``qa_set_version`` (the generated set, else the first evaluated), ``sets`` (every evaluated set's
  run id, ``qa_set`` and version by name), ``metrics_uri``, ``report_uri``, ``report_path``,
  ``data_docs_path``, ``report_url``, ``data_docs_url``.
- ``CITATION_METRICS_ASSET``: ``run_id``, ``corpus``, ``snapshot_id``, ``sets`` (per evaluated set
  its run id and headline citation F1, model and random, per mixture type) and ``metrics_uri``.
- ``SUFFICIENCY_METRICS_ASSET``: ``run_id``, ``corpus``, ``snapshot_id``, ``sets`` (per rated set
  its run id, C/A/H rates per answer setting and the selective policy's AUC gain) and ``metrics_uri``.
- ``EVIDENCE_METRICS_ASSET``: ``run_id``, ``corpus``, ``snapshot_id``, ``sets`` (per evaluated set
  its run id, the extractor, the share answered correctly per method and the extractor's
  compression and faithfulness) and ``metrics_uri``.
- ``DRIFT_ASSET``: a drift decision that fired (emitted only then: the evaluation's
  ``announce_drift`` task ends skipped otherwise), asking for retraining: ``decision_id``,
  ``run_id`` (the first drifted set's run), ``night_run_id``, ``corpus``, ``snapshot_id``,
  ``qa_set_version``, ``baseline_run``, ``baseline_kind`` (pinned | champion | first),
  ``fired``, ``metrics`` (its drifted rows: metric, facets, baseline, current, difference, CI,
  Holm p, threshold), ``decisions`` (every fired set's decision by set name) and ``models``
  (the models whose metrics drifted: ``citation``, ``extractor``; retraining trains those).
"""

from __future__ import annotations

from airflow.sdk import Asset

ASSET_GROUP = "ragtrail"

CORPUS_ASSET = Asset(
    name="ragtrail_corpus",
    uri="ragtrail://corpus/default",
    group=ASSET_GROUP,
    extra={"description": "documents and chunks of an ingested corpus snapshot"},
)
TESTSET_ASSET = Asset(
    name="ragtrail_testset",
    uri="ragtrail://testset/default",
    group=ASSET_GROUP,
    extra={"description": "generated, labelled and critiqued QA test set"},
)
RETRIEVAL_METRICS_ASSET = Asset(
    name="ragtrail_retrieval_metrics",
    uri="ragtrail://metrics/retrieval",
    group=ASSET_GROUP,
    extra={"description": "Recall@k per question label x text_weight, with the HTML report"},
)
CITATION_METRICS_ASSET = Asset(
    name="ragtrail_citation_metrics",
    uri="ragtrail://metrics/citations",
    group=ASSET_GROUP,
    extra={"description": "citation precision/recall/F1 on relevance mixtures, model vs random"},
)
SUFFICIENCY_METRICS_ASSET = Asset(
    name="ragtrail_sufficiency_metrics",
    uri="ragtrail://metrics/sufficiency",
    group=ASSET_GROUP,
    extra={"description": "sufficient context, Correct/Abstain/Hallucinate, selective generation"},
)
EVIDENCE_METRICS_ASSET = Asset(
    name="ragtrail_evidence_metrics",
    uri="ragtrail://metrics/evidence",
    group=ASSET_GROUP,
    extra={"description": "evidence extractor: compression, faithfulness, end-to-end correctness"},
)
DRIFT_ASSET = Asset(
    name="ragtrail_drift",
    uri="ragtrail://drift/default",
    group=ASSET_GROUP,
    extra={"description": "a metric drift decision that asks for retraining"},
)

ASSETS_BY_KEY: dict[str, Asset] = {
    "corpus": CORPUS_ASSET,
    "testset": TESTSET_ASSET,
    "citation_metrics": CITATION_METRICS_ASSET,
    "sufficiency_metrics": SUFFICIENCY_METRICS_ASSET,
    "evidence_metrics": EVIDENCE_METRICS_ASSET,
    "retrieval_metrics": RETRIEVAL_METRICS_ASSET,
    "drift": DRIFT_ASSET,
}
"""The Asset of each key of ``ragtrail.pipeline.night.AssetKey``."""

ALL_ASSETS: tuple[Asset, ...] = (
    CORPUS_ASSET,
    TESTSET_ASSET,
    CITATION_METRICS_ASSET,
    SUFFICIENCY_METRICS_ASSET,
    EVIDENCE_METRICS_ASSET,
    RETRIEVAL_METRICS_ASSET,
    DRIFT_ASSET,
)

__all__ = [
    "ALL_ASSETS",
    "ASSETS_BY_KEY",
    "ASSET_GROUP",
    "CITATION_METRICS_ASSET",
    "CORPUS_ASSET",
    "DRIFT_ASSET",
    "EVIDENCE_METRICS_ASSET",
    "RETRIEVAL_METRICS_ASSET",
    "SUFFICIENCY_METRICS_ASSET",
    "TESTSET_ASSET",
]
