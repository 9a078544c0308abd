"""The scenarios' corpus over the real embedded index of the sample handbook (bundled MiniLM),
with a scripted LLM (a test double, not a model)."""

from __future__ import annotations

import json

import pytest

from ragtrail.evaluate.attribution.cited_answers import CLOSED_BOOK_PROMPT
from ragtrail.evaluate.attribution.scenarios import run_scenarios
from ragtrail.evaluate.retrieval.evaluator import ranking_for
from ragtrail.index.base import fetch_candidates
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.client import LLMClient
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.paths import sample_qa_set
from ragtrail.pipeline.ingest import ingest
from ragtrail.pipeline.passage_sources import scenario_corpus
from ragtrail.testset.qaset import load_qa_set

CORPUS = "hb"
WEIGHT = 0.5


@pytest.fixture
def rt(make_runtime, sample_corpus):
    runtime = make_runtime()
    ingest(runtime, str(sample_corpus), CORPUS)
    return runtime


def answer_from_passages(request: GenerationRequest, number: int) -> str:
    """Closed book: a fixed two-sentence answer; cited: one sentence citing passage 1."""
    if request.messages[0]["content"] == CLOSED_BOOK_PROMPT.system_message():
        return json.dumps({"answer": "Staff get annual leave. Passwords must be long."})
    return json.dumps({"sentences": [{"text": "It is in the first passage.", "citations": [1]}]})


def test_scenarios_on_the_sample_index(rt) -> None:
    items = load_qa_set(sample_qa_set())[0][:3]
    corpus = scenario_corpus(rt, CORPUS)

    # The corpus ranks documents exactly as the retrieval evaluation does at the same weight.
    (hits,) = corpus.search([items[0].question], 20, WEIGHT)
    vector = rt.embedder.encode([items[0].question])[0]
    candidates = fetch_candidates(rt.index(CORPUS), items[0].question, vector, 100)
    by_doc = list(dict.fromkeys(h.doc_id for h in hits))
    assert by_doc[:3] == ranking_for(candidates, WEIGHT, "document", 3)

    # Ranking within the ground documents keeps only their chunks, best first.
    ground = items[0].ground_doc_ids
    within = corpus.rank_within(items[0].question, ground, 3, WEIGHT)
    assert within and all(p.doc_id in ground for p in within)
    assert [p.score for p in within] == sorted((p.score for p in within), reverse=True)
    chunks = corpus.document_chunks(ground)
    assert {p.chunk_id for p in within} <= {c.chunk_id for c in chunks}

    backend = ScriptedBackend(answer_from_passages)
    result = run_scenarios(
        items,
        corpus,
        LLMClient(backend),
        scenarios=["RTG-vanilla", "GTR", "RTG-gold"],
        k=3,
        text_weight=WEIGHT,
        bootstrap_samples=100,
    )
    assert result.level == "document"
    vanilla, gtr, gold = result.scenarios.values()
    for answer in vanilla.answers:
        assert len(answer.record.passages) == 3
    for answer in gtr.answers:
        statements = answer.record.cited_statements()
        assert [len(s.citations) for s in statements] == [1, 1]
    for item, answer in zip(items, gold.answers, strict=True):
        assert 1 <= len(answer.record.passages) <= 3
        assert {p.docid for p in answer.record.passages} <= set(item.ground_doc_ids)
    assert gold.retrieval is not None
    assert {row["metric"]: row["value"] for row in gold.retrieval.macro}["P@1"] == 1.0
