"""Corpus drift: how much of the corpus changed between the baseline's snapshot and the current one.

Each snapshot's document set is ``doc_id -> content hash``. Against the baseline's set, a document is
*added* (only in the current set), *removed* (only in the baseline's), *updated* (in both with a
different hash) or unchanged. Shares are of the baseline's document count, so "20% removed" means a
fifth of what the baseline was evaluated on is gone. Recorded beside a drift decision, never
firing it: a changed corpus is a reason to look, a dropped metric is the reason to retrain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ragtrail.jsonsafe import JsonObject

NO_BASELINE_DOCUMENTS = "the baseline snapshot has no documents"


@dataclass(frozen=True)
class CorpusDrift:
    """Documents added, updated and removed since the baseline snapshot, with shares."""

    baseline_snapshot: str
    current_snapshot: str
    n_baseline: int
    n_current: int
    added: int
    updated: int
    removed: int
    unchanged: int

    def share(self, count: int) -> float | None:
        return count / self.n_baseline if self.n_baseline else None

    @property
    def changed_share(self) -> float | None:
        """Documents added, updated or removed, relative to the baseline's document count."""
        return self.share(self.added + self.updated + self.removed)

    def as_record(self) -> JsonObject:
        """Strict JSON; shares are null with a reason when the baseline had no documents."""
        record: JsonObject = {
            "baseline_snapshot": self.baseline_snapshot,
            "current_snapshot": self.current_snapshot,
            "n_baseline": self.n_baseline,
            "n_current": self.n_current,
            "added": self.added,
            "updated": self.updated,
            "removed": self.removed,
            "unchanged": self.unchanged,
        }
        undefined: dict[str, str] = {}
        for name in ("added", "updated", "removed", "changed"):
            value = self.changed_share if name == "changed" else self.share(record[name])
            record[f"{name}_share"] = value
            if value is None:
                undefined[f"{name}_share"] = NO_BASELINE_DOCUMENTS
        record["undefined"] = undefined
        return record


@dataclass(frozen=True)
class SnapshotDocuments:
    """The documents present in one snapshot: ``doc_id -> content hash``."""

    snapshot_id: str
    hashes: Mapping[str, str | None] = field(default_factory=dict)


def corpus_drift(baseline: SnapshotDocuments, current: SnapshotDocuments) -> CorpusDrift:
    """Compare two snapshots' document sets (see the module docstring)."""
    before, after = baseline.hashes, current.hashes
    common = before.keys() & after.keys()
    updated = sum(1 for doc in common if before[doc] != after[doc])
    return CorpusDrift(
        baseline_snapshot=baseline.snapshot_id,
        current_snapshot=current.snapshot_id,
        n_baseline=len(before),
        n_current=len(after),
        added=len(after.keys() - before.keys()),
        updated=updated,
        removed=len(before.keys() - after.keys()),
        unchanged=len(common) - updated,
    )
