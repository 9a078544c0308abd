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

from ragtrail.summaries.drift_summary import CorpusChanges

NO_BASELINE_DOCUMENTS = "the baseline snapshot has no documents"


@dataclass(frozen=True)
class SnapshotDocuments:
    """The documents present in one snapshot: ``doc_id -> content hash``."""

    snapshot_id: str
    hashes: Mapping[str, str | None] = field(default_factory=dict)


def corpus_drift(baseline: SnapshotDocuments, current: SnapshotDocuments) -> CorpusChanges:
    """Compare two snapshots' document sets (see the module docstring); shares are null with a
    reason when the baseline had no documents."""
    before, after = baseline.hashes, current.hashes
    common = before.keys() & after.keys()
    counts = {
        "added": len(after.keys() - before.keys()),
        "updated": sum(1 for doc in common if before[doc] != after[doc]),
        "removed": len(before.keys() - after.keys()),
    }
    counts["changed"] = sum(counts.values())
    shares = {
        f"{name}_share": count / len(before) if before else None for name, count in counts.items()
    }
    return CorpusChanges(
        baseline_snapshot=baseline.snapshot_id,
        current_snapshot=current.snapshot_id,
        n_baseline=len(before),
        n_current=len(after),
        added=counts["added"],
        updated=counts["updated"],
        removed=counts["removed"],
        unchanged=len(common) - counts["updated"],
        **shares,
        undefined={name: NO_BASELINE_DOCUMENTS for name, share in shares.items() if share is None},
    )
