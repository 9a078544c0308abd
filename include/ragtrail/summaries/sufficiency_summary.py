"""A QA set's sufficiency evaluation: the raters, Correct / Abstain / Hallucinate by context and
label, self-rated confidence and the selective-generation policy.

:class:`SufficiencySummary` is everything ``runs/<run id>/sufficiency.json`` holds (what the report
and ``ragtrail eval sufficiency|selective`` read); :class:`SufficiencyHeadline` is the compact line
the night carries of a set, and :class:`SufficiencyRun` what the pipeline step hands on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ragtrail.jsonsafe import JsonObject
from ragtrail.summaries.base import Estimate, Figure, Record, WithUndefined, is_none
from ragtrail.summaries.qa_sets import SetRunRecord


class SufficiencyHeadline(Record):
    """What the night's result, the sufficiency-metrics event and the CLI line carry of a set:
    the hallucination rate per answer setting (all labels, both strata), the rater that split
    the strata and the selective policy's gain in area under the coverage curve."""

    run_id: str
    answerer: str
    primary_rater: str
    hallucination: dict[str, Figure]
    auc_gain: Figure | None


class SufficiencyRun(SufficiencyHeadline):
    """What the sufficiency step hands on: the set's headline and where its full summary is."""

    sufficiency_uri: str


# ----------------------------------------------------------------------------- figures


class Proportion(WithUndefined, Figure):
    """A share with its Wilson interval over ``n`` items (undefined parts null, with reasons)."""

    n: int


class AggregateRow(Estimate):
    """One aggregate of an evaluation (the metrics history's row): metric, facets, value, CI, n."""

    metric: str
    facets: dict[str, str | int | float | bool | None]


class Agreement(Figure):
    """How a judge's calibration reads in a table: its status (or why it has none), the
    agreement metric with its interval and n, and the gate's mode. Read from the calibration
    blob (:meth:`of`); never stored."""

    judge: str | None
    status: str | None
    reason: str | None
    metric: str | None
    mode: str | None

    @classmethod
    def of(cls, calibration: Mapping[str, Any], gate: Mapping[str, Any] | None) -> Agreement:
        """Read a calibration entry (``calibrate_sufficiency_raters`` /
        ``calibrate_correctness_if_missing``) and its gate decision."""
        return cls(
            value=calibration.get("value"),
            ci_low=calibration.get("ci_low"),
            ci_high=calibration.get("ci_high"),
            n=calibration.get("n"),
            ci_method=calibration.get("ci_method"),
            judge=calibration.get("judge"),
            status=calibration.get("status"),
            reason=calibration.get("reason"),
            metric=calibration.get("metric"),
            mode=(gate or {}).get("mode"),
        )


# ------------------------------------------------------------------------------ raters


class RaterSetting(Record):
    """One rater on one rated setting: contexts rated, failed and truncated verdicts, and the
    share of the others it called sufficient."""

    n: int
    failed: int
    truncated: int
    share: Proportion


class RaterView(Record):
    """One sufficiency rater: its identity, calibration and gate decision, and its verdicts per
    rated setting.

    ``calibration`` (status, metric, value, CI, n; the reason when not calibrated) and ``gate``
    (the gate decision) are passed through as the judge calibration code writes them; read them
    with :attr:`agreement`."""

    name: str
    judge: str
    approximate: bool
    description: str
    calibration: JsonObject
    gate: JsonObject | None
    per_setting: dict[str, RaterSetting]

    @property
    def agreement(self) -> Agreement:
        return Agreement.of(self.calibration, self.gate)


class PrimaryRater(Record):
    """The rater whose verdicts split C/A/H into sufficient / insufficient, whether it gates,
    and why it was chosen."""

    name: str
    gates: bool
    reason: str


# ------------------------------------------------------------------------------- C/A/H


class CAHTableRow(Record):
    """One cell of the C/A/H table (a setting x sufficiency stratum x label, ``all`` for every
    value): answers, scored and not, outcome counts and each outcome's rate."""

    setting: str
    sufficiency: str
    label: str
    n: int
    n_scored: int
    n_unscored: int
    unscored_reasons: dict[str, int]
    counts: dict[str, int]
    correct: Proportion
    abstain: Proportion
    hallucinate: Proportion


class CAHCounts(Record):
    """Answers given and scored, why the others were not, and what decided the scored ones."""

    answers: int
    scored: int
    unscored: dict[str, int]
    decided_by: dict[str, int]


class CAHView(Record):
    """Correct / Abstain / Hallucinate: the correctness judge, the table, every aggregate of the
    metrics history and the counts.

    ``correctness`` is the correctness judge's calibration entry with its gate decision, passed
    through as written; read it with :attr:`correctness_agreement`."""

    correctness: JsonObject
    table: list[CAHTableRow]
    aggregates: list[AggregateRow]
    counts: CAHCounts

    @property
    def correctness_agreement(self) -> Agreement:
        return Agreement.of(self.correctness, self.correctness.get("gate"))


# ---------------------------------------------------------------------------- selective


class CurvePointRow(Record):
    """A point of a coverage curve: keeping answers scored at least ``threshold`` keeps
    ``n_kept`` of them (``coverage``), ``accuracy`` of which are correct."""

    coverage: float
    accuracy: float
    threshold: float
    n_kept: int


class ThresholdPoint(Record):
    """The policy's operating point for the target coverage (``value`` is the threshold)."""

    target_coverage: float
    coverage: float
    accuracy: float
    threshold: float
    n_kept: int
    value: float


class SelectiveAuc(Record):
    """The areas under the coverage curve of confidence alone and of sufficiency + confidence,
    and their difference (each null when not computed)."""

    confidence: AggregateRow | None
    sufficiency_confidence: AggregateRow | None
    gain: AggregateRow | None


class SelectiveCurves(Record):
    """The coverage curve of each ranking that could be drawn (a missing one is left out)."""

    confidence: list[CurvePointRow] | None = Field(None, exclude_if=is_none)
    sufficiency_confidence: list[CurvePointRow] | None = Field(None, exclude_if=is_none)

    @property
    def empty(self) -> bool:
        return not self.confidence and not self.sufficiency_confidence


class SelectiveView(Record):
    """The selective-generation policy as the report reads it: fitted or why not, its features,
    the split, failed confidences, the areas with their difference, the curves and the operating
    point; the full policy document is at ``policy_uri``.

    ``policy`` (the fitted logistic regression's parameters, as the policy itself writes them)
    is passed through, and left out when no policy was fitted."""

    status: str
    reason: str
    features: list[str]
    n_rows: int
    n_train: int
    n_test: int
    excluded: int
    confidence_failed: dict[str, int]
    confidence_source: str | None
    auc: SelectiveAuc
    curves: SelectiveCurves
    threshold: ThresholdPoint | None
    policy_uri: str
    undefined_reasons: dict[str, str]
    policy: JsonObject | None = Field(None, exclude_if=is_none)


# ----------------------------------------------------------------------------- queries


class QueryRow(Record):
    """One question answered in one setting: its context and stratum, every rater's verdict, the
    answer and its outcome (null: not scored, with the reason), and its confidences. ``ratings``
    holds each rater's verdict value (a category; null when the rater failed)."""

    qid: str
    label: str
    setting: str
    question: str
    passages: list[str]
    sufficiency: str
    ratings: dict[str, str | int | float | None]
    gold: str
    answer: str
    abstained: bool
    error: str | None
    raw: str
    outcome: str | None
    decided_by: str | None
    unscored_reason: str | None
    p_true: float | None
    p_correct: float | None
    policy_score: float | None


# ----------------------------------------------------------------------------- summary


class SufficiencySummary(SetRunRecord):
    """A set's sufficiency evaluation as stored with its run (``runs/<run id>/sufficiency.json``):
    the run and QA set, the models, the sampled items and settings, the raters and the primary
    one, the C/A/H view, the selective policy (null with the reason under ``undefined`` when not
    requested), every (question, setting) row, and the seconds and model calls per stage."""

    seed: int
    answerer: str
    judge_model: str
    text_weight: float
    text_weight_source: str
    items: int
    settings: list[str]
    retrieval_k: int
    raters: list[RaterView]
    primary_rater: PrimaryRater
    cah: CAHView
    selective: SelectiveView | None
    queries: list[QueryRow]
    seconds: dict[str, float]
    model_calls: dict[str, int]
