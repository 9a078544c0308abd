"""Selective generation: curves, areas and thresholds by hand and against an independent
computation, the question split, the policy fit, the comparison and its bootstrap."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from ragtrail.evaluate.contract import EVALUATORS
from ragtrail.evaluate.sufficiency.selective import (
    CONFIDENCE_ONLY,
    WITH_SUFFICIENCY,
    CurvePoint,
    PolicyUndefinedError,
    RawFeature,
    SelectiveEvalConfig,
    SelectiveEvaluator,
    SelectiveInputs,
    SelectivePolicy,
    SelectiveRow,
    area_under_curve,
    compare_selective,
    evaluate_selective,
    fit_policy,
    selective_curve,
    split_by_question,
    threshold_for_coverage,
)
from ragtrail.jsonsafe import dumps
from ragtrail.stats.intervals import NO_BOOTSTRAP

# Seven rows, given out of order; sorted: 0.9 0.9 | 0.7 | 0.5 0.5 0.5 | 0.2
CONF = [0.5, 0.9, 0.2, 0.7, 0.5, 0.9, 0.5]
HITS = [True, True, True, True, False, False, False]


def brute_force_curve(conf: list[float], hits: list[bool]) -> list[tuple[float, float, float]]:
    """(threshold, coverage, accuracy) by masking every distinct value, with numpy."""
    c, h = np.array(conf), np.array(hits, dtype=float)
    return [(t, (c >= t).mean(), h[c >= t].mean()) for t in sorted(set(conf), reverse=True)]


def brute_force_auc(conf: list[float], hits: list[bool]) -> float:
    """Mean over j = 1..n of the accuracy of the smallest threshold set covering j rows."""
    c, h = np.array(conf), np.array(hits, dtype=float)
    n = len(conf)
    values = []
    for j in range(1, n + 1):
        t = max(t for t in set(conf) if (c >= t).sum() >= j)
        values.append(h[c >= t].mean())
    return float(np.mean(values))


def test_curve_with_ties_by_hand() -> None:
    curve = selective_curve(CONF, HITS)
    assert curve == [
        CurvePoint(2 / 7, 1 / 2, 0.9, 2),
        CurvePoint(3 / 7, 2 / 3, 0.7, 3),
        CurvePoint(6 / 7, 3 / 6, 0.5, 6),
        CurvePoint(7 / 7, 4 / 7, 0.2, 7),
    ]
    # step area: 2/7*1/2 + 1/7*2/3 + 3/7*1/2 + 1/7*4/7 = 157/294
    assert area_under_curve(curve) == pytest.approx(157 / 294)


@pytest.mark.parametrize("seed", range(5))
def test_curve_and_area_match_an_independent_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    conf = [float(v) for v in rng.choice([0.1, 0.3, 0.5, 0.8, 0.95], size=25)]
    hits = [bool(v) for v in rng.random(25) < 0.6]
    curve = selective_curve(conf, hits)
    expected = brute_force_curve(conf, hits)
    got = [(p.threshold, p.coverage, p.accuracy) for p in curve]
    assert np.allclose(np.array(got), np.array(expected))
    assert area_under_curve(curve) == pytest.approx(brute_force_auc(conf, hits))


def test_area_without_ties_is_the_mean_accuracy_of_the_top_k() -> None:
    conf, hits = [0.4, 0.8, 0.6, 0.2], [False, True, False, True]
    # sorted hits: T F F T -> accuracies at k=1..4: 1, 1/2, 1/3, 1/2
    assert area_under_curve(selective_curve(conf, hits)) == pytest.approx(
        (1 + 1 / 2 + 1 / 3 + 1 / 2) / 4
    )


def test_threshold_for_coverage_takes_the_largest_threshold_reaching_the_target() -> None:
    curve = selective_curve(CONF, HITS)
    assert threshold_for_coverage(curve, 0.8).threshold == 0.5  # 6/7 >= 0.8 > 3/7
    assert threshold_for_coverage(curve, 2 / 7).threshold == 0.9  # exactly reached
    assert threshold_for_coverage(curve, 0.3).threshold == 0.7
    assert threshold_for_coverage(curve, 1.0).threshold == 0.2
    with pytest.raises(ValueError, match="target coverage"):
        threshold_for_coverage(curve, 0.0)


def test_curve_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="2 confidences but 1 outcomes"):
        selective_curve([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="at least one row"):
        selective_curve([], [])
    with pytest.raises(ValueError, match="finite"):
        selective_curve([float("nan")], [True])


def row(
    rid: str, qid: str, hallucinated: bool, correct: bool = False, **features: float | None
) -> SelectiveRow:
    return SelectiveRow(rid, qid, features, correct, hallucinated)


def test_a_row_cannot_be_correct_and_hallucinated() -> None:
    with pytest.raises(ValueError, match="both correct and hallucinated"):
        row("r", "q", True, True)


def test_split_keeps_questions_together_and_is_seed_stable() -> None:
    rows = [row(f"q{q}/{s}", f"q{q}", False) for q in range(10) for s in ("a", "b", "c")]
    train, test = split_by_question(rows, 0.3, seed=7)
    train_q, test_q = {r.qid for r in train}, {r.qid for r in test}
    assert len(test_q) == 3 and len(train_q) == 7 and not train_q & test_q
    assert len(test) == 9 and len(train) == 21
    again = split_by_question(list(reversed(rows)), 0.3, seed=7)
    assert {r.qid for r in again[1]} == test_q  # row order does not matter
    assert [r.row_id for r in split_by_question(rows, 0.3, seed=7)[1]] == [r.row_id for r in test]
    assert any({r.qid for r in split_by_question(rows, 0.3, seed=s)[1]} != test_q for s in range(5))


def test_split_of_few_questions_keeps_one_on_each_side() -> None:
    rows = [row("a", "q1", False), row("b", "q2", False)]
    train, test = split_by_question(rows, 0.9, seed=0)
    assert len(train) == len(test) == 1
    only = [row("a", "q1", False), row("b", "q1", False)]
    assert split_by_question(only, 0.5, seed=0) == (only, [])


def separable_rows(copies: int = 1) -> list[SelectiveRow]:
    """Hallucinated iff insufficient and p_true < 0.5; correct otherwise. ``copies`` repeats the
    8 questions under new ids (p_correct a constant 0.5)."""
    out = []
    grid = list(itertools.product((0.0, 1.0), (0.1, 0.3, 0.6, 0.9)))
    for c, (q, (suff, pt)) in itertools.product(range(copies), enumerate(grid)):
        for k in range(3):
            hall = suff == 0.0 and pt < 0.5
            features = {"sufficient": suff, "p_true": pt + 0.01 * k, "p_correct": 0.5}
            out.append(SelectiveRow(f"q{q}.{c}/{k}", f"q{q}.{c}", features, not hall, hall))
    return out


def test_policy_on_a_separable_set_ranks_hallucinations_last_and_round_trips() -> None:
    rows = separable_rows()
    policy = fit_policy(rows, ["sufficient", "p_true"], iterations=20, seed=3)
    scores = {r.row_id: policy.score(r) for r in rows}
    bad = [scores[r.row_id] for r in rows if r.hallucinated]
    good = [scores[r.row_id] for r in rows if not r.hallucinated]
    assert len(bad) == 6 and max(bad) < min(good)
    assert all(c < 0 for c in policy.coefficients)  # more sufficiency / P(True): fewer halluc.
    assert (policy.train_n, policy.train_hallucinated, policy.excluded_missing) == (24, 6, 0)
    assert (
        policy.folds == 5 and policy.iterations == 20 and policy.class_weight in (None, "balanced")
    )
    assert 1e-3 <= policy.C <= 1e3 and policy.search_score <= 0
    stored = json.loads(dumps(policy.as_dict()))
    restored = SelectivePolicy.from_dict(stored)
    assert restored == policy
    assert [restored.score(r) for r in rows] == [scores[r.row_id] for r in rows]
    assert fit_policy(rows, ["sufficient", "p_true"], iterations=20, seed=3) == policy


def test_policy_score_is_sklearn_probability_of_not_hallucinating() -> None:
    rows = separable_rows()
    policy = fit_policy(rows, ["sufficient", "p_true"], iterations=10, seed=1)
    x = np.array([[r.features["sufficient"], r.features["p_true"]] for r in rows])
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    model = LogisticRegression(C=policy.C, class_weight=policy.class_weight, max_iter=1000)
    model.fit(z, [r.hallucinated for r in rows])
    expected = model.predict_proba(z)[:, 0]
    assert [policy.score(r) for r in rows] == pytest.approx(expected.tolist(), abs=1e-9)


def test_rows_missing_a_feature_are_left_out_and_counted() -> None:
    rows = [
        *separable_rows(),
        row("m1", "qm", True, p_true=0.2),
        row("m2", "qm", False, sufficient=None, p_true=0.4),
    ]
    policy = fit_policy(rows, ["sufficient", "p_true"], iterations=5, seed=0)
    assert policy.excluded_missing == 2 and policy.train_n == 24
    with pytest.raises(ValueError, match="lacks feature"):
        policy.score(rows[-1])


def test_undefined_policies_say_why() -> None:
    one_class = [row(f"r{i}", f"q{i}", False, True, sufficient=1.0, p_true=0.5) for i in range(6)]
    with pytest.raises(PolicyUndefinedError, match="all 6 training rows are not hallucinated"):
        fit_policy(one_class, ["sufficient", "p_true"], seed=0)
    one_positive = [*one_class, row("h", "qh", True, sufficient=0.0, p_true=0.1)]
    with pytest.raises(PolicyUndefinedError, match="1 hallucinated and 6 not"):
        fit_policy(one_positive, ["sufficient", "p_true"], seed=0)
    missing = [row("r", "q", True, p_true=0.2)]
    with pytest.raises(PolicyUndefinedError, match=r"no training row .* \(1 of 1 lack a feature\)"):
        fit_policy(missing, ["sufficient", "p_true"], seed=0)


# Test rows for the comparison: two raw features, a (poor) and b (good), over 4 questions.
COMPARE_ROWS = [
    row("1", "q1", False, True, a=0.2, b=0.9),
    row("2", "q1", True, False, a=0.8, b=0.1),
    row("3", "q2", False, True, a=0.6, b=0.7),
    row("4", "q3", False, False, a=0.4, b=0.4),  # an abstention: neither
    row("5", "q4", True, False, a=0.9, b=0.3),
    row("6", "q4", False, True, a=0.1, b=0.8),
]


def auc_of(feature: str, rows: list[SelectiveRow]) -> float:
    return brute_force_auc([r.features[feature] for r in rows], [r.correct for r in rows])  # type: ignore[misc]


def test_comparison_areas_gain_and_target_threshold_by_hand() -> None:
    comp = compare_selective(
        COMPARE_ROWS, RawFeature("b"), RawFeature("a"), target_coverage=0.5, bootstrap=200, seed=4
    )
    # b sorted: 0.9 T, 0.8 T, 0.7 T, 0.4 F, 0.3 F, 0.1 F -> accuracies 1 1 1 3/4 3/5 1/2
    auc_b = (1 + 1 + 1 + 3 / 4 + 3 / 5 + 1 / 2) / 6
    # a sorted: 0.9 F, 0.8 F, 0.6 T, 0.4 F, 0.2 T, 0.1 T -> 0 0 1/3 1/4 2/5 1/2
    auc_a = (0 + 0 + 1 / 3 + 1 / 4 + 2 / 5 + 1 / 2) / 6
    assert comp.auc(WITH_SUFFICIENCY) == pytest.approx(auc_b)
    assert comp.auc(CONFIDENCE_ONLY) == pytest.approx(auc_a)
    assert comp.auc_gain == pytest.approx(auc_b - auc_a)
    assert (comp.n_rows, comp.n_questions, comp.excluded_missing) == (6, 4, 0)
    assert comp.with_sufficiency is not None and comp.with_sufficiency.source == "raw:b"
    assert comp.with_sufficiency.at_target == CurvePoint(0.5, 1.0, 0.7, 3)
    out = json.loads(dumps(comp.as_dict()))
    assert out["auc_gain"] == pytest.approx(auc_b - auc_a)
    assert set(out["intervals"]) == {WITH_SUFFICIENCY, CONFIDENCE_ONLY, "auc_gain"}


def _copies(n: int) -> list[SelectiveRow]:
    """COMPARE_ROWS' four questions ``n`` times under new ids, with jittered scores."""
    return [
        row(
            f"{r.row_id}.{c}",
            f"{r.qid}.{c}",
            r.hallucinated,
            r.correct,
            a=r.features["a"] + 0.001 * c,
            b=r.features["b"] - 0.001 * c,
        )
        for c in range(n)
        for r in COMPARE_ROWS
    ]


def test_bca_resamples_questions_is_seeded_and_holds_the_gain() -> None:
    rows = _copies(5)  # 20 questions: the smallest number an AUC's interval is given for

    def run(seed: int):  # type: ignore[no-untyped-def]
        return compare_selective(rows, RawFeature("b"), RawFeature("a"), bootstrap=300, seed=seed)

    first, again, other = run(11), run(11), run(12)
    assert first.intervals == again.intervals
    assert first.intervals != other.intervals
    gain = first.intervals["auc_gain"]
    assert gain.method == "bca" and gain.n == 20
    assert gain.low is not None and gain.high is not None
    assert gain.low <= first.auc_gain <= gain.high  # type: ignore[operator]


def test_no_auc_interval_below_twenty_questions_or_without_resamples() -> None:
    comp = compare_selective(COMPARE_ROWS, RawFeature("b"), RawFeature("a"), bootstrap=100, seed=0)
    assert comp.intervals["auc_gain"].low is None
    assert comp.intervals["auc_gain"].reason == "4 test question(s): an AUC's interval needs 20"
    off = compare_selective(_copies(5), RawFeature("b"), RawFeature("a"), bootstrap=0, seed=0)
    assert off.as_dict()["intervals"]["auc_gain"]["undefined"]["low"] == NO_BOOTSTRAP


def test_comparison_drops_rows_either_scorer_cannot_score() -> None:
    rows = [*COMPARE_ROWS, row("7", "q5", False, True, a=0.5)]
    comp = compare_selective(rows, RawFeature("b"), RawFeature("a"), bootstrap=0, seed=0)
    assert (comp.n_rows, comp.excluded_missing, comp.n_questions) == (6, 1, 4)


def test_evaluate_selective_with_undefined_policies_falls_back_to_raw_p_true() -> None:
    # every training row answered correctly: no policy; the test side still has a curve
    rows = [
        row(f"r{q}", f"q{q}", False, True, sufficient=1.0, p_true=0.1 * q, p_correct=0.5)
        for q in range(8)
    ]
    run = evaluate_selective(rows, test_share=0.5, iterations=5, bootstrap=50, seed=2)
    assert run.policies == {WITH_SUFFICIENCY: None, CONFIDENCE_ONLY: None}
    assert "one class" in run.policy_undefined[WITH_SUFFICIENCY]
    comp = run.comparison
    assert comp.with_sufficiency is None and comp.auc_gain is None
    assert comp.confidence_only is not None and comp.confidence_only.source == "raw:p_true"
    assert comp.confidence_only.auc == 1.0
    out = json.loads(dumps(run.as_dict()))
    assert out["comparison"]["undefined"]["auc_gain"].startswith(
        "sufficiency+confidence: policy undefined: all 4"
    )
    assert out["policies"]["undefined"][CONFIDENCE_ONLY].startswith("all 4 training rows")
    assert len(out["split"]["test_qids"]) == 4


def test_selective_evaluator_follows_the_contract() -> None:
    assert EVALUATORS.get("selective") is SelectiveEvaluator
    rows = separable_rows(copies=2)
    evaluator = SelectiveEvaluator(SelectiveEvalConfig(iterations=5, bootstrap_samples=100, seed=1))
    result = evaluator.evaluate(SelectiveInputs(rows))
    assert result.primary_metric == "auc_gain" and result.greater_is_better
    by_metric = {a.metric: a for a in result.aggregates}
    assert set(by_metric) == {"auc_gain", "auc_sufficiency_confidence", "auc_confidence"}
    b = by_metric["auc_sufficiency_confidence"].value
    a = by_metric["auc_confidence"].value
    gain = by_metric["auc_gain"]
    assert a is not None and b is not None and gain.value == pytest.approx(b - a)
    # 8 test questions: too few for an AUC's interval, and the aggregate says so
    assert gain.ci_low is None and gain.n == 8 and gain.ci_method == "none"
    assert gain.undefined["ci_low"] == "8 test question(s): an AUC's interval needs 20"
    # with sufficiency the policy separates perfectly: its curve can only gain
    assert b > a
    run = evaluator.run(SelectiveInputs(rows))
    assert len(result.queries) == 2 * len(run.test_rows) == 2 * 24
    assert {q.facets["policy"] for q in result.queries} == {WITH_SUFFICIENCY, CONFIDENCE_ONLY}
