"""Statement extraction, candidate choice, question writing and unanswerable pairing.

Runs on the routed scripted backend of ``tests.unit.generate`` (a test double, not a model) and a
real SQLite LLM cache.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from ragtrail.generate.critiques import apply_thresholds, critique_candidates
from ragtrail.generate.labeller import label_candidates
from ragtrail.generate.steps import (
    StatementSet,
    candidate_id,
    extract_statements,
    jaccard,
    lexical_support,
    make_candidates,
    make_unanswerable,
    prompt_chain,
    tokens,
    write_questions,
)
from ragtrail.llm.backends.fault_injection import Fault, FaultInjectingBackend, FaultPlan
from ragtrail.llm.cache import MemoryLLMCache, SqlLLMCache
from ragtrail.llm.client import LLMClient
from ragtrail.records import CandidateStatus, QACandidate
from ragtrail.storage import tables
from tests.unit.generate import (
    calls_by_prompt,
    make_context,
    prompt_name,
    routed_backend,
    sample_contexts,
    sentences,
)


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    eng = create_engine(f"sqlite:///{tmp_path / 'meta.db'}")
    tables.metadata.create_all(eng)
    return eng


def extracted(**handlers: Any) -> tuple[list[StatementSet], Any, LLMClient]:
    backend = routed_backend(handlers)
    client = LLMClient(backend, MemoryLLMCache())
    return extract_statements(client, sample_contexts()), backend, client


def test_extract_statements_batches_one_call_per_stage() -> None:
    sets, backend, client = extracted()
    assert [s.context.chunk_id for s in sets] == [c.chunk_id for c in sample_contexts()]
    assert all(s.ok and not s.failures for s in sets)
    assert sets[0].theme == "Annual leave" and len(sets[0].facts) == 4
    short = next(s for s in sets if s.context.chunk_id == "handbook/review.md#0001")
    assert len(short.facts) == 1 and short.summaries == [] and short.conclusions == []
    assert backend.generate_calls == 3  # facts, summaries, conclusions: one batch each
    assert calls_by_prompt(backend) == {"facts": 5, "summaries": 4, "conclusions": 4}
    assert client.usage.totals("generate.facts").calls == 5
    assert client.usage.totals("generate.summaries").calls == 4


def test_failures_are_recorded_not_dropped() -> None:
    def facts(f: dict[str, Any]) -> str:
        if "approval" in f["context"]:
            return "Sure! Here are the facts: merge requests need approvals."  # no JSON
        return json.dumps({"theme": "T", "statements": sentences(f["context"])[:2]})

    def conclusions(f: dict[str, Any]) -> str:
        return json.dumps({"statements": [{"not": "a string"}]})

    sets, backend, _ = extracted(facts=facts, conclusions=conclusions)
    assert len(sets) == 5
    bad = sets[2]
    assert not bad.ok and bad.facts == [] and set(bad.failures) == {"facts"}
    fail = bad.failures["facts"]
    assert fail.cause == "parse_error" and len(fail.raw) == 3  # three attempts, all kept
    assert fail.raw[0].startswith("Sure! Here are the facts")
    good = [s for s in sets if s is not bad]
    derived = [s for s in good if len(s.facts) >= 2]
    assert len(derived) == 3 and all(s.summaries for s in derived)
    assert all(s.failures["conclusions"].cause == "validation_error" for s in derived)
    # neither the failed context nor the one-fact context got a derived call
    assert calls_by_prompt(backend)["summaries"] == 3


def test_derived_statements_copying_a_fact_are_dropped() -> None:
    def conclusions(f: dict[str, Any]) -> str:
        return json.dumps({"statements": [f["facts"][0], NEW_CONCLUSION]})

    sets, _, _ = extracted(conclusions=conclusions)
    assert sets[0].conclusions == [NEW_CONCLUSION]


NEW_CONCLUSION = "Staff with five years of service get three more annual leave days."


def test_statements_without_lexical_support_are_dropped_and_kept_for_audit() -> None:
    drift = "The Elm Street Library lends books for three weeks."

    def facts(f: dict[str, Any]) -> str:
        if "approval" in f["context"]:  # only drift: nothing grounded is left
            return json.dumps({"theme": "Review", "statements": [drift]})
        return json.dumps({"theme": "T", "statements": [drift, *sentences(f["context"])[:2]]})

    sets, _, _ = extracted(facts=facts)
    leave = sets[0]
    assert drift not in leave.facts and len(leave.facts) == 2
    (dropped,) = [d for d in leave.dropped if d.kind == "fact"]
    assert dropped.text == drift and dropped.reason.startswith("low_support:")
    review = sets[2]
    assert not review.ok and review.failures["facts"].cause == "ungrounded"
    assert drift in review.failures["facts"].raw[0]
    lenient = extract_statements(
        LLMClient(routed_backend({"facts": facts}), MemoryLLMCache()),
        sample_contexts(),
        min_support={"fact": 0.0},
    )
    assert drift in lenient[0].facts and lenient[2].ok
    assert lexical_support("Staff get leave.", tokens("staff leave rules")) == pytest.approx(2 / 3)


def test_sqlite_cache_replays_extraction_without_model_calls(engine: Engine) -> None:
    first = extract_statements(LLMClient(routed_backend(), SqlLLMCache(engine)), sample_contexts())
    again_backend = routed_backend()
    again = extract_statements(LLMClient(again_backend, SqlLLMCache(engine)), sample_contexts())
    assert again_backend.calls == [] and again == first


def test_make_candidates_is_seeded_and_deterministic() -> None:
    sets, _, _ = extracted()
    want = {"fact": 3, "summary": 2, "conclusion": 2}
    info = {"backend": "test", "seed": 1}
    a = make_candidates(sets, rng=random.Random(1), kinds_wanted=want, generator_info=info)
    b = make_candidates(sets, rng=random.Random(1), kinds_wanted=want, generator_info=info)
    assert [c.candidate_id for c in a] == [c.candidate_id for c in b]
    assert [c.statement for c in a] == [c.statement for c in b]
    assert [c.statement_kind for c in a] == ["fact"] * 3 + ["summary"] * 2 + ["conclusion"] * 2
    assert {c.requested_label for c in a} == {"fact_single", "summary", "reasoning"}
    # spread over contexts: three facts come from three different chunks
    assert len({c.context.chunk_id for c in a if c.statement_kind == "fact"}) == 3
    others = [
        [c.statement for c in make_candidates(sets, rng=random.Random(s), kinds_wanted=want)]
        for s in range(2, 8)
    ]
    assert any(o != [c.statement for c in a] for o in others)
    # ids are content addresses of (chunk hash, kind, statement, prompt versions)
    for c in a:
        assert len(c.candidate_id) == 24
        assert c.generator["prompts"] == prompt_chain(c.statement_kind)
        assert c.generator["seed"] == 1 and c.theme and c.status is CandidateStatus.PENDING
        assert c.candidate_id == candidate_id(
            c.context.chunk_hash, c.statement_kind, c.statement, prompt_chain(c.statement_kind)
        )
    assert len({c.candidate_id for c in a}) == len(a)


def test_make_candidates_takes_all_or_what_exists() -> None:
    sets, _, _ = extracted()
    every = make_candidates(sets, rng=random.Random(0), kinds_wanted=None)
    n_statements = sum(len(s.facts) + len(s.summaries) + len(s.conclusions) for s in sets)
    assert len(every) == n_statements
    many = make_candidates(sets, rng=random.Random(0), kinds_wanted={"summary": 100})
    assert len(many) == sum(len(s.summaries) for s in sets)
    with pytest.raises(ValueError, match="unknown kinds"):
        make_candidates(sets, rng=random.Random(0), kinds_wanted={"foreign": 2})


def test_candidate_id_changes_with_prompt_versions() -> None:
    base = candidate_id("h", "fact", "S.", {"facts": "1", "question": "1"})
    assert base == candidate_id("h", "fact", "S.", {"question": "1", "facts": "1"})
    assert base != candidate_id("h", "fact", "S.", {"facts": "2", "question": "1"})
    assert base != candidate_id("h", "summary", "S.", {"facts": "1", "question": "1"})


def test_write_questions_fills_and_records_failures() -> None:
    def question(f: dict[str, Any]) -> str:
        if "30 June" in f["statement"]:
            return '{"question": "According to the passage, when?"}'  # refers to the passage
        return json.dumps({"question": f"When: {f['statement'][:20]}?"})

    backend = routed_backend({"question": question})
    client = LLMClient(backend, MemoryLLMCache())
    sets = extract_statements(client, sample_contexts())
    cands = make_candidates(sets, rng=random.Random(3), kinds_wanted={"fact": 10})
    write_questions(client, cands)
    assert calls_by_prompt(backend)["question"] >= len(cands)
    failed = [c for c in cands if c.status is CandidateStatus.FAILED]
    assert len(failed) == 1 and "30 June" in failed[0].statement
    assert failed[0].failure_cause == "question_failed:validation_error"
    assert failed[0].question == "" and len(failed[0].raw_outputs) == 3
    for c in cands:
        if c not in failed:
            assert c.question.startswith("When:") and c.answer == c.statement
            assert c.raw_outputs  # raw model text kept for audit
    before = len(backend.calls)
    write_questions(client, cands)  # nothing left to do
    assert len(backend.calls) == before


def with_questions() -> list[QACandidate]:
    client = LLMClient(routed_backend(), MemoryLLMCache())
    cands = make_candidates(
        extract_statements(client, sample_contexts()), rng=random.Random(0), kinds_wanted=None
    )
    write_questions(client, cands)
    return cands


def test_unanswerable_pairs_come_from_other_documents() -> None:
    cands = with_questions()
    contexts = sample_contexts()
    foreign = make_unanswerable(cands, contexts, random.Random(5))
    assert len(foreign) == len(cands)
    for f in foreign:
        src = next(c for c in cands if c.candidate_id == f.generator["source_candidate_id"])
        assert f.context.doc_id != src.context.doc_id
        assert f.source_chunk_id == src.context.chunk_id and f.question == src.question
        assert f.statement_kind == "foreign" and f.requested_label == "unanswerable"
        assert f.answer == "" and f.observed_label is None
    again = make_unanswerable(cands, contexts, random.Random(5))
    assert [(f.candidate_id, f.context.chunk_id) for f in again] == [
        (f.candidate_id, f.context.chunk_id) for f in foreign
    ]
    limited = make_unanswerable(cands, contexts, random.Random(5), limit=3)
    assert len(limited) == 3 and len({f.candidate_id for f in limited}) == 3


def test_unanswerable_prefers_lexical_overlap() -> None:
    src_ctx = make_context("a.md", 0, "Staff get 27 days of annual leave.")
    near = make_context("b.md", 0, "Annual leave for contractors: 20 days, agreed with staff.")
    far = [
        make_context(f"far{i}.md", 0, f"Unrelated text number {i} about printers.")
        for i in range(6)
    ]
    src = QACandidate(
        candidate_id="src",
        context=src_ctx,
        statement_kind="fact",
        requested_label="fact_single",
        statement="Staff get 27 days of annual leave.",
        question="How many days of annual leave do staff get?",
    )
    for seed in range(5):
        (f,) = make_unanswerable([src], [src_ctx, near, *far], random.Random(seed), pool=1)
        assert f.context is near
    picked = {
        make_unanswerable([src], [src_ctx, near, *far], random.Random(s))[0].context.doc_id
        for s in range(30)
    }
    assert "b.md" in picked and len(picked) <= 5  # drawn among the top five only
    failed = QACandidate(**{**src.__dict__, "status": CandidateStatus.FAILED})
    assert make_unanswerable([failed], [src_ctx, near], random.Random(0)) == []
    assert make_unanswerable([src], [src_ctx], random.Random(0)) == []  # no other document


def test_token_overlap_helpers() -> None:
    assert tokens("What is THE annual-leave rule?") == frozenset({"annual", "leave", "rule"})
    assert jaccard(frozenset({"a1", "b2"}), frozenset({"b2", "c3"})) == pytest.approx(1 / 3)
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_full_flow_under_injected_faults_loses_nothing() -> None:
    """Errors, truncation, malformed JSON, refusals and empty replies: every item is accounted."""
    plan = FaultPlan(
        rates={
            Fault.ERROR: 0.05,
            Fault.TRUNCATED_JSON: 0.1,
            Fault.MALFORMED_JSON: 0.1,
            Fault.REFUSAL: 0.05,
            Fault.EMPTY: 0.05,
        },
        seed=11,
    )
    backend = FaultInjectingBackend(routed_backend(), plan)
    client = LLMClient(backend, MemoryLLMCache(), max_attempts=2)
    contexts = sample_contexts()
    sets = extract_statements(client, contexts)
    assert len(sets) == len(contexts)
    assert all(s.ok or "facts" in s.failures for s in sets)
    cands = make_candidates(sets, rng=random.Random(0))
    write_questions(client, cands)
    cands += make_unanswerable(cands, contexts, random.Random(0))
    label_candidates(client, cands)
    critique_candidates(client, cands)
    apply_thresholds(cands)
    assert backend.injected  # faults really happened
    for c in cands:
        if c.status is CandidateStatus.FAILED:
            assert c.failure_cause and c.failure_cause.split(":")[0] in {
                "question_failed",
                "label_failed",
                "critique_failed",
            }
        else:
            assert c.status is CandidateStatus.PENDING and c.question and c.observed_label
    assert any(c.status is CandidateStatus.FAILED for c in cands)
    assert any(c.status is CandidateStatus.PENDING for c in cands)


def test_extractive_facts_send_the_sentence_enum_and_record_the_prompt() -> None:
    backend = routed_backend()
    client = LLMClient(backend, MemoryLLMCache())
    sets = extract_statements(client, sample_contexts(), extractive=True)
    assert all(s.facts_prompt.name == "facts_extractive" for s in sets)
    fact_reqs = [r for r in backend.calls if prompt_name(r) == "facts_extractive"]
    assert len(fact_reqs) == len(sample_contexts())
    enum = fact_reqs[0].json_schema["properties"]["statements"]["items"]["enum"]
    assert set(sets[0].facts) <= set(enum)
    cands = make_candidates(sets, rng=random.Random(0), kinds_wanted={"fact": 2, "summary": 1})
    assert cands and all("facts_extractive" in c.generator["prompts"] for c in cands)
    assert all("facts" not in c.generator["prompts"] for c in cands)
