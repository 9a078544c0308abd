"""A drift decision and what is read of it: its evidence (stored with the decision), its headline
(the night's result, the drift event, the CLI line), the history of the watched cells (the report's
plot) and the night's drift check.

The evidence keeps the shape the decisions table has always stored: nested records (a row, the
corpus changes, the QA set's retirement) always write their ``undefined`` mapping, even when empty,
while the evidence itself leaves it out when nothing is undefined.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_serializer, model_serializer

from ragtrail.evaluation_records import FacetValue
from ragtrail.summaries.base import Record, is_none

Direction = Literal["worse", "better", "unchanged"]


def _empty(value: dict[str, str]) -> bool:
    return not value


class DriftRowEvidence(Record):
    """One primary metric in one facet cell: baseline (A), current (B), the paired difference
    with its CI and p-values, the threshold, and whether the cell was tested and drifted."""

    evaluation: str
    metric: str
    facets: dict[str, FacetValue]
    greater_is_better: bool
    n: int
    baseline: float | None
    current: float | None
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_holm: float | None
    threshold: float
    direction: Direction | None
    tested: bool
    drifted: bool
    undefined: dict[str, str] = Field(default_factory=dict)
    ci_method: str | None = Field(None, exclude_if=is_none)
    mde: float | None = Field(None, exclude_if=is_none)
    needed_n: int | None = Field(None, exclude_if=is_none)

    @property
    def detect_text(self) -> str:
        """What the check could see: "could not have detected a drop smaller than X" (or why
        that is unknown); with the n that would detect a drop of the threshold."""
        if self.mde is None:
            return f"smallest detectable drop unknown: {self.undefined.get('mde', 'not computed')}"
        text = f"could not have detected a drop smaller than {self.mde:.3f} (n={self.n}, 80% power)"
        if self.needed_n is not None and self.mde > self.threshold:
            text += f"; a drop of {self.threshold:g} needs n >= {self.needed_n}"
        return text

    @property
    def facets_text(self) -> str:
        """``k=v, ...`` (empty when the cell has no facets)."""
        return ", ".join(f"{k}={v}" for k, v in self.facets.items())

    @property
    def name(self) -> str:
        """``evaluation:metric [k=v, ...]``, how the event and the CLI name the row."""
        facets = self.facets_text
        return f"{self.evaluation}:{self.metric}" + (f" [{facets}]" if facets else "")


class CorpusChanges(Record):
    """Documents added, updated and removed since the baseline's snapshot, with their shares of
    the baseline's document count (null with the reason when it had none)."""

    baseline_snapshot: str
    current_snapshot: str
    n_baseline: int
    n_current: int
    added: int
    updated: int
    removed: int
    unchanged: int
    added_share: float | None
    updated_share: float | None
    removed_share: float | None
    changed_share: float | None
    undefined: dict[str, str] = Field(default_factory=dict)


class QASetRetirement(Record):
    """How many items of the run's QA-set version the corpus changes retired (``retired`` null
    with the reason when that cannot be known).

    ``n_retired`` is written as null for a QA set file and left out when a golden version's run
    records no snapshot; the record writes it exactly when it was given.
    """

    version: str | None
    undefined: dict[str, str] = Field(default_factory=dict)
    kind: Literal["testset", "golden", "file"]
    n_items: int | None
    retired: bool | None
    n_retired: int | None = None
    reasons: dict[str, int] | None = Field(None, exclude_if=is_none)

    @model_serializer(mode="wrap")
    def _n_retired_when_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if "n_retired" not in self.model_fields_set:
            data.pop("n_retired", None)
        return data


class PrimaryMetricUsed(Record):
    """The metric watched for one evaluation, and which way is good."""

    metric: str
    greater_is_better: bool


class DriftPolicyUsed(Record):
    """The drift settings a decision was made with, and the primary metric of each evaluation
    (null when there was no baseline to compare with)."""

    enabled: bool
    alpha: float
    threshold: float
    thresholds: dict[str, float]
    min_n: int
    exclude_facets: dict[str, list[str]]
    n_resamples: int
    seed: int
    primary_metrics: dict[str, PrimaryMetricUsed] | None


class BaselineUsed(Record):
    """The run a decision compared with, why that one (pinned, champion or first), and when it
    started (ISO 8601). ``qa_set_version`` is set when the baseline ran on a predecessor of the
    checked run's generated version (then the two are compared on the ``paired`` items both
    versions hold)."""

    run_id: str
    kind: Literal["pinned", "champion", "first"]
    snapshot_id: str | None
    started_at: str
    qa_set_version: str | None = Field(None, exclude_if=is_none)
    paired: int | None = Field(None, exclude_if=is_none)


class DriftEvidence(Record):
    """Everything a decision rests on: the policy, the QA set's retirement, the baseline, the
    corpus changes since its snapshot and every primary-metric row (``drifted`` names the rows
    that drifted, ``n_tested`` counts the tested ones). A null field says why under
    ``undefined`` (left out when nothing is undefined)."""

    fires_on: str
    policy: DriftPolicyUsed
    qa_set: QASetRetirement
    undefined: dict[str, str] = Field(default_factory=dict, exclude_if=_empty)
    baseline: BaselineUsed | None = Field(None, exclude_if=is_none)
    corpus_drift: CorpusChanges | None
    rows: list[DriftRowEvidence]
    drifted: list[str]
    n_tested: int

    def reason(self, field: str, default: str = "undefined") -> str:
        """Why ``field`` is null (``default`` when no reason was recorded)."""
        return self.undefined.get(field, default)


class DriftDecision(Record):
    """One stored drift decision (a ``drift_decisions`` row); ``status`` is ``checked``,
    ``no_baseline`` or ``incomparable``."""

    decision_id: str
    run_id: str
    corpus: str | None
    snapshot_id: str | None
    qa_set_version: str | None
    baseline_run_id: str | None
    baseline_kind: str | None
    status: str
    fired: bool
    evidence: DriftEvidence
    created_at: datetime

    @field_serializer("created_at")
    def _iso(self, value: datetime) -> str:
        return value.isoformat()


class DriftedCell(Record):
    """A drifted row as the headline carries it: the cell, both means, the difference with its
    CI, the Holm-corrected p-value and the threshold it crossed."""

    evaluation: str
    metric: str
    facets: dict[str, FacetValue]
    baseline: float | None
    current: float | None
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    p_holm: float | None
    threshold: float

    @classmethod
    def of(cls, row: DriftRowEvidence) -> DriftedCell:
        return cls(**{name: getattr(row, name) for name in cls.model_fields})


class DriftHeadline(Record):
    """A decision's headline: what the night's result, the drift event and the CLI line carry."""

    decision_id: str
    run_id: str
    qa_set_version: str | None
    baseline_run: str | None
    baseline_kind: str | None
    status: str
    fired: bool
    n_tested: int
    drifted: list[DriftedCell]
    largest_mde: float | None = Field(None, exclude_if=is_none)
    baseline_version: str | None = Field(None, exclude_if=is_none)
    """Set when the baseline ran on a predecessor version (then ``paired`` items were compared)."""
    paired: int | None = Field(None, exclude_if=is_none)

    @classmethod
    def of(cls, decision: DriftDecision) -> DriftHeadline:
        evidence = decision.evidence
        mdes = [row.mde for row in evidence.rows if row.tested and row.mde is not None]
        used = evidence.baseline
        return cls(
            decision_id=decision.decision_id,
            run_id=decision.run_id,
            qa_set_version=decision.qa_set_version,
            baseline_run=decision.baseline_run_id,
            baseline_kind=decision.baseline_kind,
            status=decision.status,
            fired=decision.fired,
            n_tested=evidence.n_tested,
            drifted=[DriftedCell.of(row) for row in evidence.rows if row.drifted],
            largest_mde=max(mdes) if mdes else None,
            baseline_version=used.qa_set_version if used else None,
            paired=used.paired if used else None,
        )


class HistoryPoint(Record):
    """One run's mean of a watched cell with its 95% CI and the CI's method (null bounds: no
    interval is valid at that n)."""

    run_id: str
    value: float
    ci_low: float | None
    ci_high: float | None
    ci_method: str | None = Field(None, exclude_if=is_none)
    n: int | None = Field(None, exclude_if=is_none)


class DriftView(Record):
    """What the report shows of a set's drift: the newest decision and, per watched series
    (``evaluation:metric [facets]``), its history on the set's QA-set version, oldest first."""

    decision: DriftDecision
    history: dict[str, list[HistoryPoint]]


class DriftCheck(Record):
    """The night's drift check: every set's decision headline by set name and whether any fired;
    or, when drift checks are off, no set and the reason under ``skipped``."""

    run_id: str
    snapshot_id: str | None = Field(None, exclude_if=is_none)
    fired: bool
    sets: dict[str, DriftHeadline]
    skipped: str | None = Field(None, exclude_if=is_none)

    @property
    def fired_sets(self) -> dict[str, DriftHeadline]:
        """The sets whose decision fired, in the night's order."""
        return {name: headline for name, headline in self.sets.items() if headline.fired}
