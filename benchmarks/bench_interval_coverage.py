"""Do the intervals hold at small n? Coverage of ragtrail's intervals against the percentile
bootstrap they replaced, by simulation.

For each n and each kind of data the night produces, :data:`TRIALS` samples are drawn from a
distribution whose true mean is known, and each method's 95% interval is checked: does it hold
the true mean (coverage, ideally 0.95), how wide is it, and how often is it missing (null) or
zero-width. Kinds:

- ``0/1 p=0.2``: per-question outcomes (Recall@5 with one relevant passage, correctness);
- ``beta(2,5)``: a skewed bounded score in [0, 1] (citation F1, faithfulness);
- ``diff``: a paired difference of two correlated [0, 1] scores (what drift and the gates test).

``ragtrail`` is :func:`ragtrail.stats.intervals.mean_interval` (Wilson for 0/1, t below 20, BCa
from 20); ``percentile`` is the percentile bootstrap every number used before. No model, no
data beyond numpy's seeded generator: the numbers are exactly reproducible.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks._common import machine_line, timer, write_section
from ragtrail.stats.intervals import mean_interval

TRIALS = 1000
RESAMPLES = 1000
SEED = 7
SIZES = (1, 2, 3, 5, 10, 20, 50)


def _percentile(values: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    idx = rng.integers(0, values.size, size=(RESAMPLES, values.size))
    low, high = np.quantile(values[idx].mean(axis=1), [0.025, 0.975])
    return float(low), float(high)


Draw = Callable[[np.random.Generator, int], np.ndarray]


def _outcomes(rng: np.random.Generator, n: int) -> np.ndarray:
    return (rng.random(n) < 0.2).astype(float)


def _scores(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.beta(2.0, 5.0, n)


def _diff(rng: np.random.Generator, n: int) -> np.ndarray:
    """B - A for a score A ~ beta(2, 5) and B = A + N(0.05, 0.15) clipped to [0, 1]."""
    a = rng.beta(2.0, 5.0, n)
    return np.clip(a + rng.normal(0.05, 0.15, n), 0.0, 1.0) - a


def _true_diff_mean() -> float:
    a = np.random.default_rng(0).beta(2.0, 5.0, 2_000_000)
    b = np.clip(a + np.random.default_rng(1).normal(0.05, 0.15, a.size), 0.0, 1.0)
    return float((b - a).mean())


class Tally:
    """Coverage, width, missing and zero-width counts of one method over the trials."""

    def __init__(self) -> None:
        self.covered = self.missing = self.zero = 0
        self.width = 0.0
        self.trials = 0

    def add(self, low: float | None, high: float | None, truth: float) -> None:
        self.trials += 1
        if low is None or high is None:
            self.missing += 1
            return
        self.covered += low <= truth <= high
        self.zero += high == low
        self.width += high - low

    def row(self) -> str:
        given = self.trials - self.missing
        missing = f"{self.missing / self.trials:.1%}"
        if not given:
            return f"– | – | {missing} | –"
        return (
            f"{self.covered / given:.3f} | {self.width / given:.3f} | {missing} | "
            f"{self.zero / self.trials:.1%}"
        )


def run() -> str:
    kinds: dict[str, tuple[Draw, float, tuple[float, float] | None]] = {
        "0/1 p=0.2": (_outcomes, 0.2, (0.0, 1.0)),
        "beta(2,5)": (_scores, 2.0 / 7.0, (0.0, 1.0)),
        "diff": (_diff, _true_diff_mean(), None),
    }
    rows = []
    with timer() as elapsed:
        for kind, (draw, truth, bounds) in kinds.items():
            for n in SIZES:
                rng = np.random.default_rng(SEED)
                tally = {name: Tally() for name in ("ragtrail", "percentile")}
                chosen: dict[str, int] = {}
                for trial in range(TRIALS):
                    values = draw(rng, n)
                    ours = mean_interval(values, bounds=bounds, n_resamples=RESAMPLES, seed=trial)
                    chosen[ours.method.value] = chosen.get(ours.method.value, 0) + 1
                    tally["ragtrail"].add(ours.low, ours.high, truth)
                    tally["percentile"].add(*_percentile(values, rng), truth)
                picks = ", ".join(f"{m} {c}" for m, c in sorted(chosen.items()))
                for name, t in tally.items():
                    rows.append(
                        f"| {kind} | {n} | {name} | {picks if name == 'ragtrail' else '–'} | {t.row()} |"
                    )
    seconds = elapsed()
    return f"""## Interval coverage at small n — ragtrail's intervals vs the percentile bootstrap

`python -m benchmarks.bench_interval_coverage --write`; {machine_line()}; {TRIALS} simulated samples
per row (numpy seed {SEED}), {RESAMPLES} resamples per bootstrap; {seconds:.0f} s. Coverage is the
share of the intervals given that hold the true mean (95% is the aim); *missing* is the share of
samples with no interval (null with the reason); *zero-width* the share with low = high. The
method column counts which interval ragtrail chose over the samples (Wilson for 0/1 outcomes,
t below 20 values, BCa from 20, none for one value or no spread).

| data | n | method | chosen | coverage | mean width | missing | zero-width |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Reading: at n ≤ 5 the percentile bootstrap covers 0–82% of the time, and it is zero-width for a
single value and for 0/1 samples that are all 0 or all 1 (35–100% of the 0/1 samples at n ≤ 5):
intervals that read as certainty. ragtrail's intervals there are Wilson for 0/1 outcomes (0.79 at
n = 1, where one outcome is either in or out; 0.89–0.97 from n = 2), t for bounded scores and
paired differences (0.92–0.95 from n = 2, as wide as the data allow), and none, with the reason,
for a single value. From n = 20 BCa and the percentile bootstrap both cover 0.92–0.94 on these
smooth data (slightly under 95%, as bootstraps are at moderate n); BCa's correction of bias and
skew matters where the data are skewed.
"""


if __name__ == "__main__":
    import sys

    section = run()
    print(section)
    if "--write" in sys.argv:
        write_section("interval_coverage", section)
