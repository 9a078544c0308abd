"""The champion/challenger gate on hand-built per-mixture rows with hand-computed outcomes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from scipy import stats

from ragtrail.config import PromotionSettings
from ragtrail.evaluate.comparison.promotion import (
    ALL,
    GateConfig,
    GateInputError,
    GeneratedOutcome,
    GeneratorGateConfig,
    decide_generator_promotion,
    decide_promotion,
    gate_value,
)

TYPES = ("relevant+irrelevant", "relevant+seemingly", "all")
CONFIG = GateConfig(n_resamples=2000)


def row(
    qid: str,
    mixture: str,
    f1: float | None,
    *,
    system: str = "model",
    words: float = 10.0,
    invalid: float | None = 0.0,
    status: str = "ok",
    label: str = "simple",
    relevant: tuple[int, ...] = (1,),
) -> dict[str, Any]:
    return {
        "qid": qid,
        "label": label,
        "mixture": mixture,
        "system": system,
        "status": status,
        "n_passages": 7,
        "kinds": ["relevant", "irrelevant"],
        "relevant": list(relevant),
        "citation_precision": f1,
        "citation_recall": f1,
        "citation_f1": f1,
        "invalid_citation_rate": invalid,
        "answer_words": words,
    }


SCALE = (0.9, 1.0, 1.1)
"""Each question's F1 is the mixture's F1 times its scale (mean 1): paired differences vary from
question to question, as real ones do, and their mean is the difference of the mixtures' F1."""


def grid(f1_by_type: dict[str, float], **kwargs: Any) -> list[dict[str, Any]]:
    return [
        row(f"q{i}", t, f1_by_type[t] * scale, **kwargs)
        for i, scale in enumerate(SCALE)
        for t in TYPES
    ]


def uniform(f1: float, **kwargs: Any) -> list[dict[str, Any]]:
    return grid(dict.fromkeys(TYPES, f1), **kwargs)


def test_clear_improvement_promotes_with_exact_difference() -> None:
    decision = decide_promotion(uniform(0.2), uniform(0.6), CONFIG)
    primary = decision.checks[0]
    assert decision.promote, decision.reason
    assert primary.metric == "citation_f1" and primary.facet == ALL and primary.n == 9
    # the paired differences are 0.36, 0.40, 0.44 (three each): below 20 pairs, the t interval
    d = [0.4 * scale for scale in SCALE for _ in TYPES]
    low, high = stats.t.interval(0.95, 8, loc=np.mean(d), scale=stats.sem(d))
    assert primary.diff == pytest.approx(0.4) and primary.ci_method == "t"
    assert (primary.ci_low, primary.ci_high) == pytest.approx((low, high))
    assert primary.mde == pytest.approx(np.std(d, ddof=1) * 1.066973, rel=1e-5)  # TTestPower n=9
    assert primary.champion == pytest.approx(0.2) and primary.challenger == pytest.approx(0.6)
    assert decision.reference == "champion"
    assert "improved" in decision.reason and "n=9" in decision.reason
    # one guard per metric plus one F1 guard per mixture type
    assert [(c.metric, c.facet) for c in decision.checks[1:]] == [
        ("invalid_citation_rate", ALL),
        ("answer_words", ALL),
        ("failure_rate", ALL),
        *[("citation_f1", t) for t in TYPES],
    ]


def test_interval_reaching_below_zero_does_not_promote() -> None:
    # 6 pairs, one +0.4 and five 0: mean 0.0667, sd 0.1633, t(5) = 2.5706 -> [-0.105, 0.238]
    champion = [row(f"q{i}", "all", 0.2) for i in range(6)]
    challenger = [row("q0", "all", 0.6)] + [row(f"q{i}", "all", 0.2) for i in range(1, 6)]
    decision = decide_promotion(champion, challenger, CONFIG)
    primary = decision.checks[0]
    assert primary.diff == pytest.approx(0.4 / 6)
    assert primary.ci_low == pytest.approx(0.4 / 6 - 2.5706 * 0.163299 / 6**0.5, abs=1e-4)
    assert not decision.promote
    assert "citation_f1 did not improve" in decision.reason and "not above zero" in decision.reason


def test_a_small_n_keeps_the_challenger_and_says_which_n_would_decide() -> None:
    # 3 mixtures, differences +0.1, -0.1, +0.3: a mean gain of 0.1 that n = 3 cannot confirm
    champion = [row(f"q{i}", "all", 0.4) for i in range(3)]
    challenger = [row(f"q{i}", "all", f1) for i, f1 in enumerate((0.5, 0.3, 0.7))]
    decision = decide_promotion(champion, challenger, CONFIG)
    primary = decision.checks[0]
    assert not decision.promote and primary.n == 3
    sd = 0.2  # sample sd of (0.1, -0.1, 0.3)
    assert primary.mde == pytest.approx(sd * 3.264044, rel=1e-5)  # TTestPower(nobs=3)
    # the n that detects a gain of 0.1 with sd 0.2 (effect 0.5) at 80% power: 34 (TTestPower)
    assert primary.needed_n == 34
    assert "n=3 detects differences of 0.6528 or more with 80% power" in decision.reason
    assert "detecting the observed +0.1000 needs n >= 34" in decision.reason


def test_equal_differences_give_no_interval_and_keep_the_challenger() -> None:
    # every pair +0.4: no spread, so no interval can be built (never a zero-width one)
    champion = [row(f"q{i}", "all", 0.2) for i in range(4)]
    challenger = [row(f"q{i}", "all", 0.6) for i in range(4)]
    decision = decide_promotion(champion, challenger, CONFIG)
    assert not decision.promote and decision.checks[0].ci_low is None
    assert "no spread" in decision.reason and "smallest detectable difference unknown" in (
        decision.reason
    )


def test_reason_names_the_model_in_service() -> None:
    decision = decide_promotion(
        uniform(0.5, words=10.0),
        uniform(0.5, words=20.0),
        CONFIG,
        serving="the configured answerer (no champion yet)",
    )
    assert decision.reference == "champion"  # the side of the comparison, for the record
    assert "did not improve on the configured answerer (no champion yet)" in decision.reason
    assert "(the configured answerer (no champion yet) 10.0000, challenger 20.0000" in (
        decision.reason
    )
    assert "the champion" not in decision.reason


def test_equal_models_do_not_promote() -> None:
    decision = decide_promotion(uniform(0.5), uniform(0.5), CONFIG)
    assert not decision.promote and decision.checks[0].diff == 0.0


def test_guarded_answer_length_blocks_and_is_named() -> None:
    decision = decide_promotion(uniform(0.2, words=10.0), uniform(0.6, words=20.0), CONFIG)
    assert decision.checks[0].passed  # F1 did improve
    assert not decision.promote
    failed = decision.failed
    assert [(c.metric, c.facet) for c in failed] == [("answer_words", ALL)]
    assert failed[0].diff == pytest.approx(10.0) and failed[0].tolerance == 5.0
    assert "guard answer_words" in decision.reason and "regressed by 10.0000" in decision.reason


def test_answer_length_within_tolerance_passes() -> None:
    decision = decide_promotion(uniform(0.2, words=10.0), uniform(0.6, words=14.0), CONFIG)
    assert decision.promote


def test_regression_on_one_mixture_type_blocks() -> None:
    champion = grid({"relevant+irrelevant": 0.3, "relevant+seemingly": 0.5, "all": 0.3})
    challenger = grid({"relevant+irrelevant": 0.8, "relevant+seemingly": 0.4, "all": 0.8})
    decision = decide_promotion(champion, challenger, CONFIG)
    primary = decision.checks[0]
    assert primary.diff == pytest.approx((6 * 0.5 - 3 * 0.1) / 9)  # 0.3
    assert primary.passed
    assert [(c.metric, c.facet) for c in decision.failed] == [("citation_f1", "relevant+seemingly")]
    assert decision.failed[0].diff == pytest.approx(-0.1)
    assert "relevant+seemingly mixtures" in decision.reason and not decision.promote


def test_failed_answers_score_zero_and_trip_the_failure_guard() -> None:
    champion = uniform(0.5)
    challenger = uniform(0.9)
    challenger[0] = row("q0", TYPES[0], None, status="failed", invalid=None)
    # F1 pairs: 0.4 x scale for 8 of them (sum 0.84 + 2.4) and q0's 0.45 -> 0 failure = -0.45;
    # mean = (3.24 - 0.45) / 9 = 0.31
    decision = decide_promotion(champion, challenger, CONFIG)
    assert decision.checks[0].diff == pytest.approx(0.31)
    failure = next(c for c in decision.checks if c.metric == "failure_rate")
    assert failure.diff == pytest.approx(1 / 9) and not failure.passed
    words = next(c for c in decision.checks if c.metric == "answer_words")
    assert words.n == 8  # the failed answer has no length
    assert not decision.promote and "failure_rate" in decision.reason


def test_invalid_citation_rate_guard() -> None:
    decision = decide_promotion(uniform(0.2, invalid=0.0), uniform(0.6, invalid=0.25), CONFIG)
    assert [c.metric for c in decision.failed] == ["invalid_citation_rate"]


def test_guard_without_values_is_recorded_as_not_checked() -> None:
    decision = decide_promotion(uniform(0.2, invalid=None), uniform(0.6, invalid=None), CONFIG)
    check = next(c for c in decision.checks if c.metric == "invalid_citation_rate")
    assert check.n == 0 and check.passed and check.note.startswith("not checked")
    assert decision.promote
    text = json.dumps(decision.as_json(), allow_nan=False)
    assert json.loads(text)["checks"][1]["undefined"]["diff"].startswith("not checked")


def test_unanswerable_mixtures_do_not_enter_citation_metrics() -> None:
    unanswerable = row("u", "all", None, label="unanswerable", relevant=())
    assert gate_value(unanswerable, "citation_f1") is None
    assert gate_value(unanswerable, "answer_words") == 10.0
    assert gate_value(row("x", "all", None, status="failed"), "citation_f1") == 0.0
    assert gate_value(row("x", "all", None, status="failed"), "failure_rate") == 1.0


def test_first_model_must_beat_the_random_baseline() -> None:
    good = uniform(0.6) + uniform(0.2, system="random")
    decision = decide_promotion(None, good, CONFIG)
    assert decision.promote and decision.reference == "random_baseline"
    assert decision.checks[0].diff == pytest.approx(0.4) and len(decision.checks) == 1
    assert "random citation baseline" in decision.reason
    weak = uniform(0.2) + uniform(0.2, system="random")
    refused = decide_promotion(None, weak, CONFIG)
    assert not refused.promote and "did not improve on the random citation baseline" in (
        refused.reason
    )


def test_different_mixtures_are_refused_with_every_problem() -> None:
    champion = uniform(0.2)
    challenger = [*uniform(0.6)[1:], row("extra", "all", 0.5)]
    challenger[0] = {**challenger[0], "relevant": [2]}
    with pytest.raises(GateInputError) as err:
        decide_promotion(champion, challenger, CONFIG)
    message = str(err.value)
    assert "1 mixtures only in the reference" in message
    assert "1 mixtures only in the challenger" in message
    assert "differ in passages or relevance" in message


def test_no_model_rows_is_an_error() -> None:
    with pytest.raises(GateInputError, match="no 'model' rows"):
        decide_promotion(uniform(0.2), uniform(0.2, system="random"), CONFIG)


def test_decision_json_is_strict_and_deterministic() -> None:
    champion = [row(f"q{i}", "all", 0.1 * (i % 4)) for i in range(12)]
    challenger = [row(f"q{i}", "all", 0.1 * (i % 4) + 0.05 * (i % 3)) for i in range(12)]
    first = decide_promotion(champion, challenger, CONFIG).as_json()
    again = decide_promotion(champion, challenger, CONFIG).as_json()
    assert first == again
    assert json.loads(json.dumps(first, allow_nan=False))["config"]["n_resamples"] == 2000


def test_config_from_settings_uses_its_tolerances() -> None:
    config = GateConfig.from_settings(PromotionSettings(max_answer_words_increase=12.0))
    decision = decide_promotion(uniform(0.2, words=10.0), uniform(0.6, words=20.0), config)
    assert decision.promote


# ---------------------------------------------------------------------------- generator


def outcomes(parsed: list[bool], accepted: list[bool]) -> list[GeneratedOutcome]:
    return [
        GeneratedOutcome(f"r{i}", p, a)
        for i, (p, a) in enumerate(zip(parsed, accepted, strict=True))
    ]


def test_generator_gate_blocks_a_lower_acceptance_rate() -> None:
    champion = outcomes([True] * 10, [True] * 6 + [False] * 4)
    challenger = outcomes([True] * 10, [True] * 4 + [False] * 6)
    decision = decide_generator_promotion(
        champion, challenger, GeneratorGateConfig(n_resamples=500)
    )
    accept = next(c for c in decision.checks if c.metric == "acceptance_rate")
    assert accept.champion == pytest.approx(0.6) and accept.challenger == pytest.approx(0.4)
    assert not decision.promote and "acceptance_rate fell from 0.600 to 0.400" in decision.reason


def test_generator_gate_passes_within_tolerance() -> None:
    champion = outcomes([True] * 20, [True] * 10 + [False] * 10)
    challenger = outcomes([True] * 19 + [False], [True] * 10 + [False] * 10)  # parse -0.05
    decision = decide_generator_promotion(
        champion, challenger, GeneratorGateConfig(n_resamples=500)
    )
    assert decision.promote, decision.reason


def test_first_generator_needs_the_minimum_parse_rate() -> None:
    ok = decide_generator_promotion(
        None, outcomes([True, True, False, False], [True] * 2 + [False] * 2)
    )
    assert ok.promote and "parse rate 0.500" in ok.reason
    low = decide_generator_promotion(None, outcomes([True, False, False], [False] * 3))
    assert not low.promote


def test_generator_gate_refuses_bad_outcomes() -> None:
    with pytest.raises(GateInputError, match="accepted but not parsed"):
        decide_generator_promotion(None, [GeneratedOutcome("a", False, True)])
    with pytest.raises(GateInputError, match="different requests"):
        decide_generator_promotion(outcomes([True], [True]), [GeneratedOutcome("z", True, True)])
