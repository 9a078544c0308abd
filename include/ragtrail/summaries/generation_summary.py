"""A generated test-set version's summary (``testsets/<corpus>/<version>/generation.json``): targets
and what was achieved, the acceptance funnel, the label matrix and distribution, critique ratings,
model usage, failures by cause and the judges' gate decisions; and the generation step's result
(what the night's result and ``ragtrail nightly --json`` carry)."""

from __future__ import annotations

from pydantic import Field

from ragtrail.summaries.base import Record, is_none
from ragtrail.summaries.judge_summary import JudgeGate


def _empty(value: dict[str, str]) -> bool:
    return not value


class FunnelStage(Record):
    """How many candidates reached one acceptance stage."""

    stage: str
    count: int


class LabelDistribution(Record):
    """Accepted items per label (ours) and the single-prompt baseline's labelled items."""

    ours: dict[str, int]
    baseline: dict[str, int]


class CritiqueStats(Record):
    """One criterion's ratings of one label: how many, their mean (null without a rating) and
    a histogram of the ratings 1..5."""

    n: int
    mean: float | None
    hist: list[int]


class StageUsage(Record):
    """Model calls, cache hits, failures and tokens of one stage, with its cost (null when no
    price is configured)."""

    stage: str
    calls: int
    cache_hits: int
    failures: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None


class FailureGroup(Record):
    """Failed or rejected candidates of one cause, with a few examples (raw output or reason)."""

    cause: str
    count: int
    examples: list[str]


class GenerationSummary(Record):
    """One finalized generation run (see the module docstring). ``version`` is null when nothing
    was accepted; ``artifact_uri`` (the items' Parquet) is set on the summary the run returns, not
    in the stored ``generation.json``."""

    version: str | None
    corpus: str
    snapshot_id: str
    run_id: str
    seed: int
    targets: dict[str, int]
    achieved: dict[str, int]
    accepted: dict[str, int]
    kept_from_previous: int
    retired: int
    funnel: list[FunnelStage]
    label_matrix: dict[str, dict[str, int]]
    distribution: LabelDistribution
    critiques: dict[str, dict[str, CritiqueStats]]
    usage: list[StageUsage]
    model_calls: int
    cache_hits: int
    failures: list[FailureGroup]
    backends: dict[str, str]
    judges: dict[str, JudgeGate]
    artifact_uri: str | None = Field(None, exclude_if=is_none)


class GenerationOutcome(Record):
    """What the generation step hands on: the version (null when nothing was accepted), what was
    accepted against the targets, the model calls, the judges, and whether the version was
    generated this time or reused from an unchanged corpus."""

    version: str | None
    corpus: str
    snapshot_id: str
    accepted: dict[str, int]
    targets: dict[str, int]
    model_calls: int
    cache_hits: int
    judges: dict[str, JudgeGate]
    regenerated: bool

    @classmethod
    def of(cls, summary: GenerationSummary, *, regenerated: bool) -> GenerationOutcome:
        fields = {
            name: getattr(summary, name) for name in cls.model_fields if name != "regenerated"
        }
        return cls(**fields, regenerated=regenerated)

    @property
    def gating_judges(self) -> list[str]:
        """The judges whose verdicts could reject items, by name."""
        return sorted(name for name, gate in self.judges.items() if gate.gates)
