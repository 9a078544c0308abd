"""Who runs a snapshot: the ingest lock and abandoned snapshots.

Revision ID: 0007
Revises: 0006
Create Date: 2026-05-20

``snapshots`` gains the owner of a running snapshot and its heartbeat, which make the running
snapshot the corpus's ingest lock (:mod:`ragtrail.storage.corpus_store`):

- ``owner_run``: the ingest run that planned it (an Airflow run keeps its id across retries);
- ``owner_host`` and ``owner_pid``: where it last reported; the pid only when one process runs
  the whole ingest (CLI, ``ragtrail nightly``), so that its death frees the corpus at once;
- ``heartbeat_at``: when it last reported (plan, each shard, finalize);
- ``status_detail``: why a snapshot ended ``abandoned`` or ``failed``.

All nullable: snapshots written before 0007 have no owner, and a running one among them counts as
stale once its ``created_at`` is older than the heartbeat timeout. The status column has no CHECK
constraint, so the new status ``abandoned`` needs no change. SQLite goes through batch mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(sa.Column("owner_run", sa.String(128), nullable=True))
        batch.add_column(sa.Column("owner_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("owner_pid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("status_detail", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("status_detail")
        batch.drop_column("heartbeat_at")
        batch.drop_column("owner_pid")
        batch.drop_column("owner_host")
        batch.drop_column("owner_run")
