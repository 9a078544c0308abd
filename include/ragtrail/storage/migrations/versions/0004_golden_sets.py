"""Golden (human-written) QA sets: immutable, content-addressed versions per corpus and name.

Revision ID: 0004
Revises: 0003
Create Date: 2026-05-20

- ``golden_sets``: one row per (corpus, name, version); ``last_added_at`` moves when the same
  content is added again, so the most recently added version of a name is its latest.
- ``golden_items``: the questions of a version in file order (shared by every registration of the
  same content).

Written by hand, like the earlier revisions; names follow ``ragtrail.storage.tables.metadata``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "golden_sets",
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("corpus", sa.String(128), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("n_items", sa.Integer(), nullable=False),
        sa.Column("questions_per_label", sa.JSON(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.Column("last_added_at", TZ_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_golden_sets")),
        sa.UniqueConstraint(
            "corpus", "name", "version", name=op.f("uq_golden_sets_corpus_name_version")
        ),
    )
    op.create_index(op.f("ix_golden_sets_version"), "golden_sets", ["version"])

    op.create_table(
        "golden_items",
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("qid", sa.String(128), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("label", sa.String(32), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("ground_doc_ids", sa.JSON(), nullable=False),
        sa.Column("ground_chunk_ids", sa.JSON(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("version", "qid", name=op.f("pk_golden_items")),
    )


def downgrade() -> None:
    op.drop_table("golden_items")
    op.drop_index(op.f("ix_golden_sets_version"), table_name="golden_sets")
    op.drop_table("golden_sets")
