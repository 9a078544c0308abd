"""Closed vocabularies as StrEnums: stored strings and JSON stay exactly what they were."""

from __future__ import annotations

import json

import pytest

from ragtrail.records import (
    ANSWERABLE_LABELS,
    LABELS,
    STATEMENT_KINDS,
    CandidateStatus,
    QuestionLabel,
    RejectKind,
    StatementKind,
    format_reject_reason,
    parse_reject_reason,
    reject_kind,
)
from ragtrail.testset.quotas import DOCUMENT_CAP, LABEL_MISMATCH, QUOTA_FULL


def test_label_tuples_derive_from_the_enum_as_plain_strings() -> None:
    assert LABELS == ("fact_single", "summary", "reasoning", "unanswerable")
    assert ANSWERABLE_LABELS == ("fact_single", "summary", "reasoning")
    assert all(type(label) is str for label in LABELS)
    assert list(QuestionLabel) == [QuestionLabel(label) for label in LABELS]


def test_enum_members_serialise_as_their_values() -> None:
    record = {
        "kind": StatementKind.FOREIGN,
        "label": STATEMENT_KINDS[StatementKind.FOREIGN],
        "status": CandidateStatus.ACCEPTED,
    }
    plain = {"kind": "foreign", "label": "unanswerable", "status": "accepted"}
    assert json.dumps(record, separators=(",", ":")) == json.dumps(plain, separators=(",", ":"))
    assert f"{StatementKind.CONCLUSION}" == "conclusion"
    assert STATEMENT_KINDS["fact"] == "fact_single"  # plain-string lookups keep working
    assert StatementKind.BASELINE not in STATEMENT_KINDS


@pytest.mark.parametrize(
    ("kind", "detail", "stored"),
    [
        (RejectKind.CRITIQUE, "q_to_c_groundedness=2<3", "critique:q_to_c_groundedness=2<3"),
        (RejectKind.LABEL_MISMATCH, "summary->reasoning", "label_mismatch:summary->reasoning"),
        (RejectKind.DUPLICATE_OF, "previous version#4", "duplicate_of:previous version#4"),
        (RejectKind.QUOTA_FULL, None, "quota_full"),
        (RejectKind.DOCUMENT_CAP, None, "document_cap"),
    ],
)
def test_reject_reason_format_and_parse_round_trip(
    kind: RejectKind, detail: str | None, stored: str
) -> None:
    assert format_reject_reason(kind, detail) == stored
    assert type(format_reject_reason(kind, detail)) is str
    assert parse_reject_reason(stored) == (kind, detail)
    assert reject_kind(stored) is kind


def test_reject_reason_edge_cases() -> None:
    joined = "critique:a=1<3; critique:b=2<3"
    assert parse_reject_reason(joined) == (RejectKind.CRITIQUE, "a=1<3")
    assert reject_kind(None) is None and reject_kind("") is None
    assert reject_kind("mystery:x") is None
    with pytest.raises(ValueError):
        parse_reject_reason("mystery:x")
    assert (QUOTA_FULL, DOCUMENT_CAP, LABEL_MISMATCH) == (
        "quota_full",
        "document_cap",
        "label_mismatch",
    )


def test_closed_vocabularies_are_plain_value_tuples_in_declaration_order() -> None:
    from ragtrail.records import (
        DEFAULT_SUFFICIENCY_RATERS,
        ENTAILMENT_FALLBACKS,
        ENTAILMENT_JUDGES,
        FUSION_METHODS,
        MIXTURE_TYPES,
        SCENARIOS,
        SUFFICIENCY_RATERS,
        EntailmentJudgeName,
        GateMode,
    )

    assert MIXTURE_TYPES == ("relevant+irrelevant", "relevant+seemingly", "all")
    assert SCENARIOS == ("G", "RTG-vanilla", "RTG-query-gen", "GTR", "RTG-gold")
    assert FUSION_METHODS == ("combsum", "combmnz", "rrf")
    assert SUFFICIENCY_RATERS == (
        "sufficiency.llm",
        "sufficiency.llm_1shot",
        "sufficiency.chunked",
        "sufficiency.contains_answer",
        "sufficiency.entailment",
        "sufficiency.trained",
    )
    assert SUFFICIENCY_RATERS[:-1] == DEFAULT_SUFFICIENCY_RATERS  # a trained one is opted into
    assert ENTAILMENT_JUDGES == (
        "entailment.nli",
        "entailment.embedding",
        "entailment.llm",
        "entailment.trained",
    )
    assert ENTAILMENT_FALLBACKS == ("entailment.embedding", "entailment.llm", "entailment.trained")
    assert EntailmentJudgeName.CONFIGURED == "entailment" and GateMode.GATE == "gate"
    for values in (MIXTURE_TYPES, SCENARIOS, FUSION_METHODS, SUFFICIENCY_RATERS):
        assert all(type(v) is str for v in values)


def test_the_modules_import_the_one_declaration() -> None:
    from ragtrail import config, records
    from ragtrail.evaluate.attribution import scenarios
    from ragtrail.evaluate.citations import mixtures
    from ragtrail.index import rank_fusion
    from ragtrail.judges import entailment, gate, sufficiency_raters

    assert mixtures.MIXTURE_TYPES is records.MIXTURE_TYPES is config.MIXTURE_TYPES
    assert scenarios.SCENARIOS is records.SCENARIOS is config.SCENARIOS
    assert rank_fusion.FUSION_METHODS is records.FUSION_METHODS
    assert config.SUFFICIENCY_RATERS is records.SUFFICIENCY_RATERS
    assert sufficiency_raters.LLM_RATER is records.SufficiencyRaterName.LLM
    assert entailment.NLI_JUDGE_NAME is records.EntailmentJudgeName.NLI
    assert gate.GATE is records.GateMode.GATE and gate.ADVISE is records.GateMode.ADVISE


def test_settings_keep_their_values_and_refuse_unknown_ones(tmp_path) -> None:
    from pydantic import ValidationError

    from ragtrail.config import CitationSettings, JudgeSettings, SufficiencySettings

    citations = CitationSettings(fusion="combmnz", scenarios=["GTR", "G"])
    assert citations.fusion == "combmnz" and citations.scenarios == ("G", "GTR")
    assert CitationSettings().model_dump(mode="json")["fusion"] == "rrf"
    assert json.dumps(CitationSettings().fusion) == '"rrf"'
    assert (
        JudgeSettings(entailment_fallback="entailment.llm").entailment_fallback == "entailment.llm"
    )
    assert SufficiencySettings(raters=["sufficiency.chunked", "sufficiency.llm"]).raters == (
        "sufficiency.llm",
        "sufficiency.chunked",
    )
    for bad in (
        lambda: CitationSettings(fusion="pm2"),
        lambda: CitationSettings(mixture_types=["bogus"]),
        lambda: JudgeSettings(entailment_fallback="entailment.nli"),
        lambda: SufficiencySettings(raters=["sufficiency.bogus"]),
    ):
        with pytest.raises(ValidationError):
            bad()


def test_a_gate_decision_serialises_its_mode_as_the_plain_string() -> None:
    from ragtrail.judges.contract import JudgeRole, JudgeSpec, VerdictType
    from ragtrail.judges.gate import decide

    spec = JudgeSpec("labeller", "j-1", JudgeRole.LABELLER, "llm", "m", VerdictType.CATEGORY)
    decision = decide(spec, None, None).as_dict()
    assert decision["mode"] == "advise"
    assert json.loads(json.dumps(decision))["mode"] == "advise"
    assert '"mode": "advise"' in json.dumps(decision)
