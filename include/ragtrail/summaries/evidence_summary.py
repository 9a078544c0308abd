"""A QA set's evidence-extractor evaluation (SEER, METHODS §10): compression, faithfulness,
helpfulness, conciseness and end-to-end correctness per method and noise level.

:class:`EvidenceSummary` is everything ``runs/<run id>/evidence.json`` holds (what the report and
``ragtrail eval evidence`` read); :class:`EvidenceHeadline` is the line the night carries of a
set, and :class:`EvidenceRun` what the pipeline step hands on.

Methods (the facet ``method``): ``extractor`` (the extractor in service), ``base`` (its base
model zero-shot, when the one in service is a trained version), ``extractive`` (the model-free
baseline: the sentences closest to the question, up to the extractor's token budget), ``full``
(the retrieved passages as they are) and ``none`` (no context). The facet ``noise`` is the
number of irrelevant passages added per retrieved one.
"""

from __future__ import annotations

from pydantic import Field

from ragtrail.summaries.base import Figure, Record, WithUndefined, is_none
from ragtrail.summaries.budget_summary import StepBudgetNote
from ragtrail.summaries.qa_sets import SampleSizing
from ragtrail.summaries.sufficiency_summary import AggregateRow


class EvidenceHeadline(Record):
    """What the night's result, the CLI line and the report's overview carry of a set: the
    share answered correctly per method without noise, and the extractor's compression and
    faithfulness without noise."""

    run_id: str
    extractor: str
    items: int
    correct: dict[str, Figure]
    compression: Figure | None
    faithfulness: Figure | None


class EvidenceRun(EvidenceHeadline):
    """What the evidence step hands on: the headline and where the full summary is stored."""

    evidence_uri: str


class JudgeUsed(Record):
    """A judge behind a metric of this evaluation: what it decides, its identity, and whether
    its measured agreement with human references lets it gate (else it only advises)."""

    role: str
    judge: str
    gates: bool
    reason: str
    metric: str | None = None
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None
    ci_method: str | None = Field(None, exclude_if=is_none)


class EvidenceQueryRow(WithUndefined):
    """One question under one method and noise level: the evidence, its scores and the answer
    given from it (null scores say why under ``undefined``)."""

    qid: str
    label: str
    method: str
    noise: float
    passages: int
    evidence: str | None
    evidence_tokens: int | None
    passage_tokens: int
    compression: float | None
    faithfulness: float | None
    silver_faithfulness: float | None
    helpfulness: float | None
    conciseness: float | None
    answer: str | None
    outcome: str | None
    correct: bool | None


class EvidenceSummary(WithUndefined):
    """The whole evaluation of one QA set (see the module docstring)."""

    run_id: str
    set_name: str | None
    corpus: str
    snapshot_id: str
    qa_set: str
    qa_set_version: str
    qa_set_name: str | None
    sample_size: SampleSizing | None = Field(None, exclude_if=is_none)
    seed: int
    extractor: str
    extractor_source: str
    base: str | None
    answerer: str
    scorer: str
    full_answer_model: str
    text_weight: float
    text_weight_source: str
    retrieval_k: int
    noise_ratios: list[float]
    items: int
    judges: list[JudgeUsed]
    aggregates: list[AggregateRow]
    queries: list[EvidenceQueryRow]
    failures: dict[str, int] = Field(default_factory=dict)
    seconds: dict[str, float] = Field(default_factory=dict)
    model_calls: dict[str, int] = Field(default_factory=dict)
    budget: StepBudgetNote | None = Field(None, exclude_if=is_none)

    def aggregate(self, metric: str, method: str, noise: float = 0.0) -> AggregateRow | None:
        """The aggregate of ``metric`` for ``method`` at ``noise`` (None when not computed)."""
        for row in self.aggregates:
            if (
                row.metric == metric
                and row.facets.get("method") == method
                and float(row.facets.get("noise") or 0.0) == float(noise)
            ):
                return row
        return None
