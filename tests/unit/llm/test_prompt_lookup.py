"""Prompt-lookup drafts (:mod:`ragtrail.llm.backends.prompt_lookup`), against hand-worked token
sequences."""

from __future__ import annotations

from ragtrail.llm.backends.prompt_lookup import DraftIndex


def test_the_longest_recurring_tail_drafts_what_followed_it() -> None:
    # the tail 1 2 3 occurred at 0, followed by 9 1 2 3
    index = DraftIndex([1, 2, 3, 9, 1, 2, 3])
    assert index.draft(2) == [9, 1]
    assert index.draft(8) == [9, 1, 2, 3]


def test_the_latest_earlier_occurrence_wins() -> None:
    # 4 5 occurs at 0 (then 6) and at 3 (then 7); the tail 4 5 at 6 is not its own match
    assert DraftIndex([4, 5, 6, 4, 5, 7, 4, 5]).draft(1) == [7]


def test_a_shorter_tail_is_tried_when_the_longer_never_recurred() -> None:
    # 8 2 3 never occurred before; 2 3 did (at 1, then 4)
    assert DraftIndex([1, 2, 3, 4, 8, 2, 3]).draft(3) == [4, 8, 2]


def test_no_draft_without_an_earlier_occurrence_or_room() -> None:
    assert DraftIndex([1, 2, 3, 4]).draft(3) == []
    assert DraftIndex([5, 5]).draft(3) == []  # a 2-gram needs an earlier occurrence with a follower
    assert DraftIndex([1, 2, 3, 1, 2]).draft(0) == []


def test_extending_indexes_the_new_tokens() -> None:
    index = DraftIndex([7, 8, 9])
    assert index.draft(2) == []
    index.extend([1, 7, 8])  # 7 8 recurs: 9 1 followed it
    assert index.draft(2) == [9, 1]
    index.extend([2])  # 8 2 is new; 2 alone is no match length
    assert index.draft(2) == []
    assert index.tokens == [7, 8, 9, 1, 7, 8, 2]
