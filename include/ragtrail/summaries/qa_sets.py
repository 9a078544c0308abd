"""QA sets as steps hand them on: the sets a night evaluates (as the plan gives them to the mapped
evaluation steps) and a golden set's registration."""

from __future__ import annotations

from pydantic import field_serializer, field_validator

from ragtrail.records import QASetRef, SetKind
from ragtrail.summaries.base import Record
from ragtrail.summaries.quality_summary import ValidationResult


class PlannedSet(Record):
    """One QA set of a night: its name in the night, where it comes from, the reference its
    items are loaded by, and the stored run it is evaluated as (``<night run id>.<name>``)."""

    name: str
    kind: SetKind
    qa_set: QASetRef
    run_id: str

    @field_validator("qa_set", mode="before")
    @classmethod
    def _parse_reference(cls, value: object) -> object:
        return QASetRef.parse(value) if isinstance(value, str) else value

    @field_serializer("qa_set")
    def _reference_text(self, value: QASetRef) -> str:
        return str(value)

    @property
    def version(self) -> str | None:
        """The golden or generated version the set names (None for a file)."""
        return self.qa_set.version


class GoldenRegistration(Record):
    """A golden set registered (or found already registered) by ``ragtrail qaset add`` or the
    night: the version with its counts and source, whether this call created it, and the
    Great Expectations result stored beside it."""

    corpus: str
    name: str
    version: str
    n_items: int
    questions_per_label: dict[str, int]
    source: str
    content_hash: str
    created_at: str
    last_added_at: str
    created: bool
    quality: ValidationResult
    quality_uri: str
