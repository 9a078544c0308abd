"""The single-prompt baseline: one candidate per context, failures kept, labelable."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ragtrail.generate.baseline import single_prompt_baseline
from ragtrail.generate.labeller import label_candidates
from ragtrail.llm.cache import MemoryLLMCache
from ragtrail.llm.client import LLMClient
from ragtrail.records import CandidateStatus
from tests.unit.generate import calls_by_prompt, routed_backend, sample_contexts


def test_baseline_candidates_then_label_distribution() -> None:
    def baseline(f: dict[str, Any]) -> str:
        if "400 changed lines" in f["context"]:
            return '{"question": "Size?"'  # cut off before the answer: invalid
        return '{"question": "What is the first rule?", "answer": "The first sentence."}'

    backend = routed_backend({"single_shot_qa": baseline})
    client = LLMClient(backend, MemoryLLMCache())
    contexts = sample_contexts()
    cands = single_prompt_baseline(client, contexts, generator_info={"backend": "test"})
    assert [c.context for c in cands] == contexts
    assert calls_by_prompt(backend)["single_shot_qa"] >= len(contexts)
    assert all(c.statement_kind == "baseline" and c.requested_label == "" for c in cands)
    failed = [c for c in cands if c.status is CandidateStatus.FAILED]
    assert len(failed) == 1 and failed[0].failure_cause == "baseline_failed:validation_error"
    assert failed[0].raw_outputs and failed[0].question == ""
    ok = [c for c in cands if c.status is CandidateStatus.PENDING]
    assert all(c.question and c.answer == "The first sentence." for c in ok)
    assert all(
        c.generator == {"backend": "test", "prompts": {"single_shot_qa": "1"}} for c in cands
    )
    assert len({c.candidate_id for c in cands}) == len(cands)
    again = single_prompt_baseline(LLMClient(backend, MemoryLLMCache()), contexts)
    assert [c.candidate_id for c in again] == [c.candidate_id for c in cands]

    label_candidates(client, cands)
    assert Counter(c.observed_label for c in ok) == {"fact_single": len(ok)}
    assert failed[0].observed_label is None
    assert single_prompt_baseline(client, []) == []
