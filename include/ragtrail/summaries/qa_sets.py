"""QA sets as steps hand them on: the sets a night evaluates (as the plan gives them to the mapped
evaluation steps) and a golden set's registration."""

from __future__ import annotations

from pydantic import Field, field_serializer, field_validator

from ragtrail.records import QASetRef, SetKind
from ragtrail.summaries.base import Record, WithUndefined, is_none
from ragtrail.summaries.budget_summary import StepBudgetNote
from ragtrail.summaries.quality_summary import ValidationResult


class PlannedSet(Record):
    """One QA set of a night: its name in the night, where it comes from, the reference its
    items are loaded by, and the stored run it is evaluated as (``<night run id>.<name>``).

    ``reused``: a golden set that the golden sets' evaluation of the same snapshot, with the same
    settings, has already evaluated (:func:`~ragtrail.pipeline.evaluation_sets.handed_over_runs`);
    ``run_id`` is that evaluation's run, which the night's per-set steps skip and its drift check
    and report read."""

    name: str
    kind: SetKind
    qa_set: QASetRef
    run_id: str
    reused: bool = False

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


class GoldenRuns(Record):
    """The golden sets' runs that the evaluation of a corpus event makes (when it starts) or
    made (when it hands them over to the night's evaluation of the same snapshot):
    ``fingerprint`` is what their results depend on besides the snapshot and the set versions
    (the text weights and every setting); ``at``: when this was written (UTC, ISO 8601)."""

    corpus: str
    snapshot_id: str
    fingerprint: str
    sets: list[PlannedSet]
    at: str | None = None


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

    def line(self) -> str:
        """One line for logs: ``golden set <name>: <version> (<n> questions, new version)``."""
        state = "new version" if self.created else "unchanged"
        return f"golden set {self.name}: {self.version} ({self.n_items} questions, {state})"


class SampleSizing(Record):
    """How a step chose its n from ``target_mde`` (:mod:`ragtrail.pipeline.sample_size`): the n
    needed, the spread assumed and its source, what bound n, and the MDE left at n."""

    n: int
    target_mde: float
    needed_n: int
    sd: float
    sd_source: str
    bound_by: str
    mde: float | None

    @property
    def text(self) -> str:
        """One line for the report and the CLI."""
        mde = "unknown" if self.mde is None else f"{self.mde:.3f}"
        head = f"n={self.n} for a target MDE of {self.target_mde:g} (needs n={self.needed_n})"
        if self.bound_by != "target":
            head += f"; {self.bound_by.replace('_', ' ')} bounded n: the MDE at n is {mde}"
        return f"{head}; spread {self.sd:.3f} from {self.sd_source}"


class SetRunRecord(WithUndefined):
    """What every answer-side summary of a set's run starts with: the run, the set's name in the
    night (None for a lone run), the corpus snapshot and the QA set it evaluated."""

    run_id: str
    set_name: str | None
    corpus: str
    snapshot_id: str
    qa_set: str
    qa_set_version: str
    qa_set_name: str | None
    sample_size: SampleSizing | None = Field(None, exclude_if=is_none)
    budget: StepBudgetNote | None = Field(None, exclude_if=is_none)
