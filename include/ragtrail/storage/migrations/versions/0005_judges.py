"""Judge calibrations, and who labelled each QA candidate.

Revision ID: 0005
Revises: 0004
Create Date: 2026-05-14

- ``judge_calibrations``: one row per calibration of a judge version against a reference set,
  with its headline metric (value and interval as columns, reasons for NULLs in ``undefined``)
  and the full figures as JSON.
- ``qa_candidates`` gains ``label_source`` ("judge" | "requested") and ``label_judge`` (the
  labeller's ``name@version``), both nullable: candidates stored before 0005 keep NULL (unknown).

Written by hand; SQLite goes through batch mode, PostgreSQL through ALTER TABLE.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "judge_calibrations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("judge", sa.String(128), nullable=False),
        sa.Column("judge_version", sa.String(32), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("reference", sa.String(512), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("ci_low", sa.Float(), nullable=True),
        sa.Column("ci_high", sa.Float(), nullable=True),
        sa.Column("undefined", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("details_uri", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_judge_calibrations")),
    )
    op.create_index(
        op.f("ix_judge_calibrations_judge_version"),
        "judge_calibrations",
        ["judge", "judge_version"],
    )
    with op.batch_alter_table("qa_candidates") as batch:
        batch.add_column(sa.Column("label_source", sa.String(16), nullable=True))
        batch.add_column(sa.Column("label_judge", sa.String(160), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("qa_candidates") as batch:
        batch.drop_column("label_judge")
        batch.drop_column("label_source")
    op.drop_index(op.f("ix_judge_calibrations_judge_version"), table_name="judge_calibrations")
    op.drop_table("judge_calibrations")
