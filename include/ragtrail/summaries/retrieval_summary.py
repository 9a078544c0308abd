"""The retrieval evaluation of one QA set (``runs/<run>/metrics.json``) and its change since the
previous run on the same QA-set version."""

from __future__ import annotations

from pydantic import Field

from ragtrail.jsonsafe import JsonObject
from ragtrail.summaries.base import Record, WithUndefined, is_none


class BestRow(WithUndefined):
    """One label's best strategy: dense-only and lexical-only Recall@k, the best weight and its
    recall with its CI (and the CI's method), and the gap to the best label."""

    label: str
    n_questions: int
    dense: float | None
    lexical: float | None
    best_recall: float | None
    best_weight: float | None
    ci_low: float | None
    ci_high: float | None
    gap_to_best: float | None
    ci_method: str | None = Field(None, exclude_if=is_none)


class WeightedFigure(WithUndefined):
    """One metric at one text weight over some questions, with its CI and the CI's method."""

    text_weight: float
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n_questions: int
    ci_method: str | None = Field(None, exclude_if=is_none)


class MetricRow(WeightedFigure):
    """One metric of one label at one text weight."""

    label: str


class FacetRow(WeightedFigure):
    """The primary metric at the set's best inclusive weight for one facet value (a language)."""

    facet: str


class EvaluatorInfo(Record):
    """The evaluator that produced the numbers: its config and the metric a gate watches."""

    evaluator: str
    config: JsonObject
    primary_metric: str
    greater_is_better: bool


class RetrievalSummary(Record):
    """The text-weight scan of one QA set, as stored with its run."""

    corpus: str
    snapshot_id: str
    qa_set: str
    qa_set_version: str
    qa_set_name: str | None
    text_weights: list[float]
    run_id: str
    relevance_level: str
    n_questions: int
    questions_per_label: dict[str, int]
    backends: dict[str, str]
    primary_metric: str
    evaluation: EvaluatorInfo
    best: list[BestRow]
    metrics: list[MetricRow]
    languages: list[FacetRow] = Field(default_factory=list)
    """Per question language (its ground documents' language, else the question's own); empty in
    runs stored before languages were faceted."""

    def best_of(self, label: str) -> BestRow | None:
        return next((row for row in self.best if row.label == label), None)


class RetrievalRun(Record):
    """What the retrieval step hands on: the stored run, where its summary is, and the best
    strategy per label."""

    run_id: str
    metrics_uri: str
    snapshot_id: str
    qa_set_version: str
    n_questions: int
    best: list[BestRow]


class ChangeRow(WithUndefined):
    """One label's primary metric at this run's best weight against the previous run: previous
    (A), this run (B), B - A with its paired CI (and method), the Holm-adjusted p-value and the
    minimum detectable effect at this n."""

    label: str
    text_weight: float | None
    n: int
    mean_a: float | None = None
    mean_b: float | None = None
    diff: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_holm: float | None = None
    ci_method: str | None = Field(None, exclude_if=is_none)
    mde: float | None = Field(None, exclude_if=is_none)


class Change(WithUndefined):
    """A set's change since the previous run on its QA-set version (``previous_run`` null with
    the reason when there is none; ``rows`` empty with the reason when the runs cannot be
    paired)."""

    run: str
    metric: str
    n_resamples: int
    seed: int
    previous_run: str | None
    previous_snapshot: str | None = Field(None, exclude_if=is_none)
    rows: list[ChangeRow] | None = Field(None, exclude_if=is_none)
