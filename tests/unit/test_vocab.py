"""Closed vocabularies as StrEnums: stored strings and JSON stay exactly what they were."""

from __future__ import annotations

import json

import pytest

from ragtrail.records import (
    ANSWERABLE_LABELS,
    LABELS,
    STATEMENT_KINDS,
    CandidateStatus,
    QuestionLabel,
    RejectKind,
    StatementKind,
    format_reject_reason,
    parse_reject_reason,
    reject_kind,
)
from ragtrail.testset.quotas import DOCUMENT_CAP, LABEL_MISMATCH, QUOTA_FULL


def test_label_tuples_derive_from_the_enum_as_plain_strings() -> None:
    assert LABELS == ("fact_single", "summary", "reasoning", "unanswerable")
    assert ANSWERABLE_LABELS == ("fact_single", "summary", "reasoning")
    assert all(type(label) is str for label in LABELS)
    assert list(QuestionLabel) == [QuestionLabel(label) for label in LABELS]


def test_enum_members_serialise_as_their_values() -> None:
    record = {
        "kind": StatementKind.FOREIGN,
        "label": STATEMENT_KINDS[StatementKind.FOREIGN],
        "status": CandidateStatus.ACCEPTED,
    }
    plain = {"kind": "foreign", "label": "unanswerable", "status": "accepted"}
    assert json.dumps(record, separators=(",", ":")) == json.dumps(plain, separators=(",", ":"))
    assert f"{StatementKind.CONCLUSION}" == "conclusion"
    assert STATEMENT_KINDS["fact"] == "fact_single"  # plain-string lookups keep working
    assert StatementKind.BASELINE not in STATEMENT_KINDS


@pytest.mark.parametrize(
    ("kind", "detail", "stored"),
    [
        (RejectKind.CRITIQUE, "q_to_c_groundedness=2<3", "critique:q_to_c_groundedness=2<3"),
        (RejectKind.LABEL_MISMATCH, "summary->reasoning", "label_mismatch:summary->reasoning"),
        (RejectKind.DUPLICATE_OF, "previous version#4", "duplicate_of:previous version#4"),
        (RejectKind.QUOTA_FULL, None, "quota_full"),
        (RejectKind.DOCUMENT_CAP, None, "document_cap"),
    ],
)
def test_reject_reason_format_and_parse_round_trip(
    kind: RejectKind, detail: str | None, stored: str
) -> None:
    assert format_reject_reason(kind, detail) == stored
    assert type(format_reject_reason(kind, detail)) is str
    assert parse_reject_reason(stored) == (kind, detail)
    assert reject_kind(stored) is kind


def test_reject_reason_edge_cases() -> None:
    joined = "critique:a=1<3; critique:b=2<3"
    assert parse_reject_reason(joined) == (RejectKind.CRITIQUE, "a=1<3")
    assert reject_kind(None) is None and reject_kind("") is None
    assert reject_kind("mystery:x") is None
    with pytest.raises(ValueError):
        parse_reject_reason("mystery:x")
    assert (QUOTA_FULL, DOCUMENT_CAP, LABEL_MISMATCH) == (
        "quota_full",
        "document_cap",
        "label_mismatch",
    )
