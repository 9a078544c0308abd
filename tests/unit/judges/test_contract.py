"""The judge contract: a spec survives storage (as_dict -> from_dict) unchanged."""

from __future__ import annotations

from ragtrail.judges.contract import JudgeRole, JudgeSpec, VerdictType, judge_version


def test_spec_round_trips_through_its_dict() -> None:
    spec = JudgeSpec(
        name="labeller",
        version=judge_version(model="m", prompt=["label", "1"]),
        role=JudgeRole.LABELLER,
        backend="llm",
        model="scripted:m",
        verdict_type=VerdictType.CATEGORY,
        categories=("fact_single", "summary"),
        approximate=True,
        description="d",
    )
    assert JudgeSpec.from_dict(spec.as_dict()) == spec
