"""What each LLM step of a night spent: the ``step_usage`` table (cost and time budgets).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27

One row per step instance (a QA set's run of citations / sufficiency / evidence, a generation
shard, the judges' calibration), keyed by (night, step, scope) so that a retried task rewrites
its row. Budgets sum a night's rows (they hold across Airflow tasks, each its own process) and
the estimates of the next night read them as history.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "step_usage",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("night", sa.String(128), nullable=False),
        sa.Column("corpus", sa.String(128), nullable=False),
        sa.Column("step", sa.String(32), nullable=False),
        sa.Column("scope", sa.String(256), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("items_planned", sa.Integer(), nullable=False),
        sa.Column("items_run", sa.Integer(), nullable=False),
        sa.Column("items_done", sa.Integer(), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("cache_hits", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.UniqueConstraint("night", "step", "scope", name="uq_step_usage_key"),
    )
    op.create_index("ix_step_usage_night", "step_usage", ["night"])
    op.create_index("ix_step_usage_step", "step_usage", ["step"])


def downgrade() -> None:
    op.drop_index("ix_step_usage_step", table_name="step_usage")
    op.drop_index("ix_step_usage_night", table_name="step_usage")
    op.drop_table("step_usage")
