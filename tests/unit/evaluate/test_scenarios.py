"""Attributed-answer scenarios on a five-chunk in-memory corpus with a scripted LLM (a test
double, not a model). Rankings and metric values below are worked out by hand from the
word-overlap scorer of :class:`TinyCorpus`."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from ragtrail.evaluate.attribution.cited_answers import (
    CITED_ANSWER_PROMPT,
    CLOSED_BOOK_PROMPT,
    SourcePassage,
    Statement,
)
from ragtrail.evaluate.attribution.passage_corpus import CorpusPassage
from ragtrail.evaluate.attribution.scenarios import (
    NO_PASSAGES_REASON,
    SCENARIOS,
    FirstRound,
    ScenarioRun,
    run_scenarios,
)
from ragtrail.evaluate.attribution.subqueries import (
    MAX_SUBQUERY_CHARS,
    NO_USABLE_QUERY,
    SUBQUERY_PROMPT,
    SubqueryInput,
    subquery_schema,
    usable_queries,
)
from ragtrail.jsonsafe import dumps
from ragtrail.llm.backends.base import GenerationRequest, GenerationResult
from ragtrail.llm.cache import MemoryLLMCache
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.records import QAItem
from ragtrail.stats.intervals import wilson_interval
from ragtrail.text import content_words

CHUNKS = (
    CorpusPassage("d1#0", "d1", "Ferry departures leave the harbour every forty minutes."),
    CorpusPassage("d1#1", "d1", "A single ferry ticket costs three euros at the kiosk."),
    CorpusPassage("d2#0", "d2", "The lighthouse was restored in 1998."),
    CorpusPassage("d2#1", "d2", "The lighthouse keeper lived in the tower."),
    CorpusPassage("d3#0", "d3", "The museum closes on Mondays."),
)
Q1 = "How much does a ferry ticket cost?"
Q2 = "Was the lighthouse restored before the keeper left?"
Q3 = "Who painted the museum ceiling?"
ITEMS = (
    QAItem("q1", Q1, "fact_single", ground_doc_ids=("d1",), ground_chunk_ids=("d1#1",)),
    QAItem("q2", Q2, "reasoning", ground_doc_ids=("d2",), ground_chunk_ids=("d2#1",)),
    QAItem("q3", Q3, "unanswerable", ground_doc_ids=("d3",), ground_chunk_ids=("d3#0",)),
)
CLOSED_BOOK = {
    Q1: "A ferry ticket costs two euros. The lighthouse was restored long ago.",
    Q2: "The lighthouse was restored in 1998. It was restored by the lighthouse keeper.",
    Q3: "I do not know.",
}
SUBQUERIES = {
    Q1: json.dumps({"queries": ["harbour departures", "ferry ticket price", Q1]}),
    Q2: "this is not JSON",
    Q3: json.dumps({"queries": [Q3.rstrip("?")]}),
}


class TinyCorpus:
    """Scores a chunk by the number of content words it shares with the query; ties by id."""

    def __init__(self, chunks: Sequence[CorpusPassage] = CHUNKS) -> None:
        self.chunks = chunks
        self.searches: list[str] = []

    def _ranked(self, query: str, chunks: Sequence[CorpusPassage]) -> list[CorpusPassage]:
        words = content_words(query)
        scored = [
            CorpusPassage(c.chunk_id, c.doc_id, c.text, float(len(words & content_words(c.text))))
            for c in chunks
        ]
        return sorted(scored, key=lambda c: (-c.score, c.chunk_id))

    def search(
        self, queries: Sequence[str], k: int, text_weight: float
    ) -> list[list[CorpusPassage]]:
        self.searches.extend(queries)
        return [self._ranked(q, self.chunks)[:k] for q in queries]

    def rank_within(
        self, query: str, doc_ids: Sequence[str], k: int, text_weight: float
    ) -> list[CorpusPassage]:
        return self._ranked(query, [c for c in self.chunks if c.doc_id in doc_ids])[:k]

    def document_chunks(self, doc_ids: Sequence[str]) -> list[CorpusPassage]:
        return [c for c in self.chunks if c.doc_id in doc_ids]


_QUESTION_RE = re.compile(r"<question>(.*?)</question>", re.S)
_PASSAGE_RE = re.compile(r'<document field="passages" index="\d+">\n(.*?)\n</document>', re.S)
_NAMES = {
    p.system_message(): p.name for p in (CITED_ANSWER_PROMPT, CLOSED_BOOK_PROMPT, SUBQUERY_PROMPT)
}


def cite_each_passage(question: str, passages: list[str]) -> str:
    """One sentence per passage (at most two), citing it; abstains on the museum question."""
    if "museum" in question:
        return json.dumps({"sentences": []})
    sentences = [
        {"text": f"Passage {i} says something.", "citations": [i]}
        for i in range(1, min(2, len(passages)) + 1)
    ]
    return json.dumps({"sentences": sentences})


def scripted(
    cited: Callable[[str, list[str]], str] = cite_each_passage,
) -> ScriptedBackend:
    def responder(request: GenerationRequest, number: int) -> str:
        # the item's own input is the last <input> user message (a retry appends a repair turn)
        user = next(
            m["content"]
            for m in reversed(request.messages)
            if m["role"] == "user" and m["content"].startswith("<input>")
        )
        question = _QUESTION_RE.search(user).group(1)  # type: ignore[union-attr]
        name = _NAMES[request.messages[0]["content"]]
        if name == CLOSED_BOOK_PROMPT.name:
            return json.dumps({"answer": CLOSED_BOOK[question]})
        if name == SUBQUERY_PROMPT.name:
            return SUBQUERIES[question]
        return cited(question, _PASSAGE_RE.findall(user))

    return ScriptedBackend(responder)


@dataclass
class BatchRecording(ScriptedBackend):
    """Also records the prompt names of each backend call."""

    batches: list[list[str]] = field(default_factory=list)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.batches.append([_NAMES[r.messages[0]["content"]] for r in requests])
        return super().generate(requests)


def run(
    backend: ScriptedBackend,
    corpus: TinyCorpus | None = None,
    items: Sequence[QAItem] = ITEMS,
    cache: MemoryLLMCache | None = None,
    **kwargs: object,
) -> ScenarioRun:
    client = LLMClient(backend, cache)
    options: dict[str, object] = {"k": 3, "text_weight": 0.5, "bootstrap_samples": 200, **kwargs}
    return run_scenarios(items, corpus or TinyCorpus(), client, **options)  # type: ignore[arg-type]


def test_closed_book_has_sentences_without_citations_or_passages() -> None:
    result = run(scripted(), scenarios=["G"]).scenarios["G"]
    q1 = result.answers[0].record
    assert q1.statements == (
        Statement("A ferry ticket costs two euros."),
        Statement("The lighthouse was restored long ago."),
    )
    assert q1.passages == () and q1.relevant_docids == ("d1#1",)
    assert result.run is None and result.retrieval is None
    assert result.as_dict()["undefined"] == {"retrieval": NO_PASSAGES_REASON}


def test_vanilla_top_k_and_its_retrieval_metrics_by_hand() -> None:
    result = run(scripted(), scenarios=["RTG-vanilla"]).scenarios["RTG-vanilla"]
    q1, q2, q3 = (a.record for a in result.answers)
    # q1 {ferry, ticket}: d1#1 shares 2, d1#0 1, then the zero ties by id.
    assert [p.docid for p in q1.passages] == ["d1#1", "d1#0", "d2#0"]
    # q2 {lighthouse, restored, keeper}: d2#0 and d2#1 share 2 each (tie by id).
    assert [p.docid for p in q2.passages] == ["d2#0", "d2#1", "d1#0"]
    assert q1.statements == (
        Statement("Passage 1 says something.", (1,)),
        Statement("Passage 2 says something.", (2,)),
    )
    assert q1.answer == "Passage 1 says something [1]. Passage 2 says something [2]."
    assert q3.statements == () and q3.relevant_docids == ()
    assert result.run == {
        "q1": {"d1#1": 3.0, "d1#0": 2.0, "d2#0": 1.0},
        "q2": {"d2#0": 3.0, "d2#1": 2.0, "d1#0": 1.0},
        "q3": {"d3#0": 3.0, "d1#0": 2.0, "d1#1": 1.0},
    }
    metrics = result.retrieval
    assert metrics is not None and metrics.excluded == ("q3",)
    # q1: relevant at rank 1; q2: relevant at rank 2 -> nDCG 1 / log2(3).
    assert metrics.per_query["q1"] == pytest.approx(
        {"P@1": 1.0, "recall@1": 1.0, "P@10": 0.1, "recall@10": 1.0, "ndcg@10": 1.0}
    )
    assert metrics.per_query["q2"] == pytest.approx(
        {"P@1": 0.0, "recall@1": 0.0, "P@10": 0.1, "recall@10": 1.0, "ndcg@10": 1 / math.log2(3)}
    )
    macro = {row["metric"]: row for row in metrics.macro}
    assert macro["P@1"]["value"] == 0.5 and macro["P@1"]["n"] == 2
    assert macro["ndcg@10"]["value"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    # 0/1 outcomes get the Wilson interval of 1 in 2 and 2 in 2; P@10 is 0.1 twice: no spread
    assert macro["P@1"]["ci_method"] == "wilson"
    assert (macro["P@1"]["ci_low"], macro["P@1"]["ci_high"]) == pytest.approx(wilson_interval(1, 2))
    assert (macro["recall@10"]["ci_low"], macro["recall@10"]["ci_high"]) == pytest.approx(
        wilson_interval(2, 2)
    )
    assert macro["P@10"]["ci_low"] is None and "no spread" in macro["P@10"]["undefined"]["ci_low"]


def test_gtr_cites_one_retrieved_passage_per_sentence() -> None:
    result = run(scripted(), scenarios=["GTR"]).scenarios["GTR"]
    q1, q2, _ = result.answers
    assert [p.docid for p in q1.record.passages] == ["d1#1", "d2#0"]
    assert [s.citations for s in q1.record.cited_statements()] == [(1,), (2,)]
    assert q1.retrieval_queries == tuple(CLOSED_BOOK[Q1].replace(". ", ".|").split("|"))
    # both sentences of q2 retrieve d2#0: one distinct passage, cited by each sentence
    assert [p.docid for p in q2.record.passages] == ["d2#0"]
    assert [s.citations for s in q2.record.cited_statements()] == [(1,), (1,)]
    for answer in result.answers:
        assert all(len(s.citations) == 1 for s in answer.record.cited_statements())


def test_gold_passages_are_the_ground_chunks() -> None:
    result = run(scripted(), scenarios=["RTG-gold"]).scenarios["RTG-gold"]
    assert [[p.docid for p in a.record.passages] for a in result.answers] == [
        ["d1#1"],
        ["d2#1"],
        ["d3#0"],
    ]
    assert result.answers[0].record.passages[0] == SourcePassage("d1#1", CHUNKS[1].text)
    assert result.retrieval is not None
    assert {row["metric"]: row["value"] for row in result.retrieval.macro}["recall@1"] == 1.0


def test_gold_by_document_ranks_the_documents_chunks_for_the_question() -> None:
    items = [QAItem(i.qid, i.question, i.label, ground_doc_ids=i.ground_doc_ids) for i in ITEMS]
    result = run(scripted(), items=items, scenarios=["RTG-gold"], k=1)
    assert result.level == "document"
    answers = result.scenarios["RTG-gold"].answers
    # q2's words hit d2#0 and d2#1 twice each; the tie goes to d2#0, and k=1 keeps it alone.
    assert answers[1].record.passages == (SourcePassage("d2", CHUNKS[2].text),)
    assert answers[1].record.relevant_docids == ("d2",)


def test_query_gen_fuses_the_question_with_its_subqueries_and_falls_back() -> None:
    corpus = TinyCorpus()
    result = run(scripted(), corpus, scenarios=["RTG-query-gen"], k=1, fusion="rrf")
    q1, q2, q3 = result.scenarios["RTG-query-gen"].answers
    written = result.subqueries
    # the repeat of the question is dropped
    assert written["q1"].queries == ("harbour departures", "ferry ticket price")
    assert q1.retrieval_queries == (Q1, "harbour departures", "ferry ticket price")
    # lists: [d1#1, ...], [d1#0, d1#1, ...], [d1#1, d1#0, ...]: RRF d1#1 = 2/61 + 1/62
    assert [p.docid for p in q1.record.passages] == ["d1#1"]
    assert written["q2"].fallback is not None and "failed" in written["q2"].fallback
    assert written["q2"].raw == ("this is not JSON",) * 3
    assert q2.retrieval_queries == (Q2,) and q2.note == written["q2"].fallback
    assert written["q3"].fallback == NO_USABLE_QUERY and q3.retrieval_queries == (Q3,)
    assert corpus.searches == [Q1, "harbour departures", "ferry ticket price", Q2, Q3]


def test_query_gen_fusion_method_changes_the_top_passage() -> None:
    # CombSUM: d1#1 = 1 + 0 + 1 = 2, d1#0 = 0.5 + 1 + 0.5 = 2: tie, both reached rank 1 -> id.
    result = run(scripted(), scenarios=["RTG-query-gen"], k=1, fusion="combsum")
    q1 = result.scenarios["RTG-query-gen"].answers[0]
    assert [p.docid for p in q1.record.passages] == ["d1#0"]


def test_failures_are_recorded_with_raw_text_and_counted() -> None:
    def broken_for_q2(question: str, passages: list[str]) -> str:
        return "{not json" if question == Q2 else cite_each_passage(question, passages)

    result = run(scripted(broken_for_q2), scenarios=["RTG-vanilla"]).scenarios["RTG-vanilla"]
    failed = result.answers[1]
    assert failed.status == "failed" and failed.cause == "parse_error"
    assert failed.raw == ("{not json",) * 3
    assert failed.record.answer == "" and len(failed.record.passages) == 3
    summary = result.as_dict()
    assert (summary["n"], summary["n_ok"], summary["n_failed"]) == (3, 2, 1)
    assert summary["answers"][1]["raw"] == ["{not json"] * 3


def test_item_without_passages_is_skipped_not_dropped() -> None:
    items = [*ITEMS[:2], QAItem("q4", Q3, "unanswerable", ground_doc_ids=("gone",))]
    result = run(scripted(), items=items, scenarios=["RTG-gold"], k=1)
    skipped = result.scenarios["RTG-gold"].answers[2]
    assert skipped.status == "skipped" and skipped.record.qid == "q4"
    assert result.scenarios["RTG-gold"].count("skipped") == 1


def test_every_scenario_reruns_from_the_cache_with_zero_model_calls() -> None:
    cache = MemoryLLMCache()
    first_backend = scripted()
    first = run(first_backend, cache=cache)
    assert list(first.scenarios) == list(SCENARIOS)
    # 3 closed-book (shared by G and GTR), 3 sub-query (q2's thrice: 5), 3 vanilla and 3 gold
    # cited answers; query-gen's fused top-3 equal vanilla's lists here, so the cache answers them.
    assert len(first_backend.calls) == 3 + 5 + 3 + 3
    again_backend = scripted()
    again = run(again_backend, cache=cache)
    assert again_backend.calls == []
    text = dumps(_without_timings(first.as_json()), "first")
    assert text == dumps(_without_timings(again.as_json()), "again")
    assert json.loads(text)["scenarios"]["RTG-query-gen"]["n_ok"] == 3


def test_cited_scenarios_are_answered_in_one_batched_call_with_shared_questions_once() -> None:
    backend = BatchRecording(scripted().responder)
    result = run(backend, scenarios=["RTG-vanilla", "RTG-gold", "RTG-query-gen"])
    cited = [b for b in backend.batches if CITED_ANSWER_PROMPT.name in b]
    # one call: 3 vanilla and 3 gold questions; query-gen's fused lists equal vanilla's here
    assert cited == [[CITED_ANSWER_PROMPT.name] * 6]
    for name in ("RTG-vanilla", "RTG-gold", "RTG-query-gen"):
        assert result.scenarios[name].count("ok") == 3
        assert result.scenarios[name].seconds > 0
    assert (
        result.scenarios["RTG-query-gen"].answers[0].record.answer
        == result.scenarios["RTG-vanilla"].answers[0].record.answer
    )


def test_a_first_round_asked_ahead_leaves_the_scenarios_one_round_and_the_same_answers() -> None:
    """The closed-book answers and sub-queries asked before the scenarios run (same items,
    client and params) are served by the cache: the scenarios then make only the cited
    answers' calls, in one batch, and every answer equals a run that asked everything itself."""
    cache = MemoryLLMCache()
    ahead = BatchRecording(scripted().responder)
    first = FirstRound(ITEMS, LLMClient(ahead, cache), GenerationParams(seed=13))
    assert first.ask(SCENARIOS, 3) == 6  # closed book and sub-queries for each of 3 items
    assert sorted(name for batch in ahead.batches for name in batch) == sorted(
        [CLOSED_BOOK_PROMPT.name] * 3 + [SUBQUERY_PROMPT.name] * 5  # q2 retried twice
    )
    after = BatchRecording(scripted().responder)
    result = run(after, cache=cache)
    assert after.batches == [[CITED_ANSWER_PROMPT.name] * 6]
    alone = run(scripted())
    assert dumps(_without_timings(result.as_json()), "ahead") == dumps(
        _without_timings(alone.as_json()), "alone"
    )
    # only the scenarios that need it are asked
    only_vanilla = BatchRecording(scripted().responder)
    asked = FirstRound(ITEMS, LLMClient(only_vanilla), GenerationParams(seed=13))
    assert asked.ask(["RTG-vanilla", "RTG-gold"], 3) == 0 and only_vanilla.batches == []
    assert FirstRound(ITEMS, LLMClient(scripted()), GenerationParams()).ask(["G"], 3) == 3


def _without_timings(summary: dict[str, object]) -> dict[str, object]:
    scenarios = summary["scenarios"]
    assert isinstance(scenarios, dict)
    for s in scenarios.values():
        s.pop("seconds")
        s.pop("seconds_per_question")
    return summary


def test_bad_settings_list_every_problem() -> None:
    with pytest.raises(ValueError) as info:
        run(scripted(), scenarios=["G", "RAG"], k=0, text_weight=2.0, fusion="pm2", subqueries=0)
    message = str(info.value)
    for part in ("'RAG'", "k must be", "text_weight", "'pm2'", "subqueries must be"):
        assert part in message


def test_subquery_cleaning_and_guided_schema() -> None:
    written = ["  ferry   price ", "", "FERRY PRICE!", Q1.upper(), "kiosk", "pier", "extra"]
    assert usable_queries(Q1, written, 3) == ("ferry price", "kiosk", "pier")
    queries = subquery_schema(SubqueryInput(question=Q1, count=2))["properties"]["queries"]
    assert (queries["minItems"], queries["maxItems"]) == (1, 2)
    assert queries["items"]["maxLength"] == MAX_SUBQUERY_CHARS
