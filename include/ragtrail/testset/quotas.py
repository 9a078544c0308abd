"""Per-label quota selection with a per-document cap (pure and deterministic).

Items of the previous version that are still valid (``existing``) are considered first, so a new
version changes as little as possible; then accepted candidates, in the (seeded) order given, fill
each label up to its target. Only candidates whose observed label equals the requested label count.
Existing items obey the same rules (target and document cap), so shrinking a target or tightening
the cap sheds the last-listed existing items first. Every candidate not selected comes back as a
:class:`Leftover` with its reason — nothing is dropped silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import LABELS, QACandidate, RejectKind, format_reject_reason

QUOTA_FULL = format_reject_reason(RejectKind.QUOTA_FULL)
DOCUMENT_CAP = format_reject_reason(RejectKind.DOCUMENT_CAP)
LABEL_MISMATCH = format_reject_reason(RejectKind.LABEL_MISMATCH)
"""Leftover reasons: the label's target is reached (or zero / absent); the document already has
``max_per_document`` items; the observed label differs from the requested one (or is missing)."""


@dataclass(frozen=True)
class Leftover:
    candidate: QACandidate
    reason: str


@dataclass
class QuotaResult:
    """The selection, in order (kept existing items first), and everything left over."""

    selected: list[QACandidate]
    leftovers: list[Leftover]
    achieved: dict[str, int]
    targets: dict[str, int]
    n_existing_kept: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # leftover reason -> count

    @property
    def shortfall(self) -> dict[str, int]:
        """label -> how many items are missing to reach its target (labels short only)."""
        return {
            label: target - self.achieved.get(label, 0)
            for label, target in self.targets.items()
            if self.achieved.get(label, 0) < target
        }

    @property
    def met(self) -> bool:
        """Whether every target was reached."""
        return not self.shortfall

    def balance_rows(self) -> list[JsonObject]:
        """Per label: achieved, target, share, target_share, deviation, shortfall.

        The columns of :func:`ragtrail.quality.suites.testset_balance_suite`.
        """
        total = sum(self.achieved.values())
        total_target = sum(self.targets.values())
        rows = []
        for label, target in self.targets.items():
            achieved = self.achieved.get(label, 0)
            share = achieved / total if total else 0.0
            target_share = target / total_target if total_target else 0.0
            rows.append(
                {
                    "label": label,
                    "achieved": achieved,
                    "target": target,
                    "share": share,
                    "target_share": target_share,
                    "deviation": abs(share - target_share),
                    "shortfall": max(target - achieved, 0),
                }
            )
        return rows


def _ordered_targets(targets: Mapping[str, int]) -> dict[str, int]:
    """Validated targets, in taxonomy order first, then any other labels as given."""
    for label, target in targets.items():
        if int(target) != target or target < 0:
            raise ValueError(f"target for {label!r} must be a non-negative integer, got {target!r}")
    order = [label for label in LABELS if label in targets]
    order += [label for label in targets if label not in LABELS]
    return {label: int(targets[label]) for label in order}


def select_with_quotas(
    candidates: Sequence[QACandidate],
    targets: Mapping[str, int],
    *,
    max_per_document: int | None = None,
    existing: Sequence[QACandidate] = (),
) -> QuotaResult:
    """Select up to ``targets[label]`` items per label, at most ``max_per_document`` per document.

    ``existing`` (still-valid items of the previous version) go first, then ``candidates`` in the
    order given. A candidate id seen twice is considered once. Deterministic for a given input.
    """
    if max_per_document is not None and max_per_document < 1:
        raise ValueError(f"max_per_document must be >= 1, got {max_per_document}")
    ordered = _ordered_targets(targets)
    per_label: Counter[str] = Counter()
    per_doc: Counter[str] = Counter()
    seen: set[str] = set()
    selected: list[QACandidate] = []
    leftovers: list[Leftover] = []
    n_existing_kept = 0

    for is_existing, cand in [(True, c) for c in existing] + [(False, c) for c in candidates]:
        if cand.candidate_id in seen:
            continue
        seen.add(cand.candidate_id)
        reason = _refusal(cand, ordered, per_label, per_doc, max_per_document)
        if reason is not None:
            leftovers.append(Leftover(cand, reason))
            continue
        selected.append(cand)
        per_label[cand.requested_label] += 1
        per_doc[cand.context.doc_id] += 1
        n_existing_kept += int(is_existing)

    return QuotaResult(
        selected=selected,
        leftovers=leftovers,
        achieved={label: per_label[label] for label in ordered},
        targets=ordered,
        n_existing_kept=n_existing_kept,
        reasons=dict(sorted(Counter(left.reason for left in leftovers).items())),
    )


def _refusal(
    cand: QACandidate,
    targets: Mapping[str, int],
    per_label: Counter[str],
    per_doc: Counter[str],
    max_per_document: int | None,
) -> str | None:
    """Why ``cand`` cannot be selected now, or None if it can."""
    if not cand.label_matches:
        return LABEL_MISMATCH
    if per_label[cand.requested_label] >= targets.get(cand.requested_label, 0):
        return QUOTA_FULL
    if max_per_document is not None and per_doc[cand.context.doc_id] >= max_per_document:
        return DOCUMENT_CAP
    return None
