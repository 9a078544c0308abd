"""Drift detection: baselines per corpus and QA-set version, and every drift decision.

Revision ID: 0006
Revises: 0005
Create Date: 2026-05-16

- ``drift_baselines``: the run a (corpus, QA-set version) is compared with, per kind
  (``pinned`` by hand, ``champion``: the run the current champion model was accepted on).
- ``drift_decisions``: one row per (run, baseline run) check, positive or not, with its evidence
  as strict JSON; ``fired`` is the decision.

Written by hand; both tables are new, so SQLite and PostgreSQL take the same statements.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "drift_baselines",
        sa.Column("corpus", sa.String(128), nullable=False),
        sa.Column("qa_set_version", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(256), nullable=True),
        sa.Column("model_version", sa.String(64), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "corpus", "qa_set_version", "kind", name=op.f("pk_drift_baselines")
        ),
    )
    op.create_table(
        "drift_decisions",
        sa.Column("decision_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("corpus", sa.String(128), nullable=True),
        sa.Column("snapshot_id", sa.String(64), nullable=True),
        sa.Column("qa_set_version", sa.String(128), nullable=True),
        sa.Column("baseline_run_id", sa.String(128), nullable=True),
        sa.Column("baseline_kind", sa.String(16), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("fired", sa.Boolean(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("decision_id", name=op.f("pk_drift_decisions")),
    )
    op.create_index(op.f("ix_drift_decisions_run_id"), "drift_decisions", ["run_id"])
    op.create_index(
        "ix_drift_decisions_corpus_created", "drift_decisions", ["corpus", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_drift_decisions_corpus_created", table_name="drift_decisions")
    op.drop_index(op.f("ix_drift_decisions_run_id"), table_name="drift_decisions")
    op.drop_table("drift_decisions")
    op.drop_table("drift_baselines")
