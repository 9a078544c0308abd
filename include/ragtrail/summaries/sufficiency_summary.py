"""A QA set's sufficiency evaluation: the raters, Correct / Abstain / Hallucinate by context and
label, self-rated confidence and the selective-generation policy."""

from __future__ import annotations

from ragtrail.summaries.base import Figure, Record


class SufficiencyHeadline(Record):
    """What the night's result, the sufficiency-metrics event and the CLI line carry of a set:
    the hallucination rate per answer setting (all labels, both strata), the rater that split
    the strata and the selective policy's gain in area under the coverage curve."""

    run_id: str
    answerer: str
    primary_rater: str
    hallucination: dict[str, Figure]
    auc_gain: Figure | None
