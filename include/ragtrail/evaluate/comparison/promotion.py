"""The champion/challenger promotion gate: pure functions over per-mixture citation scores.

Both models answer the *same* frozen mixtures with the same seeds
(:func:`ragtrail.evaluate.citations.evaluator.evaluate_mixtures` with one config), so their per-mixture rows
pair up by ``(qid, mixture type)`` and every comparison is paired
(:func:`ragtrail.evaluate.comparison.paired.compare_paired`: mean difference challenger - champion, its
CI over mixtures (t below 20 mixtures, BCa from 20), sign-flip p-value, and the minimum
detectable effect at that n). A challenger kept because n is too small says so: the reason names
the smallest difference this n detects with 80% power and the n the observed gain would need.

Rules:

- **primary** (citation F1 by default, answerable mixtures): the challenger must improve with the
  whole ``confidence`` CI of the mean difference above zero. A failed (unparseable) answer scores 0
  on the citation metrics, so failing cannot hide a bad answer.
- **guards** (each must not regress by more than its tolerance, judged on the observed mean
  difference in the metric's own unit; the CI is recorded as evidence): invalid-citation rate,
  answer length in words, failure rate, and citation F1 on each mixture type separately (a gain on
  easy mixtures may not pay for a loss on seemingly relevant ones). A guard with no pair where both
  models have a value (e.g. neither cited anything) cannot be judged; it is recorded as not checked
  and does not block.
- **no champion yet**: the first challenger is compared with the seeded random citation baseline
  scored on the same mixtures (the ``random`` rows of the same evaluation) and is promoted when its
  primary metric beats it with the CI above zero. A model that cannot beat random citing is not
  allowed to serve even when nothing else exists.

The question generator has a simpler gate (:func:`decide_generator_promotion`): its parse rate and
acceptance rate on the same requests may not fall by more than a tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ragtrail.config import PromotionSettings
from ragtrail.evaluate.citations.mixtures import MIXTURE_TYPES
from ragtrail.evaluate.comparison.paired import PairedStats, compare_paired
from ragtrail.jsonsafe import JsonObject, check_finite

PRIMARY = "primary"
GUARD = "guard"
CHAMPION = "champion"
RANDOM_BASELINE = "random_baseline"
ALL = "overall"
UNANSWERABLE = "unanswerable"
CITATION_METRICS = ("citation_precision", "citation_recall", "citation_f1")
NOT_CHECKED = "not checked: no mixture has a value from both models"


class GateInputError(ValueError):
    """The two evaluations cannot be compared (different mixtures, missing rows); lists all."""


@dataclass(frozen=True)
class Guard:
    """A metric that may not get worse by more than ``tolerance`` (in its own unit).

    ``per_mixture`` makes one check per mixture type instead of one over all mixtures."""

    metric: str
    greater_is_better: bool
    tolerance: float
    per_mixture: bool = False

    def __post_init__(self) -> None:
        if self.tolerance < 0:
            raise ValueError(f"guard {self.metric}: tolerance must be >= 0")


@dataclass(frozen=True)
class GateConfig:
    """How the citation gate decides (see module docstring)."""

    primary_metric: str = "citation_f1"
    confidence: float = 0.95
    n_resamples: int = 9999
    seed: int = 13
    guards: tuple[Guard, ...] = (
        Guard("invalid_citation_rate", greater_is_better=False, tolerance=0.02),
        Guard("answer_words", greater_is_better=False, tolerance=5.0),
        Guard("failure_rate", greater_is_better=False, tolerance=0.02),
        Guard("citation_f1", greater_is_better=True, tolerance=0.05, per_mixture=True),
    )

    @classmethod
    def from_settings(cls, settings: PromotionSettings) -> GateConfig:
        return cls(
            primary_metric=settings.primary_metric,
            confidence=settings.confidence,
            n_resamples=settings.n_resamples,
            seed=settings.seed,
            guards=(
                Guard("invalid_citation_rate", False, settings.max_invalid_citation_rate_increase),
                Guard("answer_words", False, settings.max_answer_words_increase),
                Guard("failure_rate", False, settings.max_failure_rate_increase),
                Guard("citation_f1", True, settings.max_mixture_f1_decrease, per_mixture=True),
            ),
        )

    def as_dict(self) -> JsonObject:
        out = asdict(self)
        out["guards"] = [asdict(g) for g in self.guards]
        return out


@dataclass(frozen=True)
class GateCheck:
    """One piece of evidence: a metric on a facet, both sides, the paired difference and verdict.

    ``champion`` is the reference side: the champion, or the random baseline for a first model.
    """

    check: str
    metric: str
    facet: str
    champion: float | None
    challenger: float | None
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n: int
    tolerance: float | None
    passed: bool
    note: str = ""
    undefined: dict[str, str] = field(default_factory=dict)
    ci_method: str = "none"
    mde: float | None = None
    needed_n: int | None = None

    def as_dict(self) -> JsonObject:
        out = asdict(self)
        if not out["undefined"]:
            del out["undefined"]
        return out

    @property
    def power_text(self) -> str:
        """What this n could detect and, when the observed gain is smaller, the n it needs."""
        if self.mde is None:
            return f"smallest detectable difference unknown ({self.undefined.get('mde', '?')})"
        text = f"n={self.n} detects differences of {self.mde:.4f} or more with 80% power"
        if self.needed_n is not None and self.needed_n > self.n:
            text += f"; detecting the observed {self.diff:+.4f} needs n >= {self.needed_n}"
        return text


@dataclass(frozen=True)
class GateDecision:
    """The gate's verdict with every check behind it."""

    promote: bool
    reason: str
    reference: str
    checks: tuple[GateCheck, ...]
    config: JsonObject

    @property
    def failed(self) -> list[GateCheck]:
        return [c for c in self.checks if not c.passed]

    def as_json(self) -> JsonObject:
        """Strict JSON (no NaN): what the registry stores with the version."""
        return check_finite(
            {
                "promote": self.promote,
                "reason": self.reason,
                "reference": self.reference,
                "checks": [c.as_dict() for c in self.checks],
                "config": self.config,
            },
            "gate decision",
        )


# ---------------------------------------------------------------------------- citation gate


def decide_promotion(
    champion_rows: Sequence[Mapping[str, Any]] | None,
    challenger_rows: Sequence[Mapping[str, Any]],
    config: GateConfig | None = None,
    *,
    serving: str = "the champion",
) -> GateDecision:
    """Promote the challenger or not, from the per-mixture rows of both evaluations.

    Rows are :attr:`ragtrail.evaluate.citations.evaluator.MixtureEvaluation.rows` (``system`` ``model``
    rows are the model's; ``random`` rows are the baseline's). ``champion_rows=None`` means there
    is no champion yet: the challenger is compared with its evaluation's random baseline.
    ``serving`` names the model ``champion_rows`` come from in the reason (e.g. "the configured
    answerer" when nothing is registered yet).
    """
    config = config or GateConfig()
    if champion_rows is None:
        return _decide_against_baseline(challenger_rows, config)
    champion = _index(champion_rows, "model", "champion")
    challenger = _index(challenger_rows, "model", "challenger")
    _check_same_mixtures(champion, challenger)
    pairs = [(champion[k], challenger[k]) for k in sorted(challenger)]
    primary = _check(PRIMARY, config.primary_metric, ALL, pairs, config, tolerance=None)
    checks = [primary]
    for guard in config.guards:
        facets = _mixture_types(pairs) if guard.per_mixture else [ALL]
        for facet in facets:
            subset = pairs if facet == ALL else [p for p in pairs if p[1]["mixture"] == facet]
            checks.append(_check(GUARD, guard.metric, facet, subset, config, guard=guard))
    return _decision(checks, CHAMPION, config, serving)


def _decide_against_baseline(rows: Sequence[Mapping[str, Any]], config: GateConfig) -> GateDecision:
    model = _index(rows, "model", "challenger")
    baseline = _index(rows, "random", "challenger's random baseline")
    _check_same_mixtures(baseline, model)
    pairs = [(baseline[k], model[k]) for k in sorted(model)]
    primary = _check(PRIMARY, config.primary_metric, ALL, pairs, config, tolerance=None)
    return _decision([primary], RANDOM_BASELINE, config, "the random citation baseline")


def _decision(
    checks: list[GateCheck], reference: str, config: GateConfig, against: str
) -> GateDecision:
    primary, failed = checks[0], [c for c in checks if not c.passed]
    if not failed:
        reason = (
            f"{primary.metric} improved on {against} by {primary.diff:+.4f} "
            f"({config.confidence:.0%} CI [{primary.ci_low:+.4f}, {primary.ci_high:+.4f}], "
            f"n={primary.n})"
        )
        if len(checks) > 1:
            reason += "; no guarded metric regressed beyond its tolerance"
    else:
        reason = "; ".join(_failure_text(c, against, config) for c in failed)
    return GateDecision(
        promote=not failed,
        reason=reason,
        reference=reference,
        checks=tuple(checks),
        config=config.as_dict(),
    )


def _failure_text(check: GateCheck, against: str, config: GateConfig) -> str:
    if check.check == PRIMARY:
        if check.n == 0:
            return f"{check.metric}: {check.note}"
        if check.ci_low is None or check.ci_high is None:
            interval = f"{check.note} (n={check.n})"
        else:
            interval = (
                f"{config.confidence:.0%} CI [{check.ci_low:+.4f}, {check.ci_high:+.4f}] "
                f"is not above zero (n={check.n})"
            )
        return (
            f"{check.metric} did not improve on {against}: {check.diff:+.4f}, {interval}; "
            f"{check.power_text}"
        )
    where = {ALL: "all mixture types", QUESTIONS: "held-out questions"}.get(
        check.facet, f"{check.facet} mixtures"
    )
    return (
        f"guard {check.metric} ({where}) regressed by {abs(check.diff or 0.0):.4f} "
        f"> tolerance {check.tolerance:g} ({against} {check.champion:.4f}, "
        f"challenger {check.challenger:.4f}, n={check.n})"
    )


def _check(
    kind: str,
    metric: str,
    facet: str,
    pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    config: GateConfig,
    *,
    tolerance: float | None = None,
    guard: Guard | None = None,
) -> GateCheck:
    a, b = [], []
    for ref_row, new_row in pairs:
        x, y = gate_value(ref_row, metric), gate_value(new_row, metric)
        if x is not None and y is not None:
            a.append(x)
            b.append(y)
    tol = guard.tolerance if guard else tolerance
    if not a:
        fields = ("champion", "challenger", "diff", "ci_low", "ci_high", "p_value")
        return GateCheck(
            kind, metric, facet, None, None, None, None, None, None, 0, tol,
            passed=kind != PRIMARY, note=NOT_CHECKED,
            undefined=dict.fromkeys(fields, NOT_CHECKED),
        )  # fmt: skip
    stats = compare_paired(
        a, b, n_resamples=config.n_resamples, confidence=config.confidence, seed=config.seed
    )
    # the gain a primary check saw is what a bigger sample would have to confirm
    gain = stats.diff if guard is None and stats.diff is not None and stats.diff > 0 else None
    detect = stats.detectable.at(alpha=1.0 - config.confidence, target=gain)
    undefined = dict(stats.undefined)
    if guard is None:
        passed = stats.ci_low is not None and stats.ci_low > 0.0
        if passed:
            note = "CI of the improvement above zero"
        elif stats.ci_low is None:
            note = f"no CI of the improvement: {undefined.get('ci_low', 'undefined')}"
        else:
            note = "CI of the improvement reaches 0"
    else:
        regression = _regression(stats, guard)
        passed = regression <= guard.tolerance + 1e-12
        note = f"regression {regression:+.4f} vs tolerance {guard.tolerance:g}"
    return GateCheck(
        check=kind,
        metric=metric,
        facet=facet,
        champion=stats.mean_a,
        challenger=stats.mean_b,
        diff=stats.diff,
        ci_low=stats.ci_low,
        ci_high=stats.ci_high,
        p_value=stats.p_value,
        n=stats.n,
        tolerance=tol,
        passed=passed,
        note=note,
        undefined=undefined,
        ci_method=stats.ci_method,
        mde=detect.mde,
        needed_n=detect.needed_n,
    )


def _regression(stats: PairedStats, guard: Guard) -> float:
    """How much worse the challenger is (positive = worse), in the metric's unit."""
    diff = stats.diff or 0.0
    return -diff if guard.greater_is_better else diff


def gate_value(row: Mapping[str, Any], metric: str) -> float | None:
    """The value a row contributes to ``metric`` in the gate, or None when it does not count.

    Citation metrics count on answerable mixtures only; a failed answer scores 0 on them.
    ``failure_rate`` is 1 for a failed answer and 0 otherwise. Other metrics are the row's value
    for answers that did not fail (None where the row has none).
    """
    failed = row.get("status") == "failed"
    if metric == "failure_rate":
        return 1.0 if failed else 0.0
    if metric in CITATION_METRICS:
        if str(row.get("label")) == UNANSWERABLE:
            return None
        if failed:
            return 0.0
    elif failed:
        return None
    value = row.get(metric)
    return None if value is None or value != value else float(value)  # NaN is undefined


def _index(
    rows: Sequence[Mapping[str, Any]], system: str, side: str
) -> dict[tuple[str, str], Mapping[str, Any]]:
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    duplicates = []
    for row in rows:
        if row.get("system") != system:
            continue
        key = (str(row["qid"]), str(row["mixture"]))
        if key in out:
            duplicates.append(key)
        out[key] = row
    problems = [f"{side}: {len(duplicates)} duplicate mixtures, e.g. {duplicates[:3]}"] * bool(
        duplicates
    )
    if not out:
        problems.append(f"{side}: no {system!r} rows")
    if problems:
        raise GateInputError("; ".join(problems))
    return out


def _check_same_mixtures(
    reference: Mapping[tuple[str, str], Mapping[str, Any]],
    candidate: Mapping[tuple[str, str], Mapping[str, Any]],
) -> None:
    """Both sides must have answered the same frozen mixtures (same passages, same relevance)."""
    problems = []
    only_ref = sorted(set(reference) - set(candidate))
    only_new = sorted(set(candidate) - set(reference))
    if only_ref:
        problems.append(f"{len(only_ref)} mixtures only in the reference, e.g. {only_ref[:3]}")
    if only_new:
        problems.append(f"{len(only_new)} mixtures only in the challenger, e.g. {only_new[:3]}")
    differing = [
        key
        for key in sorted(set(reference) & set(candidate))
        for field_name in ("kinds", "relevant", "n_passages")
        if reference[key].get(field_name) != candidate[key].get(field_name)
    ]
    if differing:
        problems.append(
            f"{len(set(differing))} mixtures differ in passages or relevance (not the same frozen "
            f"mixtures: build both with one config and seed), e.g. {sorted(set(differing))[:3]}"
        )
    if problems:
        raise GateInputError("cannot compare the evaluations: " + "; ".join(problems))


def _mixture_types(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[str]:
    present = {str(p[1]["mixture"]) for p in pairs}
    return [t for t in MIXTURE_TYPES if t in present] + sorted(present - set(MIXTURE_TYPES))


# ---------------------------------------------------------------------------- generator gate


@dataclass(frozen=True)
class GeneratedOutcome:
    """What became of one generation request: parsed into a question, and accepted by the
    critiques. ``key`` identifies the request (context, label, seed) across models."""

    key: str
    parsed: bool
    accepted: bool


@dataclass(frozen=True)
class GeneratorGateConfig:
    """Tolerances of the generator gate (rates in [0, 1])."""

    max_parse_rate_decrease: float = 0.05
    max_acceptance_rate_decrease: float = 0.05
    min_parse_rate: float = 0.5
    confidence: float = 0.95
    n_resamples: int = 9999
    seed: int = 13

    @classmethod
    def from_settings(cls, settings: PromotionSettings) -> GeneratorGateConfig:
        return cls(
            max_parse_rate_decrease=settings.generator_max_parse_rate_decrease,
            max_acceptance_rate_decrease=settings.generator_max_acceptance_rate_decrease,
            min_parse_rate=settings.generator_min_parse_rate,
            confidence=settings.confidence,
            n_resamples=settings.n_resamples,
            seed=settings.seed,
        )


_RATES: dict[str, Callable[[GeneratedOutcome], float]] = {
    "parse_rate": lambda o: float(o.parsed),
    "acceptance_rate": lambda o: float(o.accepted),
}


def decide_generator_promotion(
    champion: Sequence[GeneratedOutcome] | None,
    challenger: Sequence[GeneratedOutcome],
    config: GeneratorGateConfig | None = None,
) -> GateDecision:
    """Promote a question generator when its parse and acceptance rates on the same requests are
    not worse than the champion's beyond the tolerances. Without a champion, its parse rate must
    reach ``min_parse_rate``."""
    config = config or GeneratorGateConfig()
    new = _outcomes_by_key(challenger, "challenger")
    settings = asdict(config)
    if champion is None:
        rate = sum(o.parsed for o in new.values()) / len(new)
        passed = rate >= config.min_parse_rate
        check = GateCheck(
            GUARD, "parse_rate", ALL, None, rate, None, None, None, None, len(new),
            config.min_parse_rate, passed, note=f"first generator: needs >= {config.min_parse_rate:g}",
            undefined=dict.fromkeys(("champion", "diff", "ci_low", "ci_high", "p_value"), "no champion"),
        )  # fmt: skip
        reason = (
            f"first generator: parse rate {rate:.3f} (n={len(new)}) "
            f"{'reaches' if passed else 'is below'} the minimum {config.min_parse_rate:g}"
        )
        return GateDecision(passed, reason, "none", (check,), settings)
    old = _outcomes_by_key(champion, "champion")
    if set(old) != set(new):
        missing = sorted(set(old) ^ set(new))
        raise GateInputError(
            f"the generators answered different requests ({len(missing)} keys on one side only, "
            f"e.g. {missing[:3]}): evaluate both on the same contexts, labels and seeds"
        )
    keys = sorted(new)
    tolerances = {
        "parse_rate": config.max_parse_rate_decrease,
        "acceptance_rate": config.max_acceptance_rate_decrease,
    }
    checks = []
    for metric, rate_of in _RATES.items():
        stats = compare_paired(
            [rate_of(old[k]) for k in keys],
            [rate_of(new[k]) for k in keys],
            n_resamples=config.n_resamples,
            confidence=config.confidence,
            seed=config.seed,
        )
        drop = -(stats.diff or 0.0)
        checks.append(
            GateCheck(
                GUARD, metric, ALL, stats.mean_a, stats.mean_b, stats.diff, stats.ci_low,
                stats.ci_high, stats.p_value, stats.n, tolerances[metric],
                passed=drop <= tolerances[metric] + 1e-12,
                note=f"decrease {drop:+.4f} vs tolerance {tolerances[metric]:g}",
                undefined=dict(stats.undefined), ci_method=stats.ci_method, mde=stats.mde,
            )
        )  # fmt: skip
    failed = [c for c in checks if not c.passed]
    if failed:
        reason = "; ".join(
            f"{c.metric} fell from {c.champion:.3f} to {c.challenger:.3f} "
            f"(more than {c.tolerance:g}, n={c.n})"
            for c in failed
        )
    else:
        reason = (
            "; ".join(f"{c.metric} {c.champion:.3f} -> {c.challenger:.3f}" for c in checks)
            + f" (n={len(keys)}): within tolerance"
        )
    return GateDecision(not failed, reason, CHAMPION, tuple(checks), settings)


def _outcomes_by_key(
    outcomes: Sequence[GeneratedOutcome], side: str
) -> dict[str, GeneratedOutcome]:
    problems = []
    out: dict[str, GeneratedOutcome] = {}
    for outcome in outcomes:
        if outcome.key in out:
            problems.append(f"duplicate request {outcome.key!r}")
        if outcome.accepted and not outcome.parsed:
            problems.append(f"{outcome.key!r} accepted but not parsed")
        out[outcome.key] = outcome
    if not out:
        problems.append("no outcomes")
    if problems:
        raise GateInputError(f"{side}: " + "; ".join(problems[:10]))
    return out


# ----------------------------------------------------------------------- evidence extractor gate

EVIDENCE_PRIMARY = "correct"
QUESTIONS = "questions"
"""The facet of the evidence gate's checks: every held-out question."""


def decide_evidence_promotion(
    current_rows: Sequence[Mapping[str, Any]],
    challenger_rows: Sequence[Mapping[str, Any]],
    *,
    confidence: float,
    n_resamples: int,
    seed: int,
    max_faithfulness_decrease: float,
    max_compression_decrease: float,
    serving: str = "the champion",
) -> GateDecision:
    """Promote a new evidence extractor or not, from per-question rows of both extractors on
    the same frozen held-out questions (``qid``, ``correct`` 1/0, ``faithfulness``,
    ``compression``; a failed extraction counts ``correct`` 0 and has no other value).

    Primary: the answerer's correctness with the evidence must improve with the paired CI above
    zero. Guards: mean faithfulness may not fall by more than ``max_faithfulness_decrease``;
    mean compression may not fall by more than ``max_compression_decrease`` of the current
    extractor's (a relative bound, turned into the metric's unit here)."""
    current = {str(r["qid"]): r for r in current_rows}
    challenger = {str(r["qid"]): r for r in challenger_rows}
    repeated = len(current_rows) - len(current) + len(challenger_rows) - len(challenger)
    if set(current) != set(challenger) or repeated:
        raise GateInputError(
            "the two extractors were not evaluated on the same questions "
            f"({len(current)} vs {len(challenger)}, {len(set(current) ^ set(challenger))} differ, "
            f"{repeated} repeated)"
        )
    pairs = [(current[q], challenger[q]) for q in sorted(current)]
    compressions = [v for r, _ in pairs if (v := gate_value(r, "compression")) is not None]
    mean_compression = sum(compressions) / len(compressions) if compressions else 0.0
    guards = (
        Guard("faithfulness", True, max_faithfulness_decrease),
        Guard("compression", True, max_compression_decrease * mean_compression),
    )
    config = GateConfig(
        primary_metric=EVIDENCE_PRIMARY,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
        guards=guards,
    )
    checks = [_check(PRIMARY, EVIDENCE_PRIMARY, QUESTIONS, pairs, config)]
    checks += [_check(GUARD, g.metric, QUESTIONS, pairs, config, guard=g) for g in guards]
    return _decision(checks, CHAMPION, config, serving)
