"""Who runs an evaluation run, its heartbeat, and why it failed or was abandoned.

Revision ID: 0008
Revises: 0007
Create Date: 2026-05-27

``runs`` gains what :mod:`ragtrail.storage.runs_store` needs to tell a killed run from a live one
and a failed run from a real one:

- ``owner_host`` and ``owner_pid``: where the run last reported; the pid only when one process
  runs all of it (CLI, ``ragtrail nightly``), so that its death ends the run at once;
- ``heartbeat_at``: when it last reported (each step, and every few seconds of model calls);
- ``status_detail``: why a run ended ``failed`` (e.g. most of its model calls failed) or
  ``abandoned`` (its process is gone, or it stopped reporting).

All nullable: runs written before 0008 have no owner, and a running one among them counts as
stale once its ``started_at`` is older than ``runs.stale_after_s``. The status column has no CHECK
constraint, so the new statuses ``failed`` and ``abandoned`` need no change. SQLite goes through
batch mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("owner_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("owner_pid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("status_detail", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("status_detail")
        batch.drop_column("heartbeat_at")
        batch.drop_column("owner_pid")
        batch.drop_column("owner_host")
