"""The metadata database schema, as SQLAlchemy Core tables.

This module is the single definition of the schema; Alembic migrations under ``migrations/`` create
it, and a test checks that the migrated database matches these tables on SQLite and PostgreSQL.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

corpora = Table(
    "corpora",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("snapshot_id", String(64), primary_key=True),
    Column("corpus", String(128), ForeignKey("corpora.name"), nullable=False, index=True),
    Column("parent_snapshot_id", String(64), nullable=True),
    Column("source_uri", Text, nullable=False),
    Column("status", String(16), nullable=False),  # running | complete | failed | abandoned
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("added", Integer, nullable=False, default=0),
    Column("updated", Integer, nullable=False, default=0),
    Column("unchanged", Integer, nullable=False, default=0),
    Column("removed", Integer, nullable=False, default=0),
    Column("quarantined", Integer, nullable=False, default=0),
    Column("n_documents", Integer, nullable=False, default=0),
    Column("n_chunks", Integer, nullable=False, default=0),
    Column("embedding_model", String(256), nullable=False),
    Column("index_backend", String(32), nullable=False),
    Column("index_name", String(256), nullable=True),
    Column("manifest_uri", Text, nullable=True),
    # 0007: the owner of a running snapshot and its heartbeat (the ingest lock), and why a
    # snapshot ended abandoned or failed.
    Column("owner_run", String(128), nullable=True),
    Column("owner_host", String(255), nullable=True),
    Column("owner_pid", Integer, nullable=True),
    Column("heartbeat_at", DateTime(timezone=True), nullable=True),
    Column("status_detail", Text, nullable=True),
)

documents = Table(
    "documents",
    metadata,
    Column("corpus", String(128), ForeignKey("corpora.name"), primary_key=True),
    Column("doc_id", String(512), primary_key=True),
    Column("uri", Text, nullable=False),
    Column("format", String(16), nullable=False),
    Column("title", Text, nullable=False),
    Column("content_hash", String(64), nullable=False, index=True),
    Column("raw_hash", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("n_chunks", Integer, nullable=False),
    Column("doc_metadata", JSON, nullable=False),
    Column("first_snapshot_id", String(64), nullable=False),
    Column("last_changed_snapshot_id", String(64), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("language", String(8), nullable=False, server_default="und"),
)

chunks = Table(
    "chunks",
    metadata,
    Column("corpus", String(128), primary_key=True),
    Column("chunk_id", String(600), primary_key=True),
    Column("doc_id", String(512), nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("headings", JSON, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("n_tokens", Integer, nullable=False),
    Column("content_hash", String(64), nullable=False),
    Index("ix_chunks_corpus_doc", "corpus", "doc_id"),
)

snapshot_documents = Table(
    "snapshot_documents",
    metadata,
    Column("snapshot_id", String(64), ForeignKey("snapshots.snapshot_id"), primary_key=True),
    Column("doc_id", String(512), primary_key=True),
    Column("change", String(16), nullable=False),  # added | updated | unchanged | removed
    Column("content_hash", String(64), nullable=True),
    Column("version", Integer, nullable=True),
    Column("language", String(8), nullable=False, server_default="und"),
)

quarantine = Table(
    "quarantine",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("corpus", String(128), nullable=False, index=True),
    Column("snapshot_id", String(64), nullable=False),
    Column("rel_path", String(512), nullable=False),
    Column("uri", Text, nullable=False),
    Column("reason", String(32), nullable=False),
    Column("detail", Text, nullable=False),
    Column("content_hash", String(64), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("snapshot_id", "rel_path", name="uq_quarantine_snapshot_path"),
)

embedding_cache = Table(
    "embedding_cache",
    metadata,
    Column("model_id", String(256), primary_key=True),
    Column("content_hash", String(64), primary_key=True),
    Column("dim", Integer, nullable=False),
    Column("vector", LargeBinary, nullable=False),  # float32 little-endian
)

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(128), primary_key=True),
    Column("kind", String(32), nullable=False),
    # running | success | failed_quality (published, a GX check failed) | failed | abandoned
    Column("status", String(16), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("params", JSON, nullable=False),
    Column("report_uri", Text, nullable=True),
    # 0003: what the run evaluated, as columns so that runs can be listed and paired cheaply.
    Column("corpus", String(128), nullable=True, index=True),
    Column("snapshot_id", String(64), nullable=True),
    Column("qa_set_version", String(128), nullable=True),
    # 0008: who runs it (host, and the pid when one process runs all of it), when it last
    # reported, and why it ended failed or abandoned.
    Column("owner_host", String(255), nullable=True),
    Column("owner_pid", Integer, nullable=True),
    Column("heartbeat_at", DateTime(timezone=True), nullable=True),
    Column("status_detail", Text, nullable=True),
)

# One row per (run, evaluation, metric, facet set). Columns after created_at were added by 0003
# (ALTER TABLE appends), hence the order.
metrics_history = Table(
    "metrics_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(128), nullable=False, index=True),
    Column("corpus_snapshot", String(64), nullable=False),
    Column("qa_set_version", String(128), nullable=False),
    Column("metric", String(64), nullable=False),
    Column("label", String(32), nullable=True),  # typed copy of facets["label"]
    Column("text_weight", Float, nullable=True),  # typed copy of facets["text_weight"]
    Column("value", Float, nullable=True),  # NULL = undefined, reason in undefined["value"]
    Column("ci_low", Float, nullable=True),
    Column("ci_high", Float, nullable=True),
    Column("n", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("corpus", String(128), nullable=True, index=True),  # NULL only for pre-0003 points
    Column("evaluation", String(64), nullable=False),  # the evaluator's name
    Column("facet_key", String(512), nullable=False),  # canonical JSON of facets
    Column("facets", JSON, nullable=False),
    Column("models", JSON, nullable=False),  # backends and models that produced the value
    Column("judges", JSON, nullable=False),  # judge name -> version (empty when none)
    Column("undefined", JSON, nullable=False),  # field -> reason for every NULL number
    Column("ci_method", String(16), nullable=True),  # 0010: wilson | t | bca | none
    UniqueConstraint(
        "run_id", "evaluation", "metric", "facet_key", name="uq_metrics_history_point"
    ),
)

# Per-query values of a run, the input of paired run-to-run comparisons.
query_results = Table(
    "query_results",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(128), nullable=False, index=True),
    Column("evaluation", String(64), nullable=False),
    Column("qid", String(128), nullable=False),
    Column("facet_key", String(512), nullable=False),
    Column("metric", String(64), nullable=False),
    Column("value", Float, nullable=True),
    Column("undefined_reason", Text, nullable=True),
    UniqueConstraint(
        "run_id", "evaluation", "metric", "facet_key", "qid", name="uq_query_results_point"
    ),
)

llm_cache = Table(
    "llm_cache",
    metadata,
    Column("cache_key", String(64), primary_key=True),  # sha256 of the canonical request
    Column("backend", String(64), nullable=False),
    Column("model_id", String(256), nullable=False),
    Column("prompt_name", String(128), nullable=False),
    Column("prompt_version", String(32), nullable=False),
    Column("request", JSON, nullable=False),
    Column("response_text", Text, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

llm_usage = Table(
    "llm_usage",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(128), nullable=False, index=True),
    Column("stage", String(64), nullable=False),
    Column("backend", String(64), nullable=False),
    Column("model_id", String(256), nullable=False),
    Column("calls", Integer, nullable=False),
    Column("cache_hits", Integer, nullable=False),
    Column("failures", Integer, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=True),
    UniqueConstraint("run_id", "stage", "backend", "model_id", name="uq_llm_usage_key"),
)

# 0009: what each LLM step of a night spent, one row per step instance (a QA set's run, a
# generation shard), so that budgets hold across Airflow tasks and estimates read the history.
step_usage = Table(
    "step_usage",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("night", String(128), nullable=False, index=True),
    Column("corpus", String(128), nullable=False),
    Column("step", String(32), nullable=False, index=True),
    Column("scope", String(256), nullable=False),
    Column("fingerprint", String(64), nullable=True),
    Column("status", String(16), nullable=False),  # running | complete | partial
    Column("reason", Text, nullable=True),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("items_planned", Integer, nullable=False),
    Column("items_run", Integer, nullable=False),
    Column("items_done", Integer, nullable=False),
    Column("calls", Integer, nullable=False),
    Column("cache_hits", Integer, nullable=False),
    Column("failures", Integer, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=True),
    Column("seconds", Float, nullable=False),
    UniqueConstraint("night", "step", "scope", name="uq_step_usage_key"),
)

# -- generated test sets (testset/) -------------------------------------------------------------

qa_candidates = Table(
    "qa_candidates",
    metadata,
    Column("candidate_id", String(64), primary_key=True),
    Column("corpus", String(128), nullable=False),
    Column("snapshot_id", String(64), nullable=False),  # the snapshot it was generated in
    Column("doc_id", String(512), nullable=False),
    Column("doc_content_hash", String(64), nullable=False),
    Column("chunk_id", String(600), nullable=False),
    Column("chunk_hash", String(64), nullable=False),
    Column(
        "context_text", Text, nullable=False
    ),  # the ground chunk's text: lineage is self-contained
    Column("context_headings", JSON, nullable=False),
    Column("statement_kind", String(32), nullable=False),
    Column("requested_label", String(32), nullable=False),
    Column("theme", Text, nullable=False),
    Column("statement", Text, nullable=False),
    Column("question", Text, nullable=False),
    Column("answer", Text, nullable=False),
    Column("source_chunk_id", String(600), nullable=True),  # unanswerable: written from this chunk
    Column("source_doc_id", String(512), nullable=True),  # ... of this document
    Column("observed_label", String(32), nullable=True),
    Column("label_reason", Text, nullable=False),
    Column("critiques", JSON, nullable=False),
    Column("status", String(16), nullable=False),  # CandidateStatus
    Column("reject_reason", Text, nullable=True),
    Column("failure_cause", Text, nullable=True),
    Column("raw_outputs", JSON, nullable=False),
    Column("generator", JSON, nullable=False),
    Column("run_id", String(128), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("retired_at", DateTime(timezone=True), nullable=True),
    Column("retired_reason", Text, nullable=True),
    Column("retired_snapshot_id", String(64), nullable=True),
    # 0005: who gave the label the candidate is filed under ("judge" | "requested") and, when a
    # judge did, which one ("name@version").
    Column("label_source", String(16), nullable=True),
    Column("label_judge", String(160), nullable=True),
    Index("ix_qa_candidates_corpus_status", "corpus", "status"),
    Index("ix_qa_candidates_corpus_doc", "corpus", "doc_id"),
)

qa_sets = Table(
    "qa_sets",
    metadata,
    Column("version", String(64), primary_key=True),  # "ts-" + content hash; immutable
    Column("corpus", String(128), nullable=False, index=True),
    Column("snapshot_id", String(64), nullable=False),
    Column("parent_version", String(64), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("run_id", String(128), nullable=False),
    Column("seed", BigInteger, nullable=False),
    Column("params", JSON, nullable=False),
    Column("counts", JSON, nullable=False),  # accepted per label, targets
    Column("n_items", Integer, nullable=False),
    Column("artifact_uri", Text, nullable=True),
)

qa_set_items = Table(
    "qa_set_items",
    metadata,
    Column("version", String(64), ForeignKey("qa_sets.version"), primary_key=True),
    Column("candidate_id", String(64), ForeignKey("qa_candidates.candidate_id"), primary_key=True),
    Column("qid", String(64), nullable=False),  # stable question id: "q-" + candidate_id[:16]
    Column("position", Integer, nullable=False),
)

# -- judges (judges/) ---------------------------------------------------------------------------

# One row per calibration of one judge version against one reference set.
judge_calibrations = Table(
    "judge_calibrations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("judge", String(128), nullable=False),  # JudgeSpec.name
    Column("judge_version", String(32), nullable=False),  # JudgeSpec.version
    Column("role", String(32), nullable=False),
    Column("kind", String(16), nullable=False),  # categorical | contrast
    Column("spec", JSON, nullable=False),  # JudgeSpec.as_dict()
    Column("reference", String(512), nullable=False),  # what it was measured on
    Column("n", Integer, nullable=False),
    Column("metric", String(64), nullable=False),  # the headline: kappa | contrast_accuracy
    Column("value", Float, nullable=True),  # NULL = undefined, reason in metrics["undefined"]
    Column("ci_low", Float, nullable=True),
    Column("ci_high", Float, nullable=True),
    Column("undefined", JSON, nullable=False),  # field -> reason for every NULL number
    Column("metrics", JSON, nullable=False),  # the calibration's full as_dict()
    Column("details_uri", Text, nullable=True),  # artifact with the per-item verdicts
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_judge_calibrations_judge_version", "judge", "judge_version"),
)

# -- golden (human-written) QA sets (testset/golden.py) -----------------------------------------

golden_sets = Table(
    "golden_sets",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("corpus", String(128), nullable=False),
    Column("name", String(64), nullable=False),
    Column("version", String(64), nullable=False),  # "gs-" + content hash of the items
    Column("n_items", Integer, nullable=False),
    Column("questions_per_label", JSON, nullable=False),
    Column("source", Text, nullable=False),  # the file it was first added from
    Column("content_hash", String(64), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("last_added_at", DateTime(timezone=True), nullable=False),  # newest add wins "latest"
    UniqueConstraint("corpus", "name", "version", name="uq_golden_sets_corpus_name_version"),
    Index("ix_golden_sets_version", "version"),
)

golden_items = Table(
    "golden_items",
    metadata,
    Column("version", String(64), primary_key=True),
    Column("qid", String(128), primary_key=True),
    Column("question", Text, nullable=False),
    Column("label", String(32), nullable=False),
    Column("answer", Text, nullable=False),
    Column("ground_doc_ids", JSON, nullable=False),
    Column("ground_chunk_ids", JSON, nullable=False),
    Column("position", Integer, nullable=False),
)

# -- drift detection (drift/ and pipeline/drift.py) ---------------------------------------------

# The run a corpus's QA-set version is compared with: pinned by hand (`ragtrail runs pin`) or the
# run the current champion model was accepted on. One row per kind; a new pin replaces the old.
drift_baselines = Table(
    "drift_baselines",
    metadata,
    Column("corpus", String(128), primary_key=True),
    Column("qa_set_version", String(128), primary_key=True),
    Column("kind", String(16), primary_key=True),  # pinned | champion
    Column("run_id", String(128), nullable=False),
    Column("model", String(256), nullable=True),  # champion only: registered model name
    Column("model_version", String(64), nullable=True),  # ... and its version
    Column("note", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# Every drift decision, positive or not. The id is derived from (run, baseline run), so checking
# the same pair again replaces its row.
drift_decisions = Table(
    "drift_decisions",
    metadata,
    Column("decision_id", String(64), primary_key=True),
    Column("run_id", String(128), nullable=False, index=True),
    Column("corpus", String(128), nullable=True),
    Column("snapshot_id", String(64), nullable=True),
    Column("qa_set_version", String(128), nullable=True),
    Column("baseline_run_id", String(128), nullable=True),  # NULL: no baseline
    Column("baseline_kind", String(16), nullable=True),  # pinned | champion | first
    Column("status", String(16), nullable=False),  # checked | no_baseline
    Column("fired", Boolean, nullable=False),
    Column("evidence", JSON, nullable=False),  # strict JSON: rows, corpus drift, retirement
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_drift_decisions_corpus_created", "corpus", "created_at"),
)
