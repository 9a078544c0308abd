"""Per-label quota selection with a per-document cap."""

from __future__ import annotations

import random

import pytest

from ragtrail.testset.quotas import (
    DOCUMENT_CAP,
    LABEL_MISMATCH,
    QUOTA_FULL,
    select_with_quotas,
)
from tests.unit.testset import cid, make_candidate


def _names(cands) -> list[str]:
    by_id = {cid(f"{p}{i}"): f"{p}{i}" for p in "fsrux" for i in range(20)}
    return [by_id[c.candidate_id] for c in cands]


def _pool():
    """Per label several candidates, each in its own document unless stated."""
    out = []
    for i in range(4):
        out.append(make_candidate(f"f{i}", doc=f"f{i}.md", label="fact_single"))
        out.append(make_candidate(f"s{i}", doc=f"s{i}.md", label="summary"))
        out.append(make_candidate(f"r{i}", doc=f"r{i}.md", label="reasoning"))
        out.append(make_candidate(f"u{i}", doc=f"u{i}.md", label="unanswerable"))
    return out


def test_targets_met_in_candidate_order() -> None:
    targets = {"fact_single": 2, "summary": 1, "reasoning": 3, "unanswerable": 0}
    result = select_with_quotas(_pool(), targets)
    assert _names(result.selected) == ["f0", "s0", "r0", "f1", "r1", "r2"]
    assert result.achieved == {"fact_single": 2, "summary": 1, "reasoning": 3, "unanswerable": 0}
    assert result.met and result.shortfall == {}
    assert {left.reason for left in result.leftovers} == {QUOTA_FULL}
    assert len(result.selected) + len(result.leftovers) == 16
    assert result.reasons == {QUOTA_FULL: 10}


def test_shortfall_and_balance_rows() -> None:
    result = select_with_quotas(_pool(), {"summary": 6, "fact_single": 2})
    assert list(result.targets) == ["fact_single", "summary"]  # taxonomy order
    assert result.achieved == {"fact_single": 2, "summary": 4}
    assert not result.met and result.shortfall == {"summary": 2}
    rows = {r["label"]: r for r in result.balance_rows()}
    assert rows["summary"]["share"] == pytest.approx(4 / 6)
    assert rows["summary"]["target_share"] == pytest.approx(6 / 8)
    assert rows["summary"]["deviation"] == pytest.approx(6 / 8 - 4 / 6)
    assert rows["summary"]["shortfall"] == 2 and rows["fact_single"]["shortfall"] == 0
    # labels without a target are never selected
    assert all(c.requested_label in {"fact_single", "summary"} for c in result.selected)


def test_document_cap_across_labels() -> None:
    cands = [
        make_candidate("f0", doc="a.md", label="fact_single"),
        make_candidate("s0", doc="a.md", label="summary"),
        make_candidate("r0", doc="a.md", label="reasoning"),
        make_candidate("f1", doc="b.md", label="fact_single"),
        make_candidate("s1", doc="b.md", label="summary"),
        make_candidate("r1", doc="c.md", label="reasoning"),
    ]
    targets = {"fact_single": 2, "summary": 2, "reasoning": 2}
    result = select_with_quotas(cands, targets, max_per_document=2)
    assert _names(result.selected) == ["f0", "s0", "f1", "s1", "r1"]
    assert [(_names([x.candidate])[0], x.reason) for x in result.leftovers] == [
        ("r0", DOCUMENT_CAP)
    ]
    assert result.shortfall == {"reasoning": 1}
    one = select_with_quotas(cands, targets, max_per_document=1)
    assert _names(one.selected) == ["f0", "f1", "r1"]
    with pytest.raises(ValueError, match="max_per_document"):
        select_with_quotas(cands, targets, max_per_document=0)


def test_only_matching_labels_count() -> None:
    cands = [
        make_candidate("f0", doc="a.md", label="fact_single", observed="reasoning"),
        make_candidate("f1", doc="b.md", label="fact_single", observed=None),
        make_candidate("f2", doc="c.md", label="fact_single"),
        make_candidate("r0", doc="d.md", label="reasoning", observed="fact_single"),
    ]
    result = select_with_quotas(cands, {"fact_single": 3, "reasoning": 3})
    assert _names(result.selected) == ["f2"]
    assert result.achieved == {"fact_single": 1, "reasoning": 0}
    assert {_names([x.candidate])[0]: x.reason for x in result.leftovers} == {
        "f0": LABEL_MISMATCH,
        "f1": LABEL_MISMATCH,
        "r0": LABEL_MISMATCH,
    }


def test_existing_items_are_kept_first() -> None:
    pool = _pool()
    existing = [make_candidate("x0", doc="x.md"), make_candidate("x1", doc="f0.md")]
    targets = {"fact_single": 3, "summary": 1}
    # the pool also lists an existing item again: it is selected once
    result = select_with_quotas([*pool, existing[0]], targets, existing=existing)
    assert _names(result.selected) == ["x0", "x1", "f0", "s0"]
    assert result.n_existing_kept == 2
    ids = [c.candidate_id for c in result.selected] + [
        x.candidate.candidate_id for x in result.leftovers
    ]
    assert len(ids) == len(set(ids)) == len(pool) + 2

    # a smaller target or a cap sheds existing items too, last-listed first
    shrunk = select_with_quotas(pool, {"fact_single": 1}, existing=existing)
    assert _names(shrunk.selected) == ["x0"] and shrunk.n_existing_kept == 1
    capped = select_with_quotas(pool, {"fact_single": 3}, existing=existing, max_per_document=1)
    assert _names(capped.selected) == ["x0", "x1", "f1"]  # f0.md already has x1


def test_deterministic() -> None:
    pool = _pool()
    random.Random(5).shuffle(pool)
    targets = {"fact_single": 2, "summary": 2, "reasoning": 2, "unanswerable": 2}
    first = select_with_quotas(pool, targets, max_per_document=1)
    again = select_with_quotas(list(pool), dict(reversed(targets.items())), max_per_document=1)
    assert _names(first.selected) == _names(again.selected)
    assert [x.reason for x in first.leftovers] == [x.reason for x in again.leftovers]
    assert first.achieved == again.achieved and list(first.achieved) == list(again.achieved)


def test_invalid_targets() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        select_with_quotas([], {"summary": -1})
    with pytest.raises(ValueError, match="non-negative"):
        select_with_quotas([], {"summary": 1.5})
    empty = select_with_quotas([], {"summary": 2})
    assert empty.selected == [] and empty.shortfall == {"summary": 2}
