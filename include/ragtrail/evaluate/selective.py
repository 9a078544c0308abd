"""Selective generation: a policy that decides when to answer, and what abstaining buys (METHODS §9).

Each row is one answer (a question in one answer setting) with its features — the binary
sufficiency label ``sufficient`` and the self-rated confidences ``p_true`` / ``p_correct`` — and
its outcome: correct, hallucinated, or neither (an abstention).

* :func:`split_by_question` puts every row of a question on the same side of a seeded split.
* :func:`fit_policy` fits a scikit-learn logistic regression predicting *hallucinated* from
  standardised features, with a seeded random search over ``C`` (log-uniform) and
  ``class_weight``, scored by cross-validated Brier score (defined on any fold, however small). A row lacking one of the
  policy's features is left out and counted (``excluded_missing``), never imputed. A training
  set with one class, or fewer than :data:`MIN_ROWS_PER_CLASS` rows of either class, has no
  policy: :class:`PolicyUndefinedError` says why, for the caller to record.
* The policy's confidence in a row is the probability that it does *not* hallucinate; the
  model answers when it is at or above a threshold.
* :func:`selective_curve` sorts rows by confidence and gives, for each distinct confidence
  value as the threshold, the coverage (share of rows answered) and the selective accuracy
  (share of answered rows that are correct; an answered abstention is not correct). Tied rows
  are kept or dropped together. :func:`area_under_curve` integrates the curve as a step
  function over coverage from 0 to 1.
* :func:`compare_selective` sets the policy with sufficiency against confidence alone (a
  policy on the confidence features, or one raw feature when that policy is undefined) on the
  same held-out rows: both areas, their difference and a percentile bootstrap interval that
  resamples questions. :func:`evaluate_selective` runs split, fits and comparison in one go;
  the ``selective`` evaluator wraps it in the evaluator contract.

Everything that leaves through ``as_dict`` is strict JSON; undefined numbers are null with a
reason (:mod:`ragtrail.jsonsafe`). The policy is stored as plain JSON (no pickle).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragtrail.evaluate.contract import (
    Aggregate,
    BaseEvaluator,
    EvaluationResult,
    QueryValue,
    register_evaluator,
)
from ragtrail.jsonsafe import finite_or_undefined, mark_undefined

SUFFICIENT = "sufficient"
P_TRUE = "p_true"
P_CORRECT = "p_correct"
CONFIDENCE_FEATURES = (P_TRUE, P_CORRECT)
SEARCH_SCORING = "neg_brier_score"
MAX_FOLDS = 5
MIN_ROWS_PER_CLASS = 2
C_RANGE = (1e-3, 1e3)
CLASS_WEIGHTS = (None, "balanced")
WITH_SUFFICIENCY = "sufficiency+confidence"
CONFIDENCE_ONLY = "confidence"
_COVERAGE_TOLERANCE = 1e-12


class PolicyUndefinedError(ValueError):
    """No policy can be fitted on these rows; ``reason`` says why (for the caller's record)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ------------------------------------------------------------------------------------ rows


@dataclass(frozen=True)
class SelectiveRow:
    """One answer: its features (None when missing) and whether it was correct or hallucinated
    (an abstention is neither)."""

    row_id: str
    qid: str
    features: Mapping[str, float | None]
    correct: bool
    hallucinated: bool

    def __post_init__(self) -> None:
        if self.correct and self.hallucinated:
            raise ValueError(f"row {self.row_id!r} cannot be both correct and hallucinated")

    def vector(self, names: Sequence[str]) -> list[float] | None:
        """The named features in order, or None when any is missing or not finite."""
        values = [self.features.get(name) for name in names]
        if any(v is None or not math.isfinite(float(v)) for v in values):
            return None
        return [float(v) for v in values if v is not None]


def split_by_question(
    rows: Sequence[SelectiveRow], test_share: float, seed: int
) -> tuple[list[SelectiveRow], list[SelectiveRow]]:
    """``(train, test)``: a seeded permutation of the sorted question ids sends
    ``round(test_share * questions)`` of them (at least one, and one fewer than all, when there
    are two or more) to the test side; every row follows its question, input order kept.
    The same rows and seed always give the same split, whatever the row order."""
    if not 0.0 < test_share < 1.0:
        raise ValueError(f"test_share must be in (0, 1), got {test_share}")
    qids = sorted({r.qid for r in rows})
    n_test = round(test_share * len(qids))
    if len(qids) >= 2:
        n_test = min(max(n_test, 1), len(qids) - 1)
    order = np.random.default_rng(seed).permutation(len(qids))
    test_qids = {qids[i] for i in order[:n_test]}
    train = [r for r in rows if r.qid not in test_qids]
    test = [r for r in rows if r.qid in test_qids]
    return train, test


# ------------------------------------------------------------------------------------ policy


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@dataclass(frozen=True)
class SelectivePolicy:
    """A fitted policy: standardisation, logistic coefficients (for *hallucinated*), the chosen
    hyperparameters and how the search scored them, and what it was trained on."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coefficients: tuple[float, ...]
    intercept: float
    C: float
    class_weight: str | None
    search_score: float
    search_scoring: str
    folds: int
    iterations: int
    seed: int
    train_n: int
    train_hallucinated: int
    excluded_missing: int

    def __post_init__(self) -> None:
        n = len(self.features)
        if not n or not len(self.mean) == len(self.scale) == len(self.coefficients) == n:
            raise ValueError("a policy needs one mean, scale and coefficient per feature")

    def can_score(self, row: SelectiveRow) -> bool:
        return row.vector(self.features) is not None

    def hallucination_probability(self, row: SelectiveRow) -> float:
        """The fitted probability that ``row`` is hallucinated."""
        x = row.vector(self.features)
        if x is None:
            missing = [f for f in self.features if row.features.get(f) is None]
            raise ValueError(f"row {row.row_id!r} lacks feature(s) {missing or self.features}")
        z = self.intercept + sum(
            c * (v - m) / s
            for c, v, m, s in zip(self.coefficients, x, self.mean, self.scale, strict=True)
        )
        return _sigmoid(z)

    def score(self, row: SelectiveRow) -> float:
        """The confidence to answer: the probability that ``row`` is NOT hallucinated."""
        return 1.0 - self.hallucination_probability(row)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON, the stored artifact (:meth:`from_dict` reads it back)."""
        return {
            "features": list(self.features),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "coefficients": list(self.coefficients),
            "intercept": self.intercept,
            "C": self.C,
            "class_weight": self.class_weight,
            "search_score": self.search_score,
            "search_scoring": self.search_scoring,
            "folds": self.folds,
            "iterations": self.iterations,
            "seed": self.seed,
            "train_n": self.train_n,
            "train_hallucinated": self.train_hallucinated,
            "excluded_missing": self.excluded_missing,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SelectivePolicy:
        missing = sorted(set(cls.__dataclass_fields__) - set(data))
        if missing:
            raise ValueError(f"policy record lacks {', '.join(missing)}")
        fields = {name: data[name] for name in cls.__dataclass_fields__}
        fields["features"] = tuple(str(f) for f in data["features"])
        for name in ("mean", "scale", "coefficients"):
            fields[name] = tuple(float(v) for v in data[name])
        return cls(**fields)


def fit_policy(
    train: Sequence[SelectiveRow],
    features: Sequence[str],
    *,
    iterations: int = 100,
    seed: int = 0,
) -> SelectivePolicy:
    """Fit the hallucination policy on ``train`` (see the module docstring).

    The search draws ``iterations`` candidates from a generator seeded with ``seed``: ``C``
    log-uniform in :data:`C_RANGE` and ``class_weight`` uniform over :data:`CLASS_WEIGHTS`. Each
    is scored by the mean, over ``min(5, rows of the smaller class)`` stratified folds (so every
    fold holds both classes), of the negative Brier score on the held-out fold, standardising
    with the training fold's statistics; the first best candidate is refitted on every row. A
    loop of its own rather than ``RandomizedSearchCV``: the same search, about ten times faster
    on nightly sizes (measured 9 s against under 1 s per policy at 100 iterations, 2 cores),
    where the per-fit overhead of the generic machinery dominates.

    Raises :class:`PolicyUndefinedError` when no policy can be fitted.
    """
    from sklearn.model_selection import StratifiedKFold
    from threadpoolctl import threadpool_limits

    names = tuple(features)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"features must be distinct and non-empty, got {list(names)}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    usable = [(r, x) for r in train if (x := r.vector(names)) is not None]
    excluded = len(train) - len(usable)
    dropped = f" ({excluded} of {len(train)} lack a feature)" if excluded else ""
    y = np.array([r.hallucinated for r, _ in usable], dtype=bool)
    positives = int(y.sum())
    negatives = len(y) - positives
    if not len(y):
        raise PolicyUndefinedError(f"no training row has every feature of {list(names)}{dropped}")
    if not positives or not negatives:
        kind = "hallucinated" if positives else "not hallucinated"
        raise PolicyUndefinedError(
            f"all {len(y)} training rows are {kind}: one class, nothing to learn{dropped}"
        )
    if min(positives, negatives) < MIN_ROWS_PER_CLASS:
        raise PolicyUndefinedError(
            f"too few rows: {positives} hallucinated and {negatives} not; cross-validation "
            f"needs at least {MIN_ROWS_PER_CLASS} of each{dropped}"
        )
    x = np.array([v for _, v in usable], dtype=float)
    folds = min(MAX_FOLDS, positives, negatives)
    splits = list(StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(x, y))
    rng = np.random.default_rng(seed)
    candidates = [
        (float(math.exp(rng.uniform(*np.log(C_RANGE)))), CLASS_WEIGHTS[int(rng.integers(2))])
        for _ in range(iterations)
    ]
    with threadpool_limits(1):  # tiny fits: threads only contend (measured 25x slower loaded)
        scores = [
            float(np.mean([_held_out_score(x, y, fit, held, c, w) for fit, held in splits]))
            for c, w in candidates
        ]
        best = int(np.argmax(scores))  # the first of equal scores
        c, weight = candidates[best]
        mean, scale = _standardisation(x)
        model = _logit(c, weight).fit((x - mean) / scale, y)
    return SelectivePolicy(
        features=names,
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        coefficients=tuple(float(v) for v in model.coef_[0]),
        intercept=float(model.intercept_[0]),
        C=c,
        class_weight=weight,
        search_score=scores[best],
        search_scoring=SEARCH_SCORING,
        folds=folds,
        iterations=iterations,
        seed=seed,
        train_n=len(y),
        train_hallucinated=positives,
        excluded_missing=excluded,
    )


def _standardisation(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations (a constant column gets scale 1, as in sklearn)."""
    scale = x.std(axis=0)
    return x.mean(axis=0), np.where(scale > 1e-12, scale, 1.0)


def _logit(c: float, class_weight: str | None) -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, class_weight=class_weight, max_iter=1000)


def _held_out_score(
    x: np.ndarray,
    y: np.ndarray,
    fit: np.ndarray,
    held: np.ndarray,
    c: float,
    class_weight: str | None,
) -> float:
    """Negative Brier score on ``held`` of a model fitted on ``fit`` (standardised by ``fit``)."""
    mean, scale = _standardisation(x[fit])
    model = _logit(c, class_weight).fit((x[fit] - mean) / scale, y[fit])
    p = model.predict_proba((x[held] - mean) / scale)[:, 1]  # classes_ are [False, True]
    return -float(np.mean((p - y[held]) ** 2))


@dataclass(frozen=True)
class RawFeature:
    """Confidence read straight from one feature (the fallback for confidence alone when its
    policy is undefined)."""

    name: str

    @property
    def features(self) -> tuple[str, ...]:
        return (self.name,)

    def can_score(self, row: SelectiveRow) -> bool:
        return row.vector(self.features) is not None

    def score(self, row: SelectiveRow) -> float:
        x = row.vector(self.features)
        if x is None:
            raise ValueError(f"row {row.row_id!r} lacks feature {self.name!r}")
        return x[0]


Scorer = SelectivePolicy | RawFeature


def scorer_source(scorer: Scorer) -> str:
    """``"policy"`` or ``"raw:<feature>"``: what a curve's confidences came from."""
    return "policy" if isinstance(scorer, SelectivePolicy) else f"raw:{scorer.name}"


# ------------------------------------------------------------------------------------ curves


@dataclass(frozen=True)
class CurvePoint:
    """Keeping the rows with confidence >= ``threshold``: ``n_kept`` rows, ``coverage`` of all,
    ``accuracy`` = correct share among them."""

    coverage: float
    accuracy: float
    threshold: float
    n_kept: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "coverage": self.coverage,
            "accuracy": self.accuracy,
            "threshold": self.threshold,
            "n_kept": self.n_kept,
        }


def selective_curve(confidences: Sequence[float], correct: Sequence[bool]) -> list[CurvePoint]:
    """One point per distinct confidence, highest threshold (lowest coverage) first; the last
    point keeps every row (coverage 1)."""
    conf = np.asarray(confidences, dtype=float)
    hits = np.asarray(correct, dtype=bool)
    if conf.ndim != 1 or conf.shape != hits.shape:
        raise ValueError(f"{conf.size} confidences but {hits.size} outcomes")
    if not conf.size:
        raise ValueError("a selective curve needs at least one row")
    if not np.isfinite(conf).all():
        raise ValueError("confidences must be finite")
    order = np.argsort(-conf, kind="stable")
    ranked = conf[order]
    correct_so_far = np.cumsum(hits[order])
    n = conf.size
    points = []
    for i in range(n):
        if i + 1 == n or ranked[i + 1] != ranked[i]:  # the last row of a tie group
            kept = i + 1
            points.append(
                CurvePoint(kept / n, float(correct_so_far[i]) / kept, float(ranked[i]), kept)
            )
    return points


def area_under_curve(curve: Sequence[CurvePoint]) -> float:
    """Step-function area over coverage 0..1: each point's accuracy holds from the previous
    point's coverage (0 for the first) up to its own. Without ties this is the mean, over
    k = 1..n, of the accuracy of the k most confident rows."""
    if not curve:
        raise ValueError("an empty curve has no area")
    area, previous = 0.0, 0.0
    for point in curve:
        area += (point.coverage - previous) * point.accuracy
        previous = point.coverage
    return area


def threshold_for_coverage(curve: Sequence[CurvePoint], target: float) -> CurvePoint:
    """The point with the largest threshold whose coverage reaches ``target`` (in (0, 1])."""
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target coverage must be in (0, 1], got {target}")
    for point in curve:
        if point.coverage >= target - _COVERAGE_TOLERANCE:
            return point
    raise ValueError("the curve never reaches the target coverage (it must end at coverage 1)")


# ------------------------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class CurveSummary:
    """One scorer's curve on the compared rows, its area and the point for the target coverage."""

    source: str
    features: tuple[str, ...]
    curve: tuple[CurvePoint, ...]
    auc: float
    at_target: CurvePoint

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "features": list(self.features),
            "auc": self.auc,
            "at_target": self.at_target.as_dict(),
            "curve": [p.as_dict() for p in self.curve],
        }


@dataclass(frozen=True)
class Interval:
    """A bootstrap interval, or None bounds with the reason."""

    low: float | None
    high: float | None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in (("low", self.low), ("high", self.high)):
            finite_or_undefined(out, name, value, self.reason or "not computed")
        return out


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

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
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
        reasons["auc_gain"] = f"undefined: {'; '.join(f'{k}: {reasons[k]}' for k in missing)}"
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
    """95% percentile intervals of each AUC and (both scorers given) of the gain; the unit of
    resampling is the question, all its rows drawn together."""
    keys = [*scorers, *(["auc_gain"] if len(scorers) == 2 else [])]
    qids = sorted({r.qid for r in rows})
    reason = None
    if resamples < 1:
        reason = "bootstrap disabled (0 resamples)"
    elif len(qids) < 2:
        reason = f"{len(qids)} test question(s): nothing to resample"
    if reason is not None:
        return {k: Interval(None, None, reason) for k in keys}
    by_qid: dict[str, list[int]] = {q: [] for q in qids}
    for i, r in enumerate(rows):
        by_qid[r.qid].append(i)
    groups = [np.array(by_qid[q]) for q in qids]
    correct = np.array([r.correct for r in rows], dtype=bool)
    scores = {k: np.array([s.score(r) for r in rows]) for k, s in scorers.items()}
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(resamples):
        picked = rng.integers(0, len(groups), size=len(groups))
        idx = np.concatenate([groups[g] for g in picked])
        aucs = {
            k: area_under_curve(selective_curve(v[idx].tolist(), correct[idx].tolist()))
            for k, v in scores.items()
        }
        for k, value in aucs.items():
            draws[k].append(value)
        if "auc_gain" in draws:
            draws["auc_gain"].append(aucs[WITH_SUFFICIENCY] - aucs[CONFIDENCE_ONLY])
    out = {}
    for k, values in draws.items():
        low, high = np.quantile(values, [0.025, 0.975])
        out[k] = Interval(float(low), float(high))
    return out


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

    def as_dict(self) -> dict[str, Any]:
        policies: dict[str, Any] = {}
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
            interval = comp.intervals.get(key, Interval(None, None, value_reason))
            ci_reason = interval.reason or value_reason
            aggregates.append(
                Aggregate.of(
                    metric,
                    {},
                    value=value,
                    ci_low=interval.low,
                    ci_high=interval.high,
                    n=comp.n_questions,
                    reasons={"value": value_reason, "ci_low": ci_reason, "ci_high": ci_reason},
                )
            )
        return self.result(queries, aggregates)
