"""How each stored interval was computed.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27

``metrics_history`` gains ``ci_method``: ``wilson``, ``t``, ``bca`` or ``none`` (no interval is
valid at the row's n; the reason is in ``undefined``), as chosen by
:mod:`ragtrail.stats.intervals`. Nullable: rows written before 0009 carry percentile-bootstrap
intervals whose method was not recorded. SQLite goes through batch mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("metrics_history") as batch:
        batch.add_column(sa.Column("ci_method", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("metrics_history") as batch:
        batch.drop_column("ci_method")
