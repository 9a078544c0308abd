"""Citation precision/recall/F1 by hand, the unanswerable path, the random baseline's closed
form against its simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragtrail.evaluate.citations.rage_metrics import (
    NO_CITATIONS,
    NO_RELEVANT,
    f1_score,
    score_citations,
)
from ragtrail.evaluate.citations.random_baseline import (
    expected_random_scores,
    simulate_random_citations,
)


def test_scores_by_hand() -> None:
    # 7 passages, relevant {2, 5}; cites 2, 3, 2 (repeat), 9 (invalid).
    s = score_citations([2, 3, 2, 9], relevant={2, 5}, n_passages=7)
    assert s.distinct_citations == 3
    assert s.invalid_citations == 1
    assert s.precision == pytest.approx(1 / 3)  # the invalid 9 counts as a wrong citation
    assert s.recall == pytest.approx(1 / 2)
    assert s.f1 == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))  # = 0.4
    assert s.f1 == pytest.approx(0.4)
    assert s.invalid_citation_rate == pytest.approx(1 / 3)
    assert s.cited_any and not s.undefined


def test_perfect_and_wrong_answers() -> None:
    perfect = score_citations([5, 2], {2, 5}, 7)
    assert (perfect.precision, perfect.recall, perfect.f1) == (1.0, 1.0, 1.0)
    wrong = score_citations([1], {2, 5}, 7)
    assert (wrong.precision, wrong.recall, wrong.f1) == (0.0, 0.0, 0.0)


def test_no_citation_has_no_precision_but_zero_recall_and_f1() -> None:
    s = score_citations([], {3}, 4)
    assert s.precision is None and s.undefined["citation_precision"] == NO_CITATIONS
    assert s.invalid_citation_rate is None
    assert s.undefined["invalid_citation_rate"] == NO_CITATIONS
    assert (s.recall, s.f1) == (0.0, 0.0)
    assert not s.cited_any


def test_unanswerable_mixture_has_no_recall_and_no_division_error() -> None:
    cited = score_citations([1, 2], set(), 6)
    assert cited.precision == 0.0
    assert cited.recall is None and cited.f1 is None
    assert cited.undefined == {"citation_recall": NO_RELEVANT, "citation_f1": NO_RELEVANT}
    silent = score_citations([], set(), 6)
    assert (silent.precision, silent.recall, silent.f1) == (None, None, None)
    assert not silent.cited_any
    assert set(silent.as_dict()["undefined"]) == {
        "citation_precision",
        "citation_recall",
        "citation_f1",
        "invalid_citation_rate",
    }


def test_relevant_numbers_outside_the_mixture_are_a_bug() -> None:
    with pytest.raises(ValueError, match=r"outside 1\.\.3"):
        score_citations([1], {4}, 3)


def test_f1_rules() -> None:
    assert f1_score(None, 0.0) == 0.0
    assert f1_score(None, None) is None
    assert f1_score(0.5, None) is None
    assert f1_score(0.0, 0.5) == 0.0
    assert f1_score(1.0, 0.5) == pytest.approx(2 / 3)


def test_closed_form_by_hand() -> None:
    # n = 4, r = 1, c in {1, 2, 3}: E[P] = 1/4, E[R] = E[c]/n = 2/4,
    # E[F1] = mean_c 2 c r / (n (c + r)) = (2/8 + 4/12 + 6/16) / 3.
    e = expected_random_scores(4, 1)
    assert e.precision == pytest.approx(0.25)
    assert e.recall == pytest.approx(0.5)
    assert e.f1 == pytest.approx((2 / 8 + 4 / 12 + 6 / 16) / 3)
    assert e.distinct_citations == pytest.approx(2.0)
    # n = 2 caps c at 2: E[c] = 1.5.
    assert expected_random_scores(2, 2).recall == pytest.approx(0.75)
    unanswerable = expected_random_scores(6, 0)
    assert (unanswerable.precision, unanswerable.recall, unanswerable.f1) == (0.0, None, None)


@pytest.mark.parametrize("n", [0, -1])
def test_closed_form_refuses_empty_mixtures(n: int) -> None:
    with pytest.raises(ValueError, match="at least one passage"):
        expected_random_scores(n, 0)


@pytest.mark.parametrize(("n", "relevant"), [(4, {1}), (7, {2, 5}), (9, {1, 4, 8}), (2, {2})])
def test_simulation_converges_to_the_closed_form(n: int, relevant: set[int]) -> None:
    repeats = 20_000
    rng = np.random.default_rng(0)
    sim = simulate_random_citations(n, relevant, rng, repeats)
    exact = expected_random_scores(n, len(relevant))
    # Per-draw scores lie in [0, 1], so their standard deviation is at most 0.5: the mean's
    # standard error is below 0.5 / sqrt(repeats); allow 4 of them.
    tolerance = 4 * 0.5 / math.sqrt(repeats)
    assert sim.precision == pytest.approx(exact.precision, abs=tolerance)
    assert sim.recall == pytest.approx(exact.recall, abs=tolerance)
    assert sim.f1 == pytest.approx(exact.f1, abs=tolerance)
    assert sim.distinct_citations == pytest.approx(exact.distinct_citations, abs=4 / repeats**0.5)


def test_simulation_is_seeded_and_handles_unanswerable_mixtures() -> None:
    a = simulate_random_citations(6, {3}, np.random.default_rng(5), 50)
    b = simulate_random_citations(6, {3}, np.random.default_rng(5), 50)
    assert a == b
    none = simulate_random_citations(6, set(), np.random.default_rng(5), 50)
    assert none.precision == 0.0 and none.recall is None and none.f1 is None


def test_one_to_three_all_mixture_values() -> None:
    # 1-3/3/3 "all" mixtures: n = r + 6, r uniform in {1, 2, 3}: P = mean(r/n). (RAGE reports
    # P .14 R .19 F1 .16 with 1.47 distinct citations on NQ: its random system cited fewer.)
    scores = [expected_random_scores(r + 6, r) for r in (1, 2, 3)]
    precision = sum(s.precision for s in scores) / 3
    assert precision == pytest.approx((1 / 7 + 2 / 8 + 3 / 9) / 3)
    recall = sum(s.recall or 0.0 for s in scores) / 3
    assert recall == pytest.approx((2 / 7 + 2 / 8 + 2 / 9) / 3)
