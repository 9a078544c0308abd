"""Generalised metrics history (any evaluation, any facet set), per-query results, run columns.

Revision ID: 0003
Revises: 0002
Create Date: 2026-05-12

- ``runs`` gains ``corpus``, ``snapshot_id`` and ``qa_set_version`` (back-filled from ``params``).
- ``metrics_history`` holds any evaluation's metrics: ``evaluation`` (evaluator name), ``facets``
  (JSON) with a canonical ``facet_key``, ``models``/``judges`` (JSON), a nullable ``value`` with
  reasons in ``undefined``, ``n`` (was ``n_questions``). Existing rows become evaluation
  ``retrieval`` with facets ``{label, text_weight}``; their ``backend``/``model`` move into
  ``models``. ``label``/``text_weight`` stay as typed copies of the common facets.
- ``query_results``: per-query metric values keyed by run, for paired comparisons.

Written by hand; SQLite goes through batch mode (table rebuilds), PostgreSQL through ALTER TABLE.
The facet key is computed inline, not imported, so this migration never changes with the code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_RUNS = sa.table(
    "runs",
    sa.column("run_id", sa.String),
    sa.column("params", sa.JSON),
    sa.column("corpus", sa.String),
    sa.column("snapshot_id", sa.String),
    sa.column("qa_set_version", sa.String),
)


def _facet_key(facets: dict[str, Any]) -> str:
    canonical = {
        k: (round(v, 6) + 0.0 if isinstance(v, float) else v) for k, v in sorted(facets.items())
    }
    return json.dumps(canonical, sort_keys=True, separators=(",", ":"))


def _params(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else {}


def upgrade() -> None:
    conn = op.get_bind()
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("corpus", sa.String(128), nullable=True))
        batch.add_column(sa.Column("snapshot_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("qa_set_version", sa.String(128), nullable=True))
        batch.create_index(batch.f("ix_runs_corpus"), ["corpus"])
    run_corpus: dict[str, str | None] = {}
    for run_id, raw in conn.execute(sa.select(_RUNS.c.run_id, _RUNS.c.params)).all():
        params = _params(raw)
        values = {k: params.get(k) for k in ("corpus", "snapshot_id", "qa_set_version")}
        values = {k: str(v) if v is not None else None for k, v in values.items()}
        run_corpus[run_id] = values["corpus"]
        conn.execute(sa.update(_RUNS).where(_RUNS.c.run_id == run_id).values(**values))

    with op.batch_alter_table("metrics_history") as batch:
        batch.drop_constraint("uq_metrics_history_point", type_="unique")
        batch.alter_column("n_questions", new_column_name="n", existing_type=sa.Integer())
        batch.alter_column("value", existing_type=sa.Float(), nullable=True)
        batch.alter_column("label", existing_type=sa.String(32), nullable=True)
        batch.add_column(sa.Column("corpus", sa.String(128), nullable=True))
        batch.add_column(sa.Column("evaluation", sa.String(64), nullable=True))
        batch.add_column(sa.Column("facet_key", sa.String(512), nullable=True))
        batch.add_column(sa.Column("facets", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("models", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("judges", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("undefined", sa.JSON(), nullable=True))

    history = sa.table(
        "metrics_history",
        sa.column("id", sa.Integer),
        sa.column("run_id", sa.String),
        sa.column("label", sa.String),
        sa.column("text_weight", sa.Float),
        sa.column("backend", sa.String),
        sa.column("model", sa.String),
        sa.column("corpus", sa.String),
        sa.column("evaluation", sa.String),
        sa.column("facet_key", sa.String),
        sa.column("facets", sa.JSON),
        sa.column("models", sa.JSON),
        sa.column("judges", sa.JSON),
        sa.column("undefined", sa.JSON),
    )
    old = sa.select(
        history.c.id,
        history.c.run_id,
        history.c.label,
        history.c.text_weight,
        history.c.backend,
        history.c.model,
    )
    for row in conn.execute(old).all():
        facets: dict[str, Any] = {"label": row.label}
        if row.text_weight is not None:
            facets["text_weight"] = float(row.text_weight)
        conn.execute(
            sa.update(history)
            .where(history.c.id == row.id)
            .values(
                corpus=run_corpus.get(row.run_id),
                evaluation="retrieval",
                facet_key=_facet_key(facets),
                facets=facets,
                models={"index_backend": row.backend, "embedding_model": row.model},
                judges={},
                undefined={},
            )
        )

    with op.batch_alter_table("metrics_history") as batch:
        batch.drop_column("backend")
        batch.drop_column("model")
        for name, kind in (
            ("evaluation", sa.String(64)),
            ("facet_key", sa.String(512)),
            ("facets", sa.JSON()),
            ("models", sa.JSON()),
            ("judges", sa.JSON()),
            ("undefined", sa.JSON()),
        ):
            batch.alter_column(name, existing_type=kind, nullable=False)
        batch.create_unique_constraint(
            "uq_metrics_history_point", ["run_id", "evaluation", "metric", "facet_key"]
        )
        batch.create_index(batch.f("ix_metrics_history_corpus"), ["corpus"])

    op.create_table(
        "query_results",
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("evaluation", sa.String(64), nullable=False),
        sa.Column("qid", sa.String(128), nullable=False),
        sa.Column("facet_key", sa.String(512), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("undefined_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_query_results")),
        sa.UniqueConstraint(
            "run_id",
            "evaluation",
            "metric",
            "facet_key",
            "qid",
            name=op.f("uq_query_results_point"),
        ),
    )
    op.create_index(op.f("ix_query_results_run_id"), "query_results", ["run_id"])


def downgrade() -> None:
    """Back to 0002. Lossy by necessity: points 0002 cannot hold (other evaluations, undefined
    values, facets without a label) are deleted, and per-query results are dropped."""
    conn = op.get_bind()
    op.drop_index(op.f("ix_query_results_run_id"), table_name="query_results")
    op.drop_table("query_results")

    history = sa.table(
        "metrics_history",
        sa.column("id", sa.Integer),
        sa.column("evaluation", sa.String),
        sa.column("label", sa.String),
        sa.column("value", sa.Float),
        sa.column("models", sa.JSON),
        sa.column("backend", sa.String),
        sa.column("model", sa.String),
    )
    conn.execute(
        sa.delete(history).where(
            sa.or_(
                history.c.evaluation != "retrieval",
                history.c.label.is_(None),
                history.c.value.is_(None),
            )
        )
    )
    with op.batch_alter_table("metrics_history") as batch:
        batch.add_column(sa.Column("backend", sa.String(64), nullable=True))
        batch.add_column(sa.Column("model", sa.String(256), nullable=True))
    for row_id, models in conn.execute(sa.select(history.c.id, history.c.models)).all():
        models = _params(models)
        conn.execute(
            sa.update(history)
            .where(history.c.id == row_id)
            .values(
                backend=str(models.get("index_backend", "")),
                model=str(models.get("embedding_model", "")),
            )
        )
    with op.batch_alter_table("metrics_history") as batch:
        batch.drop_index(batch.f("ix_metrics_history_corpus"))
        batch.drop_constraint("uq_metrics_history_point", type_="unique")
        for name in (
            "corpus",
            "evaluation",
            "facet_key",
            "facets",
            "models",
            "judges",
            "undefined",
        ):
            batch.drop_column(name)
        batch.alter_column("n", new_column_name="n_questions", existing_type=sa.Integer())
        batch.alter_column("value", existing_type=sa.Float(), nullable=False)
        batch.alter_column("label", existing_type=sa.String(32), nullable=False)
        batch.alter_column("backend", existing_type=sa.String(64), nullable=False)
        batch.alter_column("model", existing_type=sa.String(256), nullable=False)
        batch.create_unique_constraint(
            "uq_metrics_history_point", ["run_id", "metric", "label", "text_weight"]
        )

    with op.batch_alter_table("runs") as batch:
        batch.drop_index(batch.f("ix_runs_corpus"))
        batch.drop_column("qa_set_version")
        batch.drop_column("snapshot_id")
        batch.drop_column("corpus")
