"""The drift decision: does a run's primary metric fall measurably below its baseline's?

Input is the paired comparison of the baseline run (A) and the current run (B) that
``ragtrail runs compare`` computes (:func:`ragtrail.evaluate.comparison.run_compare.compare_runs`), one row
per (evaluation, metric, facet set). Only each evaluation's *primary* metric is considered (the
evaluator registry's ``primary_metric`` and ``greater_is_better``). A row is *tested* when it has
at least ``min_n`` paired questions and a p-value; Holm's correction then runs across every tested
row of the decision (all evaluations and facets together, not per metric as ``runs compare``
does), because one decision is one family of tests. A tested row *drifts* when

- the metric got worse by more than its practical threshold (``worsening > threshold``, with
  ``worsening = A - B`` when greater is better and ``B - A`` otherwise, in the metric's units), and
- its Holm-corrected p-value is below ``alpha``.

The decision fires when any row drifts. Improvements never fire, however significant. Every row
also says what it could have seen: the minimum detectable effect at its n (80% power, the
policy's ``alpha``, the observed spread of the differences) and the n a drop of the threshold
would need, so "no drift" is never read as "no drop". Pure: no database, no I/O; undefined
numbers are None with a reason, never NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ragtrail.evaluate.comparison.paired import holm
from ragtrail.evaluate.comparison.run_compare import FacetComparison
from ragtrail.evaluation_records import FacetValue
from ragtrail.summaries.drift_summary import Direction, DriftRowEvidence


@dataclass(frozen=True)
class PrimaryMetric:
    """The metric a drift check watches for one evaluation, and which way is good."""

    evaluation: str
    metric: str
    greater_is_better: bool


@dataclass(frozen=True)
class DriftPolicy:
    """When a worse primary metric counts as drift (see the module docstring)."""

    alpha: float = 0.05
    threshold: float = 0.05
    thresholds: Mapping[str, float] = field(default_factory=dict)
    min_n: int = 5
    exclude_facets: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 < self.alpha < 1.0:
            problems.append(f"alpha must lie in (0, 1), got {self.alpha}")
        for name, value in {"threshold": self.threshold, **self.thresholds}.items():
            if not 0.0 <= value < float("inf"):
                problems.append(f"threshold {name!r} must be finite and >= 0, got {value}")
        if self.min_n < 1:
            problems.append(f"min_n must be >= 1, got {self.min_n}")
        if problems:
            raise ValueError("invalid drift policy: " + "; ".join(problems))

    def threshold_for(self, evaluation: str, metric: str) -> float:
        """``thresholds['<evaluation>:<metric>']``, else ``thresholds[metric]``, else the default."""
        for key in (f"{evaluation}:{metric}", metric):
            if key in self.thresholds:
                return float(self.thresholds[key])
        return self.threshold

    def excludes(self, facets: Mapping[str, FacetValue]) -> bool:
        return any(
            str(facets.get(k)) in {str(v) for v in vs} for k, vs in self.exclude_facets.items()
        )


@dataclass(frozen=True)
class DriftAssessment:
    """All primary-metric rows of one decision and whether any drifted."""

    rows: tuple[DriftRowEvidence, ...]
    alpha: float
    n_tested: int

    @property
    def fired(self) -> bool:
        return any(row.drifted for row in self.rows)

    @property
    def drifted(self) -> tuple[DriftRowEvidence, ...]:
        return tuple(row for row in self.rows if row.drifted)


def assess_drift(
    comparisons: Sequence[FacetComparison],
    primaries: Mapping[str, PrimaryMetric],
    policy: DriftPolicy,
) -> DriftAssessment:
    """Apply ``policy`` to the primary-metric rows of ``comparisons`` (``primaries`` by
    evaluation name; evaluations without one are not watched)."""
    candidates: list[tuple[FacetComparison, PrimaryMetric, str | None]] = []
    for comp in comparisons:
        primary = primaries.get(comp.evaluation)
        if primary is None or comp.metric != primary.metric or policy.excludes(comp.facets):
            continue
        s = comp.stats
        reason = None
        if s.p_value is None:
            reason = s.undefined.get("p_value", "no p-value")
        elif s.n < policy.min_n:
            reason = f"only {s.n} paired questions (min_n is {policy.min_n})"
        candidates.append((comp, primary, reason))
    adjusted = iter(holm([c.stats.p_value for c, _, reason in candidates if reason is None]))
    rows = []
    for comp, primary, reason in candidates:
        p_holm = next(adjusted) if reason is None else None
        rows.append(_row(comp, primary, policy, p_holm, reason))
    return DriftAssessment(
        rows=tuple(rows), alpha=policy.alpha, n_tested=sum(1 for r in rows if r.tested)
    )


def worsening(diff: float, greater_is_better: bool) -> float:
    """How much worse the current run is (positive) or better (negative), in metric units."""
    return -diff if greater_is_better else diff


def _row(
    comp: FacetComparison,
    primary: PrimaryMetric,
    policy: DriftPolicy,
    p_holm: float | None,
    untested: str | None,
) -> DriftRowEvidence:
    s = comp.stats
    threshold = policy.threshold_for(comp.evaluation, comp.metric)
    undefined = dict(s.undefined)
    direction: Direction | None = None
    if s.diff is not None:
        worse = worsening(s.diff, primary.greater_is_better)
        direction = "worse" if worse > 0 else "better" if worse < 0 else "unchanged"
    else:
        undefined["direction"] = s.undefined.get("diff", "no difference")
    detect = s.detectable.at(alpha=policy.alpha, target=threshold)
    if detect.mde is None:
        undefined["mde"] = detect.reason
    drifted = False
    if untested is not None:
        undefined["p_holm"] = untested
    else:
        assert s.diff is not None and p_holm is not None
        drifted = worsening(s.diff, primary.greater_is_better) > threshold and p_holm < policy.alpha
    return DriftRowEvidence(
        evaluation=comp.evaluation,
        metric=comp.metric,
        facets=dict(comp.facets),
        greater_is_better=primary.greater_is_better,
        n=s.n,
        baseline=s.mean_a,
        current=s.mean_b,
        diff=s.diff,
        ci_low=s.ci_low,
        ci_high=s.ci_high,
        p_value=s.p_value,
        p_holm=p_holm,
        threshold=threshold,
        direction=direction,
        tested=untested is None,
        drifted=drifted,
        undefined=undefined,
        ci_method=s.ci_method,
        mde=detect.mde,
        needed_n=detect.needed_n,
    )
