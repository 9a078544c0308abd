"""Source files a snapshot refused, with the reason, as :class:`QuarantineEntry` records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.engine import RowMapping

from ragtrail.records import QuarantineReason, QuarantineRecord
from ragtrail.storage import tables as t
from ragtrail.storage.corpus_store import latest_snapshot
from ragtrail.storage.db import utcnow, write_transaction
from ragtrail.storage.sql import SqlStore, as_dict, upsert


@dataclass(frozen=True)
class QuarantineEntry:
    """One row of ``quarantine``: a :class:`QuarantineRecord` stored for a snapshot."""

    id: int
    corpus: str
    snapshot_id: str
    rel_path: str
    uri: str
    reason: QuarantineReason
    detail: str
    content_hash: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: RowMapping) -> QuarantineEntry:
        values = as_dict(row)
        values["reason"] = QuarantineReason(values["reason"])
        return cls(**values)

    @property
    def record(self) -> QuarantineRecord:
        """The file and reason alone, as the loaders report them."""
        return QuarantineRecord(
            self.uri, self.rel_path, self.reason, self.detail, self.content_hash
        )


class QuarantineStore(SqlStore):
    """Quarantined source files per snapshot in the metadata database."""

    def record_quarantine(
        self, corpus: str, snapshot_id: str, records: Sequence[QuarantineRecord]
    ) -> None:
        """Upsert quarantined files of a snapshot, keyed by (snapshot_id, rel_path)."""
        now = utcnow()
        rows = [
            {
                "corpus": corpus,
                "snapshot_id": snapshot_id,
                "rel_path": r.rel_path,
                "uri": r.uri,
                "reason": str(r.reason),
                "detail": r.detail,
                "content_hash": r.content_hash,
                "created_at": now,
            }
            for r in records
        ]
        updated = ["corpus", "uri", "reason", "detail", "content_hash"]
        with write_transaction(self.engine) as conn:
            upsert(conn, t.quarantine, rows, ["snapshot_id", "rel_path"], updated)

    def list_quarantine(self, corpus: str, snapshot_id: str | None = None) -> list[QuarantineEntry]:
        """Quarantined files of one snapshot (default: the corpus's latest, any status)."""
        q = t.quarantine
        with self.engine.connect() as conn:
            if snapshot_id is None:
                latest = latest_snapshot(conn, corpus, None)
                if latest is None:
                    return []
                snapshot_id = latest.snapshot_id
            query = (
                select(q)
                .where(q.c.corpus == corpus, q.c.snapshot_id == snapshot_id)
                .order_by(q.c.rel_path)
            )
            return [QuarantineEntry.from_row(r) for r in conn.execute(query).mappings()]
