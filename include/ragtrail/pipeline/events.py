"""One event type per Asset: what each announcement of the night carries (its Airflow extras).

The flows chain through these events (``ragtrail.pipeline.night``): a step that announces an Asset
builds its event, the task edge turns it into strict-JSON extras (:meth:`AssetEvent.to_extra`),
and the flow that listens to the Asset reads the newest one back (:meth:`AssetEvent.from_extra`),
which refuses extras that lack a field or carry an unknown one. A null field says why under
``undefined``, as everywhere in ragtrail.

Plain dataclasses on purpose: DAG files import this module at parse time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self

from ragtrail import jsonsafe
from ragtrail.jsonsafe import JsonObject

AssetKey = Literal[
    "corpus",
    "testset",
    "citation_metrics",
    "sufficiency_metrics",
    "evidence_metrics",
    "retrieval_metrics",
    "drift",
]
"""The logical datasets that chain the flows (Airflow Assets in ``plugins/assets.py``)."""


@dataclass(frozen=True, kw_only=True)
class AssetEvent:
    """The extras of one Asset event."""

    asset: ClassVar[AssetKey]
    undefined: dict[str, str] = field(default_factory=dict)

    def to_extra(self) -> JsonObject:
        """Strict-JSON extras (``undefined`` only when a field is null for a reason)."""
        extra = dataclasses.asdict(self)
        if not extra["undefined"]:
            del extra["undefined"]
        return jsonsafe.check_finite(extra, f"{self.asset} event")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The extras every event of this Asset carries (``undefined`` aside)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "undefined")

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> Self:
        """The event the extras describe; ValueError naming missing or unknown fields."""
        names = set(cls.field_names())
        missing = sorted(names - set(extra))
        unknown = sorted(set(extra) - names - {"undefined"})
        if missing or unknown:
            raise ValueError(
                f"{cls.asset} event extras: missing {missing or 'nothing'}, unknown "
                f"{unknown or 'nothing'}"
            )
        return cls(**dict(extra))

    def with_undefined(self, field_name: str, reason: str) -> Self:
        """This event with ``field_name`` null, saying why."""
        return dataclasses.replace(
            self, **{field_name: None}, undefined={**self.undefined, field_name: reason}
        )


@dataclass(frozen=True, kw_only=True)
class CorpusEvent(AssetEvent):
    """A snapshot passed its quality checks. ``changed`` false: the source was unchanged and no
    new snapshot was made. The counts are the ingest's."""

    asset: ClassVar[AssetKey] = "corpus"
    corpus: str
    snapshot_id: str
    changed: bool
    manifest_uri: str | None
    data_docs_uri: str | None
    added: int
    updated: int
    unchanged: int
    removed: int
    quarantined: int
    documents: int
    chunks: int
    embedded: int


COUNT_KEYS = (
    "added",
    "updated",
    "unchanged",
    "removed",
    "quarantined",
    "documents",
    "chunks",
    "embedded",
)
"""The ingest counts a corpus event carries."""


@dataclass(frozen=True, kw_only=True)
class TestsetEvent(AssetEvent):
    """A generated test-set version to evaluate (``qa_set`` null with the reason when
    generation accepted nothing; evaluation then falls back to its configured set)."""

    __test__ = False  # not a pytest test class
    asset: ClassVar[AssetKey] = "testset"
    corpus: str
    snapshot_id: str
    qa_set: str | None
    qa_set_version: str | None
    accepted: dict[str, int]  # accepted items per label
    regenerated: bool


@dataclass(frozen=True, kw_only=True)
class HeadlinesEvent(AssetEvent):
    """Every evaluated set's headline of one evaluation, by set name, and where the night's
    document of them is."""

    run_id: str
    corpus: str
    snapshot_id: str
    sets: dict[str, JsonObject]
    metrics_uri: str


@dataclass(frozen=True, kw_only=True)
class CitationMetricsEvent(HeadlinesEvent):
    """Per set: its run id and citation F1 of the model and of random citations per mixture."""

    asset: ClassVar[AssetKey] = "citation_metrics"


@dataclass(frozen=True, kw_only=True)
class SufficiencyMetricsEvent(HeadlinesEvent):
    """Per rated set: its run id, hallucination rate per setting, the policy's AUC gain."""

    asset: ClassVar[AssetKey] = "sufficiency_metrics"


@dataclass(frozen=True, kw_only=True)
class EvidenceMetricsEvent(HeadlinesEvent):
    """Per evaluated set: its run id, the extractor, correct share per method, the extractor's
    compression and faithfulness."""

    asset: ClassVar[AssetKey] = "evidence_metrics"


@dataclass(frozen=True, kw_only=True)
class RetrievalMetricsEvent(AssetEvent):
    """The night's evaluation was published: the lead set (the generated one, else the first),
    every set's run and version by name, the metrics document and the report's locations."""

    asset: ClassVar[AssetKey] = "retrieval_metrics"
    run_id: str
    corpus: str
    snapshot_id: str
    qa_set: str
    qa_set_version: str
    sets: dict[str, JsonObject]
    metrics_uri: str
    report_uri: str | None
    report_path: str | None
    data_docs_path: str | None
    report_url: str | None
    data_docs_url: str | None


@dataclass(frozen=True, kw_only=True)
class DriftEvent(AssetEvent):
    """A drift decision fired (the retraining trigger): led by the first fired set, with that
    set's drifted rows under ``metrics``, every fired set's decision under ``decisions`` and
    the models whose metrics drifted under ``models`` (:data:`RETRAINABLE`)."""

    asset: ClassVar[AssetKey] = "drift"
    decision_id: str
    run_id: str
    night_run_id: str
    corpus: str
    snapshot_id: str
    qa_set_version: str | None
    baseline_run: str | None
    baseline_kind: str | None
    fired: bool
    metrics: list[JsonObject]
    decisions: dict[str, JsonObject]
    models: list[str]


CITATION_MODEL, EXTRACTOR_MODEL = "citation", "extractor"
RETRAINABLE = (CITATION_MODEL, EXTRACTOR_MODEL)
"""The models the retraining flow can train: the citation answerer and the evidence extractor."""


def model_of_evaluation(evaluation: str) -> str:
    """The model retrained when ``evaluation``'s primary metric drifts: the extractor for the
    evidence evaluation, the citation answerer for every other (retrieval, citations, C/A/H)."""
    return EXTRACTOR_MODEL if evaluation == "evidence" else CITATION_MODEL


EVENT_TYPES: dict[AssetKey, type[AssetEvent]] = {
    cls.asset: cls
    for cls in (
        CorpusEvent,
        TestsetEvent,
        CitationMetricsEvent,
        SufficiencyMetricsEvent,
        EvidenceMetricsEvent,
        RetrievalMetricsEvent,
        DriftEvent,
    )
}
"""The event type of each Asset."""
