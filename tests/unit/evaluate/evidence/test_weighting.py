"""CoV weights of the three experts on a table worked out by hand, their tau limits, and the
weighted combination."""

from __future__ import annotations

import math

import pytest

from ragtrail.evaluate.evidence.weighting import EXPERTS, combine, cov_weights, equal_weights

# Two samples of one query, scored by the three experts:
#   faithfulness [1.0, 0.5]: mean 0.75, population std 0.25 -> c_f = 0.25 / 0.75 = 1/3
#   helpfulness  [0.5, 0.5]: mean 0.5,  std 0              -> c_h = 0
#   conciseness  [0.2, 0.6]: mean 0.4,  std 0.2            -> c_c = 0.2 / 0.4  = 1/2
TABLE = {
    "faithfulness": [1.0, 0.5],
    "helpfulness": [0.5, 0.5],
    "conciseness": [0.2, 0.6],
}


def test_cov_weights_at_tau_1_by_hand() -> None:
    # softmax(1/3, 0, 1/2): e^(1/3) = 1.3956124251, e^0 = 1, e^(1/2) = 1.6487212707
    # sum = 4.0443336958 -> 0.3450784555, 0.2472595179, 0.4076620266
    alpha = cov_weights(TABLE, tau=1.0)
    assert list(alpha) == list(EXPERTS)
    assert alpha["faithfulness"] == pytest.approx(0.3450784555, abs=1e-9)
    assert alpha["helpfulness"] == pytest.approx(0.2472595179, abs=1e-9)
    assert alpha["conciseness"] == pytest.approx(0.4076620266, abs=1e-9)
    assert math.fsum(alpha.values()) == pytest.approx(1.0, abs=1e-12)


def test_cov_weights_at_tau_half_by_hand() -> None:
    # c / 0.5 = (2/3, 0, 1): e^(2/3) = 1.9477340411, 1, e = 2.7182818285; sum 5.6660158695
    alpha = cov_weights(TABLE, tau=0.5)
    assert alpha["faithfulness"] == pytest.approx(0.3437572513, abs=1e-9)
    assert alpha["helpfulness"] == pytest.approx(0.1764908576, abs=1e-9)
    assert alpha["conciseness"] == pytest.approx(0.4797518911, abs=1e-9)


def test_a_large_tau_gives_near_equal_weights_and_a_small_one_picks_the_widest_expert() -> None:
    smooth = cov_weights(TABLE, tau=1e6)
    assert all(a == pytest.approx(1 / 3, abs=1e-6) for a in smooth.values())
    sharp = cov_weights(TABLE, tau=0.01)  # logits 33.3, 0, 50
    assert sharp["conciseness"] > 0.9999
    # tau = 1e-4 makes the logits 3333 and 5000: a naive exp would overflow
    tiny = cov_weights(TABLE, tau=1e-4)
    assert tiny["conciseness"] == 1.0
    assert math.fsum(tiny.values()) == pytest.approx(1.0)


def test_an_expert_without_positive_mean_or_values_gets_zero_spread() -> None:
    # c = (0 [all zero], 0 [mean -0.05], 0 [no value], 1 [mean 0.5 std 0.5]):
    # softmax(0, 0, 0, 1) = (1, 1, 1, e) / (3 + e); e / (3 + e) = 0.4753668862
    alpha = cov_weights(
        {"zeros": [0.0, 0.0], "negative": [-0.2, 0.1], "empty": [], "wide": [0.0, 1.0]},
        tau=1.0,
    )
    assert alpha["zeros"] == alpha["negative"] == alpha["empty"]
    assert alpha["zeros"] == pytest.approx(1.0 / (3.0 + math.e))
    assert alpha["wide"] == pytest.approx(0.4753668862, abs=1e-9)


@pytest.mark.parametrize("tau", [0.0, -1.0, math.inf, math.nan])
def test_cov_weights_refuses_a_bad_tau(tau: float) -> None:
    with pytest.raises(ValueError, match="tau"):
        cov_weights(TABLE, tau=tau)


def test_cov_weights_refuses_no_expert_and_non_finite_scores() -> None:
    with pytest.raises(ValueError, match="no expert"):
        cov_weights({}, tau=1.0)
    with pytest.raises(ValueError, match="helpfulness"):
        cov_weights({**TABLE, "helpfulness": [0.5, math.nan]}, tau=1.0)


def test_equal_weights() -> None:
    assert equal_weights(EXPERTS) == dict.fromkeys(EXPERTS, 1 / 3)
    assert equal_weights(["a", "b"]) == {"a": 0.5, "b": 0.5}
    with pytest.raises(ValueError, match="repeat"):
        equal_weights(["a", "a"])
    with pytest.raises(ValueError, match="no expert"):
        equal_weights([])


def test_combine_is_the_weighted_sum_and_names_a_missing_expert() -> None:
    row = {"faithfulness": 1.0, "helpfulness": 0.5, "conciseness": 0.2, "other": 9.0}
    # 0.5 * 1.0 + 0.25 * 0.5 + 0.25 * 0.2 = 0.5 + 0.125 + 0.05 = 0.675 ("other" has no weight)
    weights = {"faithfulness": 0.5, "helpfulness": 0.25, "conciseness": 0.25}
    assert combine(row, weights) == pytest.approx(0.675)
    # with the tau=1 weights above: 0.3450784555 + 0.1236297590 + 0.0815324053 = 0.5502406198
    assert combine(row, cov_weights(TABLE, 1.0)) == pytest.approx(0.5502406198, abs=1e-9)
    with pytest.raises(ValueError, match="conciseness"):
        combine({"faithfulness": 1.0, "helpfulness": 0.5}, weights)
