"""Measuring a judge against human references: agreement statistics and critique contrasts.

Two kinds of calibration, both pure (no I/O; the caller stores the result):

* categorical (labeller, entailment): the judge labels items whose right category a human gave;
  we report accuracy, Cohen's kappa (agreement beyond chance), the confusion matrix and, for a
  positive category, its precision and recall. A failed verdict is never dropped: it counts as
  wrong and shows in the ``"failed"`` column.
* contrast (critiques): there is no human 1-5 rating to compare with, but there are pairs whose
  order is known: an intact item and a perturbed twin that must rate lower on the criterion
  (:mod:`ragtrail.judges.contrasts`). The judge is right on a pair when it rates the intact item
  strictly above its twin; a tie, a reversed order or a failed verdict on either side is not a win.

Intervals (:mod:`ragtrail.stats.intervals`, each naming its method): proportions (accuracy,
precision, recall, contrast accuracy) carry a 95% Wilson score interval; kappa, which is not a
proportion, a seeded BCa bootstrap over items from 20 items on, and none (with the reason) below.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ragtrail.jsonsafe import JsonObject, check_finite, finite_or_undefined
from ragtrail.judges.contract import Judge, JudgeInput, JudgeSpec, Verdict, VerdictType
from ragtrail.stats.intervals import (
    Interval,
    IntervalMethod,
    agreement_interval,
    proportion_interval,
)

FAILED = "failed"
"""The confusion-matrix column of failed verdicts (and of values outside the judge's categories)."""

KAPPA = "kappa"
CONTRAST_ACCURACY = "contrast_accuracy"


# -- statistics ----------------------------------------------------------------------------------


def _check_pairs(reference: Sequence[str], predicted: Sequence[str | None]) -> None:
    if len(reference) != len(predicted):
        raise ValueError(f"{len(reference)} reference values but {len(predicted)} predictions")


def confusion_matrix(
    reference: Sequence[str], predicted: Sequence[str | None], categories: Sequence[str]
) -> dict[str, dict[str, int]]:
    """Counts ``[reference][predicted]`` over every category, plus a ``"failed"`` column for
    predictions that are None (failed verdicts) or outside ``categories``."""
    _check_pairs(reference, predicted)
    known = set(categories)
    outside = sorted({r for r in reference if r not in known})
    if outside:
        raise ValueError(f"reference values {outside} are not among the categories {categories}")
    matrix = {r: dict.fromkeys([*categories, FAILED], 0) for r in categories}
    for ref, pred in zip(reference, predicted, strict=True):
        matrix[ref][pred if pred in known else FAILED] += 1
    return matrix


def accuracy(reference: Sequence[str], predicted: Sequence[str | None]) -> float | None:
    """Share of items predicted exactly right (a failure is wrong); None for no items."""
    _check_pairs(reference, predicted)
    if not reference:
        return None
    return sum(r == p for r, p in zip(reference, predicted, strict=True)) / len(reference)


def cohen_kappa(
    reference: Sequence[str], predicted: Sequence[str | None], categories: Sequence[str]
) -> float | None:
    """Cohen's kappa ``(p_o - p_e) / (1 - p_e)`` between reference and predicted categories.

    ``p_o`` is the observed agreement, ``p_e`` the agreement expected by chance from the two
    marginal distributions. A failed prediction (None, or a value outside ``categories``) is a
    category of its own that no reference holds: it lowers ``p_o`` and adds nothing to ``p_e``.
    None when undefined: no items, or ``p_e == 1`` (both sides always the same one category).
    """
    matrix = confusion_matrix(reference, predicted, categories)
    n = len(reference)
    if n == 0:
        return None
    observed = sum(matrix[c][c] for c in categories) / n
    chance = sum(
        (sum(matrix[c].values()) / n) * (sum(matrix[r][c] for r in categories) / n)
        for c in categories
    )
    if math.isclose(chance, 1.0):
        return None
    return (observed - chance) / (1.0 - chance)


# -- estimates -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A figure with its 95% interval and the number of items behind it.

    ``value``/``ci_low``/``ci_high`` are None when undefined; ``undefined`` says why, per field.
    """

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    undefined: Mapping[str, str] = field(default_factory=dict)
    ci_method: str | None = None

    @classmethod
    def of(cls, value: float | None, interval: Interval, value_reason: str = "") -> Estimate:
        """A value with its interval (a null interval brings its reason; ``value_reason`` is
        why a null value is null)."""
        undefined = {"value": value_reason} if value is None else {}
        if not interval.defined:
            undefined |= dict.fromkeys(("ci_low", "ci_high"), interval.reason)
        return cls(value, interval.low, interval.high, interval.n, undefined, interval.method.value)

    def as_dict(self) -> JsonObject:
        out: JsonObject = {}
        for name in ("value", "ci_low", "ci_high"):
            reason = self.undefined.get(name, "undefined")
            finite_or_undefined(out, name, getattr(self, name), reason)
        if self.ci_method is not None:
            out["ci_method"] = self.ci_method
        out["n"] = self.n
        return out


def proportion(successes: int, n: int, *, what: str) -> Estimate:
    """``successes / n`` with its Wilson interval; undefined (with reason) when ``n == 0``."""
    if n == 0:
        reason = f"no {what}"
        return Estimate(None, None, None, 0, {k: reason for k in ("value", "ci_low", "ci_high")})
    return Estimate.of(successes / n, proportion_interval(successes, n))


# -- categorical calibration ---------------------------------------------------------------------


@dataclass(frozen=True)
class CategoricalCalibration:
    """How often a CATEGORY judge agrees with human references, and how it errs.

    ``confusion[reference][predicted]`` includes the ``"failed"`` column. ``precision`` and
    ``recall`` refer to the ``positive`` category and are None without one.
    """

    judge: str
    categories: tuple[str, ...]
    n: int
    n_failed: int
    accuracy: Estimate
    kappa: Estimate
    confusion: Mapping[str, Mapping[str, int]]
    positive: str | None = None
    precision: Estimate | None = None
    recall: Estimate | None = None
    bootstrap_resamples: int = 0
    bootstrap_undefined: int = 0
    seed: int = 0

    kind: ClassVar[str] = "categorical"
    metric: ClassVar[str] = KAPPA

    @property
    def headline(self) -> Estimate:
        """The figure a gate bar reads: kappa."""
        return self.kappa

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            "kind": self.kind,
            "judge": self.judge,
            "categories": list(self.categories),
            "n": self.n,
            "n_failed": self.n_failed,
            "accuracy": self.accuracy.as_dict(),
            "kappa": self.kappa.as_dict(),
            "confusion": {r: dict(row) for r, row in self.confusion.items()},
            "bootstrap": {
                "resamples": self.bootstrap_resamples,
                "undefined_resamples": self.bootstrap_undefined,
                "seed": self.seed,
            },
        }
        if self.positive is not None:
            out["positive"] = self.positive
            out["precision"] = self.precision.as_dict() if self.precision else None
            out["recall"] = self.recall.as_dict() if self.recall else None
        return check_finite(out, f"calibration of {self.judge}")


def _run_judge(judge: Judge, items: Sequence[JudgeInput]) -> list[Verdict]:
    verdicts = judge.judge(items)
    if len(verdicts) != len(items):
        raise RuntimeError(
            f"judge {judge.spec.ref} returned {len(verdicts)} verdicts for {len(items)} items "
            "(the judge contract asks for one per item, in order)"
        )
    return list(verdicts)


def _as_failure(verdict: Verdict, problem: str) -> Verdict:
    """``verdict`` turned into a failure that keeps the offending value in its raw outputs."""
    return Verdict(
        judge=verdict.judge,
        value=None,
        score=verdict.score,
        reason=verdict.reason,
        error=problem,
        raw=(repr(verdict.value), *verdict.raw),
    )


def _row_names(n: int, item_ids: Sequence[str] | None) -> list[str]:
    if item_ids is None:
        return [f"row {i}" for i in range(n)]
    if len(item_ids) != n:
        raise ValueError(f"{len(item_ids)} item ids for {n} items")
    return [f"row {i} ({item_id})" for i, item_id in enumerate(item_ids)]


def _categorical_spec(spec: JudgeSpec, positive: str | None) -> tuple[str, ...]:
    if spec.verdict_type is not VerdictType.CATEGORY or not spec.categories:
        raise ValueError(
            f"judge {spec.ref} is a {spec.verdict_type} judge with categories "
            f"{list(spec.categories)}: categorical calibration needs a category judge"
        )
    if positive is not None and positive not in spec.categories:
        raise ValueError(f"positive category {positive!r} is not among {list(spec.categories)}")
    return tuple(spec.categories)


def calibrate_categorical(
    judge: Judge,
    inputs: Sequence[JudgeInput],
    references: Sequence[str],
    *,
    positive: str | None = None,
    n_resamples: int = 1000,
    seed: int = 13,
    item_ids: Sequence[str] | None = None,
) -> tuple[CategoricalCalibration, list[Verdict]]:
    """Run ``judge`` once over all ``inputs`` and compare its verdicts with ``references``.

    Every reference must be one of the judge's categories (all offending rows are listed in one
    error, named by ``item_ids`` when given). A verdict that failed, or whose value is not one of
    the categories, counts as wrong and in the ``"failed"`` column; the returned verdicts (one per
    input, in order) carry such a value as a failure with the value in ``raw``. Kappa's interval
    is a bootstrap over items with ``n_resamples`` and ``seed``.
    """
    categories = _categorical_spec(judge.spec, positive)
    if len(inputs) != len(references):
        raise ValueError(f"{len(inputs)} inputs but {len(references)} references")
    if not inputs:
        raise ValueError(f"no items to calibrate {judge.spec.ref} on")
    names = _row_names(len(inputs), item_ids)
    problems = [
        f"{name}: reference {ref!r} is not among {list(categories)}"
        for name, ref in zip(names, references, strict=True)
        if ref not in categories
    ]
    if problems:
        raise ValueError(f"{len(problems)} bad reference(s): " + "; ".join(problems))

    verdicts = [
        v if not v.ok or v.value in categories else _as_failure(v, "value outside the categories")
        for v in _run_judge(judge, inputs)
    ]
    predicted = [str(v.value) if v.ok else None for v in verdicts]
    refs = list(references)
    n = len(refs)
    n_failed = sum(p is None for p in predicted)
    correct = sum(r == p for r, p in zip(refs, predicted, strict=True))

    def kappa_of(indices: np.ndarray) -> float | None:
        return cohen_kappa([refs[i] for i in indices], [predicted[i] for i in indices], categories)

    kappa_value = kappa_of(np.arange(n))
    interval = agreement_interval(n, kappa_of, n_resamples=n_resamples, seed=seed)
    kappa = Estimate.of(
        kappa_value,
        interval,
        "chance agreement is 1: references and verdicts are all one and the same category",
    )

    precision = recall = None
    if positive is not None:
        predicted_pos = [r for r, p in zip(refs, predicted, strict=True) if p == positive]
        precision = proportion(
            sum(r == positive for r in predicted_pos),
            len(predicted_pos),
            what=f"item judged {positive}",
        )
        reference_pos = [p for r, p in zip(refs, predicted, strict=True) if r == positive]
        recall = proportion(
            sum(p == positive for p in reference_pos),
            len(reference_pos),
            what=f"reference item is {positive}",
        )
    calibration = CategoricalCalibration(
        judge=judge.spec.ref,
        categories=categories,
        n=n,
        n_failed=n_failed,
        accuracy=proportion(correct, n, what="items"),
        kappa=kappa,
        confusion=confusion_matrix(refs, predicted, categories),
        positive=positive,
        precision=precision,
        recall=recall,
        bootstrap_resamples=n_resamples if interval.method == IntervalMethod.BCA else 0,
        bootstrap_undefined=interval.skipped,
        seed=seed,
    )
    return calibration, verdicts


def balanced_accuracy(
    reference: Sequence[str],
    predicted: Sequence[str | None],
    categories: Sequence[str],
    *,
    n_resamples: int = 1000,
    seed: int = 13,
) -> Estimate:
    """The mean recall over the categories the references hold (a failure is wrong), with a
    BCa interval over items from 20 on: accuracy that a majority category cannot inflate."""
    _check_pairs(reference, predicted)
    refs, preds = list(reference), list(predicted)

    def statistic(indices: np.ndarray) -> float | None:
        recalls = []
        for category in categories:
            held = [i for i in indices if refs[i] == category]
            if held:
                recalls.append(sum(preds[i] == category for i in held) / len(held))
        return float(np.mean(recalls)) if recalls else None

    if not refs:
        reason = "no items"
        return Estimate(None, None, None, 0, {k: reason for k in ("value", "ci_low", "ci_high")})
    interval = agreement_interval(len(refs), statistic, n_resamples=n_resamples, seed=seed)
    return Estimate.of(statistic(np.arange(len(refs))), interval)


def class_figures(
    reference: Sequence[str], predicted: Sequence[str | None], categories: Sequence[str]
) -> dict[str, dict[str, Estimate]]:
    """Per category: ``precision`` (of the items judged it, the share that are) and ``recall``
    (of the items that are, the share judged it), each with its Wilson interval."""
    _check_pairs(reference, predicted)
    pairs = list(zip(reference, predicted, strict=True))
    out = {}
    for category in categories:
        judged = [r for r, p in pairs if p == category]
        held = [p for r, p in pairs if r == category]
        out[category] = {
            "precision": proportion(
                sum(r == category for r in judged), len(judged), what=f"item judged {category}"
            ),
            "recall": proportion(
                sum(p == category for p in held), len(held), what=f"reference item is {category}"
            ),
        }
    return out


# -- critique contrasts --------------------------------------------------------------------------


@dataclass(frozen=True)
class ContrastPair:
    """An intact item and its perturbed twin, which must rate lower on ``criterion``."""

    criterion: str
    perturbation: str
    intact: JudgeInput
    perturbed: JudgeInput
    source_id: str


WIN, TIE, LOSS = "win", "tie", "loss"


@dataclass(frozen=True)
class ContrastCalibration:
    """How often a rating judge orders contrast pairs right.

    ``wins``: intact rated strictly above its twin; ``ties``: equal ratings; ``losses``: the twin
    rated above; ``failed``: either verdict failed or was not a number. Only wins count as right,
    so ``accuracy = wins / n`` with ``n = wins + ties + losses + failed`` (a judge that rates
    everything the same scores 0, not 0.5). ``by_perturbation`` breaks the counts down when the
    pairs come from more than one perturbation (empty otherwise).
    """

    judge: str
    criterion: str
    n: int
    wins: int
    ties: int
    losses: int
    failed: int
    accuracy: Estimate
    by_perturbation: Mapping[str, ContrastCalibration] = field(default_factory=dict)

    kind: ClassVar[str] = "contrast"
    metric: ClassVar[str] = CONTRAST_ACCURACY

    @property
    def headline(self) -> Estimate:
        """The figure a gate bar reads: contrast accuracy."""
        return self.accuracy

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            "kind": self.kind,
            "judge": self.judge,
            "criterion": self.criterion,
            "n": self.n,
            "wins": self.wins,
            "ties": self.ties,
            "losses": self.losses,
            "failed": self.failed,
            "accuracy": self.accuracy.as_dict(),
        }
        if self.by_perturbation:
            out["by_perturbation"] = {k: v.as_dict() for k, v in self.by_perturbation.items()}
        return check_finite(out, f"contrast calibration of {self.judge}")


def _rating(verdict: Verdict) -> tuple[Verdict, float | None]:
    """The verdict (a non-numeric value turned into a failure) and its rating, if any."""
    if not verdict.ok:
        return verdict, None
    value = verdict.value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return _as_failure(verdict, "rating is not a finite number"), None
    return verdict, float(value)


def _outcome(intact: float | None, perturbed: float | None) -> str:
    if intact is None or perturbed is None:
        return FAILED
    if intact > perturbed:
        return WIN
    return TIE if intact == perturbed else LOSS


def _tally(
    judge: str,
    criterion: str,
    outcomes: Sequence[str],
    by_perturbation: Mapping[str, ContrastCalibration] | None = None,
) -> ContrastCalibration:
    counts = {k: sum(o == k for o in outcomes) for k in (WIN, TIE, LOSS, FAILED)}
    return ContrastCalibration(
        judge=judge,
        criterion=criterion,
        n=len(outcomes),
        wins=counts[WIN],
        ties=counts[TIE],
        losses=counts[LOSS],
        failed=counts[FAILED],
        accuracy=proportion(counts[WIN], len(outcomes), what="contrast pairs"),
        by_perturbation=dict(by_perturbation or {}),
    )


def calibrate_contrasts(
    judge: Judge, pairs: Sequence[ContrastPair], *, seed: int
) -> tuple[ContrastCalibration, list[tuple[Verdict, Verdict]]]:
    """Rate both sides of every pair in one batched judge call and count the pairs ordered right.

    The intact and perturbed inputs are sent in a seeded random order, so neither side always
    sits in the same batches or positions (batch padding and position must not favour one side);
    verdicts come back as ``(intact, perturbed)`` per pair, in the order of ``pairs``. All pairs
    must be for one criterion: a critique judge rates one criterion.
    """
    if judge.spec.verdict_type is not VerdictType.RATING:
        raise ValueError(f"judge {judge.spec.ref} gives {judge.spec.verdict_type}, not ratings")
    if not pairs:
        raise ValueError(f"no contrast pairs to calibrate {judge.spec.ref} on")
    criteria = sorted({p.criterion for p in pairs})
    if len(criteria) != 1:
        raise ValueError(f"contrast pairs of several criteria {criteria}: calibrate one at a time")
    items = [p.intact for p in pairs] + [p.perturbed for p in pairs]
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    by_index = dict(zip(order, _run_judge(judge, [items[i] for i in order]), strict=True))
    verdicts = [by_index[i] for i in range(len(items))]

    n_pairs = len(pairs)
    judged: list[tuple[Verdict, Verdict]] = []
    outcomes: list[str] = []
    for i in range(n_pairs):
        intact, intact_rating = _rating(verdicts[i])
        perturbed, perturbed_rating = _rating(verdicts[n_pairs + i])
        judged.append((intact, perturbed))
        outcomes.append(_outcome(intact_rating, perturbed_rating))

    ref, criterion = judge.spec.ref, criteria[0]
    names = sorted({p.perturbation for p in pairs})
    by_perturbation = {
        name: _tally(
            ref,
            criterion,
            [o for o, p in zip(outcomes, pairs, strict=True) if p.perturbation == name],
        )
        for name in names
        if len(names) > 1
    }
    return _tally(ref, criterion, outcomes, by_perturbation), judged


__all__ = [
    "CONTRAST_ACCURACY",
    "FAILED",
    "KAPPA",
    "CategoricalCalibration",
    "ContrastCalibration",
    "ContrastPair",
    "Estimate",
    "accuracy",
    "balanced_accuracy",
    "calibrate_categorical",
    "calibrate_contrasts",
    "class_figures",
    "cohen_kappa",
    "confusion_matrix",
    "proportion",
]
