"""A night's evaluation document (``runs/<night>/metrics.json``): every QA set's retrieval summary
with its change since the previous run and its citation, sufficiency and evidence headlines."""

from __future__ import annotations

from ragtrail.records import SetKind
from ragtrail.summaries.base import Record
from ragtrail.summaries.citation_summary import CitationHeadline
from ragtrail.summaries.evidence_summary import EvidenceHeadline
from ragtrail.summaries.retrieval_summary import BestRow, Change, RetrievalSummary
from ragtrail.summaries.sufficiency_summary import SufficiencyHeadline


class PublishedSet(RetrievalSummary):
    """One set of the night as published: its retrieval summary plus its name and kind, its
    change since the previous run, and its citation, sufficiency and evidence headlines (None
    when the set was not evaluated for them)."""

    name: str | None
    kind: SetKind | None
    change: Change | None
    citations: CitationHeadline | None
    sufficiency: SufficiencyHeadline | None
    evidence: EvidenceHeadline | None = None


class SetResult(Record):
    """What the night's result and ``ragtrail nightly --json`` carry per set."""

    run_id: str
    kind: SetKind | None
    qa_set: str
    qa_set_version: str
    n_questions: int
    questions_per_label: dict[str, int]
    best: list[BestRow]
    change: Change | None
    citations: CitationHeadline | None
    sufficiency: SufficiencyHeadline | None
    evidence: EvidenceHeadline | None = None

    @classmethod
    def of(cls, published: PublishedSet) -> SetResult:
        return cls(**{name: getattr(published, name) for name in cls.model_fields})


class NightDocument(Record):
    """The night's ``metrics.json``: one entry per evaluated set, by name."""

    run_id: str
    corpus: str
    snapshot_id: str
    backends: dict[str, str]
    primary_metric: str
    sets: dict[str, PublishedSet]


class ReportLocation(Record):
    """Where a published report is, and whether every fail-severity check passed."""

    report_path: str
    report_uri: str
    data_docs_path: str
    success: bool


class PublishedReport(ReportLocation):
    """A published report with each named set's result."""

    sets: dict[str, SetResult]


class NightReport(ReportLocation):
    """The night's published evaluation: its report, its ``metrics.json`` and the report's link
    (None when ``RAGTRAIL_REPORTS_URL`` is not set)."""

    run_id: str
    metrics_uri: str
    report_url: str | None


class NightPublication(NightReport):
    """What the night's publishing step hands on: the report and every set's result."""

    sets: dict[str, SetResult]

    def report(self) -> NightReport:
        return NightReport(**{name: getattr(self, name) for name in NightReport.model_fields})
