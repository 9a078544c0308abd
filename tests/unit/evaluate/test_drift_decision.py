"""The drift decision and corpus drift against hand-computed values.

Per-query values go through the real pairing of ``runs compare`` (``compare_runs``); the facets
carry no ``label`` unless a test wants the pooled cell, so each case has the rows it names.
Exact sign-flip p-values: ``m`` non-zero differences all of one sign give ``p = 2 / 2**m``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ragtrail import jsonsafe
from ragtrail.evaluate.comparison.corpus_drift import (
    NO_BASELINE_DOCUMENTS,
    SnapshotDocuments,
    corpus_drift,
)
from ragtrail.evaluate.comparison.drift_decision import DriftPolicy, PrimaryMetric, assess_drift
from ragtrail.evaluate.comparison.paired import NO_PAIRS
from ragtrail.evaluate.comparison.run_compare import compare_runs
from ragtrail.evaluate.contract import facet_key

PRIMARIES = {
    "citations": PrimaryMetric("citations", "citation_f1", greater_is_better=True),
    "cah": PrimaryMetric("cah", "hallucination_rate", greater_is_better=False),
}


@dataclass(frozen=True)
class V:
    evaluation: str
    metric: str
    facet_key: str
    qid: str
    value: float | None


def values(
    per_q: list[float | None], *, facets: dict | None = None, ev: str = "citations", m: str = ""
) -> list[V]:
    metric = m or PRIMARIES[ev].metric
    key = facet_key(facets or {"mixture": "m1"})
    return [V(ev, metric, key, f"q{i}", v) for i, v in enumerate(per_q)]


def assess(a: list[V], b: list[V], policy: DriftPolicy | None = None):
    rows = compare_runs(a, b, n_resamples=9999, seed=13)
    return assess_drift(rows, PRIMARIES, policy or DriftPolicy())


def test_a_clear_drop_fires() -> None:
    # 10 questions from 1.0 to 0.0: diff -1, p = 2 / 2**10 (exact), alone in the family.
    result = assess(values([1.0] * 10), values([0.0] * 10))
    (row,) = result.rows
    assert (row.baseline, row.current, row.diff) == (1.0, 0.0, -1.0)
    assert row.p_value == pytest.approx(2 / 1024) and row.p_holm == pytest.approx(2 / 1024)
    assert row.direction == "worse" and row.tested and row.drifted and result.fired
    assert row.threshold == 0.05 and result.n_tested == 1
    assert row.name == "citations:citation_f1 [mixture=m1]"


def test_a_significant_drop_below_the_threshold_does_not_fire() -> None:
    # 1.0 -> 0.97 on 10 questions: as significant as above, but only 0.03 worse (< 0.05).
    result = assess(values([1.0] * 10), values([0.97] * 10))
    (row,) = result.rows
    assert row.diff == pytest.approx(-0.03) and row.p_holm == pytest.approx(2 / 1024)
    assert row.direction == "worse" and not row.drifted and not result.fired


def test_a_significant_improvement_does_not_fire() -> None:
    result = assess(values([0.0] * 10), values([1.0] * 10))
    (row,) = result.rows
    assert row.diff == 1.0 and row.direction == "better"
    assert row.p_holm == pytest.approx(2 / 1024) and not result.fired


def test_lower_is_better_metrics_drift_upwards() -> None:
    # The hallucination rate going from 0 to 1 is the drop here; 1 to 0 is an improvement.
    worse = assess(values([0.0] * 10, ev="cah"), values([1.0] * 10, ev="cah"))
    better = assess(values([1.0] * 10, ev="cah"), values([0.0] * 10, ev="cah"))
    assert worse.rows[0].direction == "worse" and worse.fired
    assert better.rows[0].direction == "better" and not better.fired


def test_holm_across_the_decision_changes_it() -> None:
    # Six questions all 1 -> 0: p = 2 / 64 = 0.03125 < 0.05, so one such cell alone drifts.
    one = assess(values([1.0] * 6), values([0.0] * 6))
    assert one.rows[0].p_holm == pytest.approx(0.03125) and one.fired
    # A second equally strong cell, in another evaluation: Holm multiplies the smaller p by 2
    # (0.0625), the larger by 1 then takes the running maximum (0.0625): neither drifts.
    a = values([1.0] * 6) + values([0.0] * 6, ev="cah")
    b = values([0.0] * 6) + values([1.0] * 6, ev="cah")
    two = assess(a, b)
    assert [r.p_value for r in two.rows] == pytest.approx([0.03125, 0.03125])
    assert [r.p_holm for r in two.rows] == pytest.approx([0.0625, 0.0625])
    assert not two.fired and all(r.direction == "worse" for r in two.rows)


def test_untested_rows_are_undefined_with_reasons_and_leave_the_family() -> None:
    few = values([1.0] * 3, facets={"mixture": "few"})
    only_a = values([1.0] * 10, facets={"mixture": "gone"})
    drop = values([1.0] * 6)
    result = assess(
        few + only_a + drop, values([0.0] * 3, facets={"mixture": "few"}) + values([0.0] * 6)
    )
    by_mixture = {r.facets["mixture"]: r for r in result.rows}
    assert not by_mixture["few"].tested and by_mixture["few"].p_holm is None
    assert by_mixture["few"].undefined["p_holm"] == "only 3 paired questions (min_n is 5)"
    gone = by_mixture["gone"]
    assert gone.n == 0 and gone.diff is None and gone.direction is None
    assert gone.undefined["p_holm"] == NO_PAIRS and gone.undefined["direction"] == NO_PAIRS
    # Only the six-question cell is tested, so its p = 0.03125 is not corrected: it drifts.
    assert result.n_tested == 1 and by_mixture["m1"].p_holm == pytest.approx(0.03125)
    assert result.fired
    text = jsonsafe.dumps([r.to_json() for r in result.rows], "rows")
    assert "NaN" not in text


def test_per_metric_thresholds_excluded_facets_and_secondary_metrics() -> None:
    a = (
        values([1.0] * 10)
        + values([1.0] * 10, facets={"system": "random"})
        + values([1.0] * 10, m="citation_precision")
    )
    b = (
        values([0.7] * 10)
        + values([0.0] * 10, facets={"system": "random"})
        + values([0.0] * 10, m="citation_precision")
    )
    random_out = {"system": ("random",)}
    result = assess(a, b, DriftPolicy(exclude_facets=random_out))
    (row,) = result.rows  # the random system and the secondary metric are not watched
    assert row.diff == pytest.approx(-0.3) and row.threshold == 0.05 and result.fired
    # The '<evaluation>:<metric>' key wins over the bare metric name.
    thresholds = {"citations:citation_f1": 0.5, "citation_f1": 0.01}
    lenient = assess(a, b, DriftPolicy(thresholds=thresholds, exclude_facets=random_out))
    (row,) = lenient.rows
    assert row.threshold == 0.5 and not lenient.fired


def test_a_policy_lists_every_problem() -> None:
    with pytest.raises(ValueError) as err:
        DriftPolicy(alpha=1.5, threshold=-0.1, thresholds={"x": float("nan")}, min_n=0)
    message = str(err.value)
    for part in ("alpha", "'threshold'", "'x'", "min_n"):
        assert part in message


def test_corpus_drift_by_hand() -> None:
    before = SnapshotDocuments("s1", {"a": "h1", "b": "h2", "c": "h3", "d": "h4"})
    after = SnapshotDocuments("s2", {"a": "h1", "b": "h2x", "e": "h5"})
    drift = corpus_drift(before, after)
    assert (drift.added, drift.updated, drift.removed, drift.unchanged) == (1, 1, 2, 1)
    record = drift.to_json()
    assert (record["added_share"], record["updated_share"], record["removed_share"]) == (
        0.25,
        0.25,
        0.5,
    )
    assert record["changed_share"] == 1.0 and record["undefined"] == {}
    empty = corpus_drift(SnapshotDocuments("s0"), after).to_json()
    assert empty["removed_share"] is None
    assert empty["undefined"]["changed_share"] == NO_BASELINE_DOCUMENTS
