"""The language of each document, as ingest detected it or configuration forced it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

``documents`` and ``snapshot_documents`` gain ``language`` (an ISO 639 code, ``und`` when the
text was too short to call). Rows ingested before this revision hold ``und`` until their document
changes; ``ragtrail ingest`` re-detects nothing for unchanged text. SQLite goes through batch mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("documents", "snapshot_documents"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("language", sa.String(8), nullable=False, server_default="und")
            )


def downgrade() -> None:
    for table in ("documents", "snapshot_documents"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("language")
