"""The minimum detectable effect and the needed n, checked against statsmodels' TTestPower."""

from __future__ import annotations

import pytest
from statsmodels.stats.power import TTestPower

from ragtrail.stats.power import detectable, needed_n, power, standardised_mde


@pytest.mark.parametrize("n", [3, 6, 12, 40, 200])
@pytest.mark.parametrize("alternative", ["two-sided", "larger"])
def test_standardised_mde_matches_statsmodels(n: int, alternative: str) -> None:
    ref = TTestPower().solve_power(nobs=n, alpha=0.05, power=0.8, alternative=alternative)
    assert standardised_mde(n, alternative=alternative) == pytest.approx(ref, rel=1e-5)


@pytest.mark.parametrize("effect", [0.2, 0.5, 1.0])
def test_power_and_needed_n_match_statsmodels(effect: float) -> None:
    assert power(effect, 30) == pytest.approx(
        TTestPower().power(effect_size=effect, nobs=30, alpha=0.05), rel=1e-9
    )
    continuous = TTestPower().solve_power(effect_size=effect, alpha=0.05, power=0.8)
    n = needed_n(effect)
    assert n == int(-(-continuous // 1))  # the smallest whole n reaching 80%
    assert power(effect, n) >= 0.8 > power(effect, n - 1)


def test_detectable_from_differences_by_hand() -> None:
    d = [0.1, -0.2, 0.3, 0.0, 0.2, -0.1]
    sd = 0.18708286933869708  # sample sd (ddof=1) of d
    out = detectable(d, target=0.05)
    assert out.sd == pytest.approx(sd)
    assert out.mde == pytest.approx(sd * TTestPower().solve_power(nobs=6, alpha=0.05, power=0.8))
    assert out.needed_n == needed_n(0.05 / sd)
    assert out.needed_n > 6


def test_detectable_is_unknown_without_spread() -> None:
    assert detectable([0.0, 0.0, 0.0]).mde is None
    assert "spread" in detectable([0.0, 0.0, 0.0]).reason
    assert detectable([0.4]).mde is None
    again = detectable([0.1, 0.3, -0.2]).at(alpha=0.01, target=0.1)
    assert again.mde > detectable([0.1, 0.3, -0.2]).mde  # a stricter alpha sees less
    with pytest.raises(ValueError):
        needed_n(0.0)
