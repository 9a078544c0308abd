"""Selective generation: what abstaining buys, with and without the sufficiency label (METHODS §9).

Each row is one answer (a question in one answer setting) with its features — the binary
sufficiency label ``sufficient`` and the self-rated confidences ``p_true`` / ``p_correct`` — and
its outcome: correct, hallucinated, or neither (an abstention). The policy lives in
:mod:`ragtrail.evaluate.sufficiency.selective_policy`, the curve in :mod:`ragtrail.evaluate.sufficiency.selective_curve`
(both re-exported here); this module compares and packages them:

* :func:`compare_selective` sets the policy with sufficiency (b) against confidence alone (a: a
  policy on the confidence features, or one raw feature when that policy is undefined) on the
  same held-out rows: both curves and areas, the gain AUC(b) - AUC(a), and 95% percentile
  BCa bootstrap intervals that resample test questions (none below 20 questions);
* :func:`evaluate_selective` runs split, both fits and the comparison in one go
  (:class:`SelectiveRun`, the stored artifact);
* the ``selective`` evaluator wraps it in the evaluator contract (primary metric ``auc_gain``).

Everything that leaves through ``as_dict`` is strict JSON; undefined numbers are null with a
reason (:mod:`ragtrail.jsonsafe`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ragtrail.evaluate.contract import (
    Aggregate,
    BaseEvaluator,
    EvaluationResult,
    QueryValue,
    register_evaluator,
)
from ragtrail.evaluate.sufficiency.selective_curve import (
    CurvePoint,
    area_under_curve,
    selective_curve,
    threshold_for_coverage,
)
from ragtrail.evaluate.sufficiency.selective_policy import (
    CONFIDENCE_FEATURES,
    P_CORRECT,
    P_TRUE,
    SUFFICIENT,
    PolicyUndefinedError,
    RawFeature,
    Scorer,
    SelectivePolicy,
    SelectiveRow,
    fit_policy,
    scorer_source,
    split_by_question,
)
from ragtrail.jsonsafe import JsonObject, finite_or_undefined, mark_undefined
from ragtrail.stats.intervals import (
    BOOTSTRAP_MIN_N,
    NO_BOOTSTRAP,
    Interval,
    bca_interval,
    no_interval,
)

__all__ = [
    "CONFIDENCE_FEATURES",
    "CONFIDENCE_ONLY",
    "P_CORRECT",
    "P_TRUE",
    "SUFFICIENT",
    "WITH_SUFFICIENCY",
    "CurvePoint",
    "CurveSummary",
    "PolicyUndefinedError",
    "RawFeature",
    "Scorer",
    "SelectiveComparison",
    "SelectiveEvalConfig",
    "SelectiveEvaluator",
    "SelectiveInputs",
    "SelectivePolicy",
    "SelectiveRow",
    "SelectiveRun",
    "area_under_curve",
    "compare_selective",
    "evaluate_selective",
    "fit_policy",
    "selective_curve",
    "split_by_question",
    "threshold_for_coverage",
]

WITH_SUFFICIENCY = "sufficiency+confidence"
CONFIDENCE_ONLY = "confidence"


# ------------------------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class CurveSummary:
    """One scorer's curve on the compared rows, its area and the point for the target coverage."""

    source: str
    features: tuple[str, ...]
    curve: tuple[CurvePoint, ...]
    auc: float
    at_target: CurvePoint

    def as_dict(self) -> JsonObject:
        return {
            "source": self.source,
            "features": list(self.features),
            "auc": self.auc,
            "at_target": self.at_target.as_dict(),
            "curve": [p.as_dict() for p in self.curve],
        }


@dataclass(frozen=True)
class SelectiveComparison:
    """Confidence alone (a) against sufficiency + confidence (b) on the same held-out rows.

    ``n_rows`` rows of ``n_questions`` questions were scored by both; ``excluded_missing`` test
    rows lacked a feature of either scorer. ``auc_gain`` = AUC(b) - AUC(a); the intervals are
    percentile bootstraps over test questions (``bootstrap`` resamples, ``seed``).
    """

    n_rows: int
    n_questions: int
    excluded_missing: int
    target_coverage: float
    bootstrap: int
    seed: int
    with_sufficiency: CurveSummary | None
    confidence_only: CurveSummary | None
    auc_gain: float | None
    intervals: Mapping[str, Interval] = field(default_factory=dict)
    undefined: Mapping[str, str] = field(default_factory=dict)

    def auc(self, which: str) -> float | None:
        summary = self.with_sufficiency if which == WITH_SUFFICIENCY else self.confidence_only
        return None if summary is None else summary.auc

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            "n_rows": self.n_rows,
            "n_questions": self.n_questions,
            "excluded_missing": self.excluded_missing,
            "target_coverage": self.target_coverage,
            "bootstrap": self.bootstrap,
            "seed": self.seed,
        }
        for key, summary in (
            (WITH_SUFFICIENCY, self.with_sufficiency),
            (CONFIDENCE_ONLY, self.confidence_only),
        ):
            if summary is None:
                mark_undefined(out, key, self.undefined.get(key, "not computed"))
            else:
                out[key] = summary.as_dict()
        finite_or_undefined(
            out, "auc_gain", self.auc_gain, self.undefined.get("auc_gain", "not computed")
        )
        out["intervals"] = {k: v.as_dict() for k, v in self.intervals.items()}
        return out


def compare_selective(
    test_rows: Sequence[SelectiveRow],
    with_sufficiency: Scorer | None,
    confidence_only: Scorer | None,
    *,
    target_coverage: float = 0.8,
    bootstrap: int = 1000,
    seed: int = 0,
    undefined: Mapping[str, str] | None = None,
) -> SelectiveComparison:
    """Curves, areas, their difference and bootstrap intervals (see the module docstring).

    A scorer given as None is undefined, with its reason in ``undefined[WITH_SUFFICIENCY]`` /
    ``undefined[CONFIDENCE_ONLY]``. Both curves are drawn on the rows both defined scorers can
    score, so the difference is paired.
    """
    reasons = dict(undefined or {})
    scorers = {WITH_SUFFICIENCY: with_sufficiency, CONFIDENCE_ONLY: confidence_only}
    for key, scorer in scorers.items():
        if scorer is None:
            reasons.setdefault(key, "no scorer")
    active = {k: s for k, s in scorers.items() if s is not None}
    rows = [r for r in test_rows if all(s.can_score(r) for s in active.values())]
    qids = sorted({r.qid for r in rows})
    if active and not rows:
        for key in active:
            reasons[key] = "no test row has every feature" if test_rows else "no test rows"
        active = {}
    summaries = {k: _summary(s, rows, target_coverage) for k, s in active.items()}
    gain = None
    if len(summaries) == 2:
        gain = summaries[WITH_SUFFICIENCY].auc - summaries[CONFIDENCE_ONLY].auc
    else:
        missing = [k for k in scorers if k not in summaries]
        reasons["auc_gain"] = "; ".join(f"{k}: {reasons[k]}" for k in missing)
    intervals = _bootstrap_intervals(rows, active, bootstrap, seed) if active else {}
    return SelectiveComparison(
        n_rows=len(rows),
        n_questions=len(qids),
        excluded_missing=len(test_rows) - len(rows),
        target_coverage=target_coverage,
        bootstrap=bootstrap,
        seed=seed,
        with_sufficiency=summaries.get(WITH_SUFFICIENCY),
        confidence_only=summaries.get(CONFIDENCE_ONLY),
        auc_gain=gain,
        intervals=intervals,
        undefined=reasons,
    )


def _summary(scorer: Scorer, rows: Sequence[SelectiveRow], target: float) -> CurveSummary:
    curve = selective_curve([scorer.score(r) for r in rows], [r.correct for r in rows])
    return CurveSummary(
        scorer_source(scorer),
        scorer.features,
        tuple(curve),
        area_under_curve(curve),
        threshold_for_coverage(curve, target),
    )


def _bootstrap_intervals(
    rows: Sequence[SelectiveRow], scorers: Mapping[str, Scorer], resamples: int, seed: int
) -> dict[str, Interval]:
    """BCa intervals of each AUC and (both scorers given) of the gain; the unit of resampling
    is the question, all its rows drawn together; none below :data:`BOOTSTRAP_MIN_N` questions."""
    keys = [*scorers, *(["auc_gain"] if len(scorers) == 2 else [])]
    qids = sorted({r.qid for r in rows})
    if resamples < 1:
        return {k: no_interval(len(qids), NO_BOOTSTRAP) for k in keys}
    if len(qids) < BOOTSTRAP_MIN_N:
        reason = f"{len(qids)} test question(s): an AUC's interval needs {BOOTSTRAP_MIN_N}"
        return {k: no_interval(len(qids), reason) for k in keys}
    by_qid: dict[str, list[int]] = {q: [] for q in qids}
    for i, r in enumerate(rows):
        by_qid[r.qid].append(i)
    groups = [np.array(by_qid[q]) for q in qids]
    correct = np.array([r.correct for r in rows], dtype=bool)
    scores = {k: np.array([s.score(r) for r in rows]) for k, s in scorers.items()}

    def auc_of(key: str, picked: np.ndarray) -> float:
        idx = np.concatenate([groups[g] for g in picked])
        if key != "auc_gain":
            return area_under_curve(
                selective_curve(scores[key][idx].tolist(), correct[idx].tolist())
            )
        return auc_of(WITH_SUFFICIENCY, picked) - auc_of(CONFIDENCE_ONLY, picked)

    everything = np.arange(len(groups))
    return {
        k: bca_interval(
            len(groups),
            lambda picked, k=k: auc_of(k, picked),
            estimate=auc_of(k, everything),
            n_resamples=resamples,
            seed=seed,
        )
        for k in keys
    }


# ------------------------------------------------------------------------------------ one run


@dataclass(frozen=True)
class SelectiveRun:
    """Split, both policies (or why each is undefined), the scorers compared (confidence alone
    may be a raw feature) and the comparison. :meth:`as_dict` is the stored artifact."""

    train_qids: tuple[str, ...]
    test_rows: tuple[SelectiveRow, ...]
    policies: Mapping[str, SelectivePolicy | None]
    policy_undefined: Mapping[str, str]
    scorers: Mapping[str, Scorer | None]
    comparison: SelectiveComparison

    @property
    def test_qids(self) -> tuple[str, ...]:
        return tuple(sorted({r.qid for r in self.test_rows}))

    def as_dict(self) -> JsonObject:
        policies: JsonObject = {}
        for key, policy in self.policies.items():
            if policy is None:
                mark_undefined(policies, key, self.policy_undefined[key])
            else:
                policies[key] = policy.as_dict()
        return {
            "split": {"train_qids": list(self.train_qids), "test_qids": list(self.test_qids)},
            "policies": policies,
            "comparison": self.comparison.as_dict(),
        }


def evaluate_selective(
    rows: Sequence[SelectiveRow],
    *,
    confidence_features: Sequence[str] = CONFIDENCE_FEATURES,
    fallback_feature: str = P_TRUE,
    test_share: float = 0.5,
    iterations: int = 100,
    target_coverage: float = 0.8,
    bootstrap: int = 1000,
    seed: int = 0,
) -> SelectiveRun:
    """Split by question, fit (b) on ``sufficient`` + ``confidence_features`` and (a) on
    ``confidence_features`` alone, and compare them on the test questions. When (a)'s policy is
    undefined, ``fallback_feature`` read raw stands in for it (the comparison names its source;
    an empty ``fallback_feature`` leaves (a) undefined)."""
    train, test = split_by_question(rows, test_share, seed)
    feature_sets = {
        WITH_SUFFICIENCY: (SUFFICIENT, *confidence_features),
        CONFIDENCE_ONLY: tuple(confidence_features),
    }
    policies: dict[str, SelectivePolicy | None] = {}
    why: dict[str, str] = {}
    for key, names in feature_sets.items():
        try:
            policies[key] = fit_policy(train, names, iterations=iterations, seed=seed)
        except PolicyUndefinedError as exc:
            policies[key], why[key] = None, exc.reason
    scorers: dict[str, Scorer | None] = dict(policies)
    if scorers[CONFIDENCE_ONLY] is None and fallback_feature:
        scorers[CONFIDENCE_ONLY] = RawFeature(fallback_feature)
    comparison = compare_selective(
        test,
        scorers[WITH_SUFFICIENCY],
        scorers[CONFIDENCE_ONLY],
        target_coverage=target_coverage,
        bootstrap=bootstrap,
        seed=seed,
        undefined={k: f"policy undefined: {v}" for k, v in why.items()},
    )
    return SelectiveRun(
        train_qids=tuple(sorted({r.qid for r in train})),
        test_rows=tuple(test),
        policies=policies,
        policy_undefined=why,
        scorers=scorers,
        comparison=comparison,
    )


# ------------------------------------------------------------------------------------ evaluator


@dataclass(frozen=True)
class SelectiveEvalConfig:
    """Settings of one selective evaluation (plain JSON values)."""

    confidence_features: tuple[str, ...] = CONFIDENCE_FEATURES
    fallback_feature: str = P_TRUE
    test_share: float = 0.5
    iterations: int = 100
    target_coverage: float = 0.8
    bootstrap_samples: int = 1000
    seed: int = 0


@dataclass(frozen=True)
class SelectiveInputs:
    """The answers to evaluate, one row per (question, setting)."""

    rows: Sequence[SelectiveRow]


AUC_METRICS = {
    "auc_gain": "auc_gain",
    "auc_sufficiency_confidence": WITH_SUFFICIENCY,
    "auc_confidence": CONFIDENCE_ONLY,
}
"""Aggregate metric -> key of its value and interval in the comparison."""


@register_evaluator
class SelectiveEvaluator(BaseEvaluator[SelectiveEvalConfig, SelectiveInputs]):
    """AUC of selective accuracy vs coverage, with and without sufficiency, and the gain.

    Per-query values are each scored test row's confidence under both scorers (facet ``row``,
    ``policy``); aggregates carry ``n`` = test questions (the bootstrap's unit).
    """

    name = "selective"
    primary_metric = "auc_gain"
    greater_is_better = True

    def run(self, inputs: SelectiveInputs) -> SelectiveRun:
        c = self.config
        return evaluate_selective(
            inputs.rows,
            confidence_features=c.confidence_features,
            fallback_feature=c.fallback_feature,
            test_share=c.test_share,
            iterations=c.iterations,
            target_coverage=c.target_coverage,
            bootstrap=c.bootstrap_samples,
            seed=c.seed,
        )

    def evaluate(self, inputs: SelectiveInputs) -> EvaluationResult:
        return self.result_of(self.run(inputs))

    def result_of(self, run: SelectiveRun) -> EvaluationResult:
        """The contract's view of a run: per-row confidences and the three AUC aggregates."""
        comp = run.comparison
        queries = []
        for row in run.test_rows:
            for key, scorer in run.scorers.items():
                value = scorer.score(row) if scorer and scorer.can_score(row) else None
                reason = None
                if value is None:
                    reason = comp.undefined.get(key) or "the row lacks a feature"
                facets = {"row": row.row_id, "policy": key}
                queries.append(QueryValue(row.qid, facets, "confidence", value, reason))
        aggregates = []
        for metric, key in AUC_METRICS.items():
            value = comp.auc_gain if key == "auc_gain" else comp.auc(key)
            value_reason = comp.undefined.get(key, "not computed")
            interval = comp.intervals.get(key, no_interval(comp.n_questions, value_reason))
            aggregates.append(
                Aggregate.estimated(metric, {}, value=value, interval=interval, reason=value_reason)
            )
        return self.result(queries, aggregates)
