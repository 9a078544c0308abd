"""The funnel's LLM verdicts as judges: identity on every verdict, and gate vs advise."""

from __future__ import annotations

import json
from typing import Any

from ragtrail.generate.critiques import ALL, LlmCritiqueJudge, apply_thresholds
from ragtrail.generate.labeller import LlmLabellerJudge, label_candidates
from ragtrail.judges.contract import JudgeInput, JudgeRole, VerdictType
from ragtrail.llm.cache import MemoryLLMCache
from ragtrail.llm.client import LLMClient
from ragtrail.records import CandidateStatus, LabelSource, QACandidate
from ragtrail.testset.quotas import select_with_quotas
from tests.unit.generate import routed_backend, sample_contexts


def client(handlers: dict[str, Any], model_id: str = "routed-test-v1") -> LLMClient:
    return LLMClient(routed_backend(handlers, model_id=model_id), MemoryLLMCache(), max_attempts=1)


def says(label: str) -> Any:
    return lambda f: json.dumps({"label_name": label, "reason": "scripted"})


def cand(cid: str, requested: str = "fact_single") -> QACandidate:
    return QACandidate(
        candidate_id=cid,
        context=sample_contexts()[0],
        statement_kind="fact",
        requested_label=requested,
        statement="Full-time staff receive 27 days of annual leave per year.",
        question=f"How many annual leave days do full-time staff get ({cid})?",
        answer="27 days",
    )


def test_labeller_spec_names_model_and_prompt_and_changes_with_them() -> None:
    a = LlmLabellerJudge(client({"label": says("summary")})).spec
    b = LlmLabellerJudge(client({"label": says("summary")}, model_id="other-model")).spec
    assert (a.name, a.role, a.verdict_type, a.backend) == (
        "labeller",
        JudgeRole.LABELLER,
        VerdictType.CATEGORY,
        "llm",
    )
    assert a.model.endswith("routed-test-v1") and a.version != b.version
    assert a.version == LlmLabellerJudge(client({"label": says("summary")})).spec.version


def test_labeller_verdicts_and_failures_carry_the_judge() -> None:
    judge = LlmLabellerJudge(client({"label": lambda f: "not json at all"}))
    [verdict] = judge.judge([JudgeInput(context="c", question="q?")])
    assert not verdict.ok and verdict.error and verdict.raw == ("not json at all",)
    assert verdict.judge == judge.spec.ref


def test_gating_labeller_decides_the_label_and_fails_on_bad_output() -> None:
    good, bad = cand("a"), cand("b")
    label_candidates(client({"label": says("summary")}), [good], gates=True)
    assert good.observed_label == "summary" and good.label_source == LabelSource.JUDGE
    assert good.label_judge and good.label_judge.startswith("labeller@j-")
    assert good.effective_label == "summary" and not good.label_matches
    label_candidates(client({"label": lambda f: "nonsense"}), [bad], gates=True)
    assert bad.status is CandidateStatus.FAILED and bad.failure_cause.startswith("label_failed:")


def test_advisory_labeller_records_its_verdict_but_keeps_the_requested_label() -> None:
    item, broken = cand("a"), cand("b")
    label_candidates(client({"label": says("summary")}), [item], gates=False)
    assert item.observed_label == "summary"  # the verdict is kept, for the report
    assert item.label_source == LabelSource.REQUESTED
    assert item.effective_label == "fact_single" and item.label_matches
    label_candidates(client({"label": lambda f: "nonsense"}), [broken], gates=False)
    assert broken.status is CandidateStatus.PENDING  # an advisory failure fails nothing
    assert broken.label_reason.startswith("label_failed:") and "nonsense" in broken.raw_outputs


def test_quotas_take_advisory_items_at_their_requested_label() -> None:
    judged, advised = cand("a"), cand("b")
    label_candidates(client({"label": says("summary")}), [judged], gates=True)
    label_candidates(client({"label": says("summary")}), [advised], gates=False)
    result = select_with_quotas([judged, advised], {"fact_single": 2})
    assert [c.candidate_id for c in result.selected] == ["b"]


def rated(ratings: dict[str, int]) -> QACandidate:
    c = cand("r")
    c.critiques = {name: {"rating": ratings.get(name, 4), "evaluation": ""} for name in ALL}
    return c


def test_only_gating_critiques_reject() -> None:
    advisory = rated({"stand_alone": 1})
    apply_thresholds([advisory], gating=["qa_tautology"])
    assert advisory.status is CandidateStatus.PENDING
    gated = rated({"stand_alone": 1})
    apply_thresholds([gated], gating=["stand_alone"])
    assert gated.status is CandidateStatus.REJECTED
    assert gated.reject_reason == "critique:stand_alone=1<3"


def test_a_failed_advisory_critique_fails_nothing() -> None:
    c = rated({})
    c.critiques["c_clarity"] = {"rating": None, "error": "parse_error", "raw": ["?"]}
    apply_thresholds([c], gating=["stand_alone"])
    assert c.status is CandidateStatus.PENDING
    apply_thresholds([c], gating=["c_clarity"])
    assert c.status is CandidateStatus.FAILED and c.failure_cause == "critique_failed:c_clarity"


def test_critique_judge_is_a_rating_judge_per_criterion() -> None:
    judge = LlmCritiqueJudge(
        "qa_tautology", client({"critique_qa_tautology": lambda f: '{"rating": 2}'})
    )
    assert judge.spec.name == "critique.qa_tautology"
    assert judge.spec.verdict_type is VerdictType.RATING
    verdicts = judge.judge([JudgeInput(question="q?", answer="a"), JudgeInput(question="q?")])
    assert [v.value for v in verdicts] == [2, 2]
