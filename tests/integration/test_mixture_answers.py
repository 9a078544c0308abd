"""Answering relevance mixtures through the cached client and scoring them (METHODS §6).

The scripted backend is a TEST DOUBLE: it reads the numbered passages of each request and cites
the ones carrying the question's topic token, so every score below is computable by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from ragtrail import jsonsafe
from ragtrail.evaluate.citations.evaluator import ANSWERABLE, CitationEvalConfig, evaluate_mixtures
from ragtrail.evaluate.citations.mixtures import RETRIEVER_TOP, MixtureCorpus
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.cache import SqlLLMCache
from ragtrail.llm.client import LLMClient
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.records import Chunk, QAItem, SearchHit
from ragtrail.storage import tables

_DOC_RE = re.compile(r'<document field="passages" index="(\d+)">\n(.*?)\n</document>', re.S)
_QUESTION_RE = re.compile(r"<question>(.*?)</question>", re.S)


def _cite_topic(request: GenerationRequest, _number: int) -> str:
    """Cite every passage holding the question's last word; 'broken' questions get prose,
    'nothing' questions an abstention, 'sloppy' ones an extra invalid citation 99."""
    # The input is the last message with a question (a retry appends the reply and a correction).
    prompt = next(m["content"] for m in reversed(request.messages) if "<question>" in m["content"])
    question = _QUESTION_RE.search(prompt).group(1)  # type: ignore[union-attr]
    topic = question.split()[-1]
    if "broken" in question:
        return "I think the answer is in the passages."
    if "nothing" in question:
        return json.dumps({"sentences": []})
    cited = [int(n) for n, text in _DOC_RE.findall(prompt) if topic in text]
    if "sloppy" in question:
        cited.append(99)
    return json.dumps({"sentences": [{"text": f"About {topic}.", "citations": cited}]})


def _chunk(chunk_id: str, text: str) -> Chunk:
    return Chunk(chunk_id, chunk_id.split("-")[0], 0, text, (), len(text.split()))


CHUNKS = [
    _chunk("alpha-0", "the alphatopic passage"),
    _chunk("beta-0", "the betatopic passage"),
    *[_chunk(f"other{d}-0", f"filler text number {d}") for d in range(12)],
]


def _search(questions: Sequence[str], k: int) -> list[list[SearchHit]]:
    hits = [SearchHit(c.chunk_id, c.doc_id, 1.0, c.text) for c in CHUNKS[:k]]
    return [list(hits) for _ in questions]


CORPUS = MixtureCorpus(CHUNKS, _search, _search)
ITEMS = [
    QAItem("q1", "tell me about alphatopic", "fact_single", ground_doc_ids=("alpha",),
           ground_chunk_ids=("alpha-0",)),
    QAItem("q2", "sloppy question on betatopic", "summary", ground_doc_ids=("beta",),
           ground_chunk_ids=("beta-0",)),
    QAItem("q3", "nothing about gammatopic", "unanswerable"),
    QAItem("q4", "broken question on alphatopic", "fact_single", ground_doc_ids=("alpha",),
           ground_chunk_ids=("alpha-0",)),
]  # fmt: skip
CONFIG = CitationEvalConfig(
    mixture_spec="1/3/3", mixture_types=("all",), baseline_repeats=50, bootstrap_samples=200
)


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    eng = create_engine(f"sqlite:///{tmp_path / 'meta.db'}")
    tables.metadata.create_all(eng)
    return eng


def _aggregate(evaluation, metric: str, **facets: str):  # type: ignore[no-untyped-def]
    found = [
        a
        for a in evaluation.result.aggregates
        if a.metric == metric and all(a.facets[k] == v for k, v in facets.items())
    ]
    assert len(found) == 1, (metric, facets, found)
    return found[0]


def test_batched_answers_scored_by_hand_and_failures_kept(engine: Engine) -> None:
    backend = ScriptedBackend(_cite_topic)
    client = LLMClient(backend, SqlLLMCache(engine), max_attempts=3)
    evaluation = evaluate_mixtures(ITEMS, CORPUS, client, config=CONFIG)

    # One backend call for the four mixtures, then one per retry round of the broken one.
    assert backend.generate_calls == 3
    assert len(backend.calls[:4]) == 4

    by_qid = {a.qid: a for a in evaluation.answers}
    q1_mixture = evaluation.mixtures.mixtures[0]
    assert by_qid["q1"].ok and by_qid["q1"].cited == tuple(q1_mixture.relevant_numbers)
    broken = by_qid["q4"]
    assert not broken.ok and broken.cause == "parse_error"
    assert broken.raw_texts[0] == "I think the answer is in the passages."
    assert len(broken.raw_texts) == 3
    assert by_qid["q3"].abstained

    rows = {(r["qid"], r["system"]): r for r in evaluation.rows}
    assert rows[("q1", "model")]["citation_f1"] == 1.0
    sloppy = rows[("q2", "model")]  # cites the relevant passage and the invalid 99
    assert (sloppy["citation_precision"], sloppy["citation_recall"]) == (0.5, 1.0)
    assert sloppy["citation_f1"] == pytest.approx(2 / 3)
    assert sloppy["invalid_citation_rate"] == 0.5
    assert rows[("q4", "model")]["status"] == "failed"
    assert rows[("q4", "model")]["citation_f1"] is None
    assert "parse_error" in rows[("q4", "model")]["undefined"]["citation_f1"]
    assert rows[("q3", "model")]["citation_recall"] is None

    model = {"system": "model", "mixture": "all"}
    f1 = _aggregate(evaluation, "citation_f1", label=ANSWERABLE, **model)
    assert f1.value == pytest.approx((1.0 + 2 / 3) / 2) and f1.n == 2  # q4 failed: left out
    assert f1.ci_low is not None and f1.ci_low <= f1.value <= f1.ci_high  # type: ignore[operator]
    failures = _aggregate(evaluation, "failure_rate", label="fact_single", **model)
    assert (failures.value, failures.n) == (0.5, 2)
    abstained = _aggregate(evaluation, "abstained", label="unanswerable", **model)
    assert (abstained.value, abstained.n) == (1.0, 1)
    assert evaluation.result.evaluator == "citations"
    assert evaluation.result.primary_metric == "citation_f1"

    # The baseline scores every mixture, q4 included: 7 passages, 1 relevant.
    random_p = _aggregate(evaluation, "citation_precision", system="random", mixture="all",
                          label="fact_single")  # fmt: skip
    assert random_p.n == 2
    assert random_p.value == pytest.approx(1 / 7, abs=0.08)

    summary = evaluation.as_json()
    text = jsonsafe.dumps(summary, "summary")
    assert summary["counts"]["answers_failed"] == 1
    assert summary["random_expected"]["all"]["citation_precision"] == pytest.approx(1 / 7)
    q2 = next(q for q in summary["queries"] if q["qid"] == "q2")
    relevant_number = q2["relevant"][0]
    assert q2["passages"][relevant_number - 1]["kind"] == "relevant"
    assert q2["passages"][relevant_number - 1]["doc_id"] == "beta"
    assert q2["answer"]["cited"] == [relevant_number, 99]
    assert q2["answer"]["text"] == f"About betatopic [{relevant_number}][99]."
    assert q2["question"] == ITEMS[1].question
    assert "NaN" not in text


def test_rerun_with_the_same_cache_makes_no_model_call(engine: Engine) -> None:
    first = evaluate_mixtures(
        ITEMS, CORPUS, LLMClient(ScriptedBackend(_cite_topic), SqlLLMCache(engine)), config=CONFIG
    )
    replay_backend = ScriptedBackend(_cite_topic)
    again = evaluate_mixtures(
        ITEMS, CORPUS, LLMClient(replay_backend, SqlLLMCache(engine)), config=CONFIG
    )
    assert replay_backend.calls == []
    assert jsonsafe.dumps(again.as_json()) == jsonsafe.dumps(first.as_json())


def test_runtime_corpus_uses_the_retriever_for_document_level_items(make_runtime, sample_corpus):
    from ragtrail.paths import sample_qa_set
    from ragtrail.pipeline.ingest import ingest
    from ragtrail.pipeline.passage_sources import corpus_from_runtime
    from ragtrail.testset.qaset import load_qa_set

    rt = make_runtime()
    ingest(rt, str(sample_corpus), "hb")
    items, _ = load_qa_set(sample_qa_set())
    answerable = [i for i in items if i.label != "unanswerable"][:3]
    unanswerable = [i for i in items if i.label == "unanswerable"][:1]
    corpus = corpus_from_runtime(rt, "hb")
    client = LLMClient(ScriptedBackend(_cite_topic))
    evaluation = evaluate_mixtures(answerable + unanswerable, corpus, client, config=CONFIG)

    assert not evaluation.mixtures.skipped
    for mixture in evaluation.mixtures.mixtures:
        item = next(i for i in items if i.qid == mixture.qid)
        relevant = [p for p in mixture.passages if p.kind == "relevant"]
        if item.label == "unanswerable":
            assert not relevant
            continue
        assert mixture.relevant_source == RETRIEVER_TOP
        assert 1 <= len(relevant) == len(mixture.relevant_ranks)
        assert all(p.doc_id in item.ground_doc_ids for p in relevant)
        assert all(
            p.doc_id not in item.ground_doc_ids for p in mixture.passages if p not in relevant
        )
        assert len(mixture.passages) == len(relevant) + 6


@pytest.mark.slow
def test_real_smollm2_answers_two_mixtures_with_in_range_citations() -> None:
    """The bundled SmolLM2 under guided decoding: every answer parses or is a recorded failure
    with its raw text, and parsed citations stay within 1..n."""
    from ragtrail.evaluate.citations.mixture_answers import answer_mixtures
    from ragtrail.evaluate.citations.mixtures import MixtureSpec, build_mixtures
    from ragtrail.llm.factory import load_llm_backend

    items = [ITEMS[0], ITEMS[1]]
    mixtures = build_mixtures(
        items, CORPUS, spec=MixtureSpec.parse("1/2/0"), types=("relevant+irrelevant",)
    ).mixtures
    backend = load_llm_backend("builtin:smollm2-135m-instruct", batch_size=2)
    answers = answer_mixtures(LLMClient(backend, max_attempts=2), mixtures)
    assert [a.qid for a in answers] == ["q1", "q2"]
    for mixture, answer in zip(mixtures, answers, strict=True):
        assert answer.raw_texts and all(isinstance(t, str) for t in answer.raw_texts)
        if answer.ok:
            assert all(1 <= k <= len(mixture.passages) for k in answer.cited)
        else:
            assert answer.error


def test_a_reply_cut_off_at_the_token_limit_is_a_failure_not_an_abstention() -> None:
    from ragtrail.evaluate.citations.mixture_answers import TRUNCATED, answer_mixtures
    from ragtrail.evaluate.citations.mixtures import build_mixtures
    from ragtrail.llm.backends.base import GenerationResult

    # What SmolLM2 wrote at 200 tokens: its first sentence object alone parses as JSON, but
    # `sentences` is required, so it does not validate as an answer.
    cut = '{"sentences":[{"text":"A minimum of 20 characters.","citations":[1]},{"text":"A min'
    reply = GenerationResult(text=cut, completion_tokens=200, finish_reason="length")
    mixtures = build_mixtures([ITEMS[0]], CORPUS, types=("all",)).mixtures
    [answer] = answer_mixtures(LLMClient(ScriptedBackend([reply]), max_attempts=1), mixtures)
    assert not answer.ok and not answer.abstained
    assert answer.raw_texts == (cut,)
    # A reply that validates but hit the limit (an unguided backend's trailing words) is
    # refused by the guard as well.
    whole = '{"sentences":[{"text":"A minimum of 20 characters.","citations":[1]}]} and then'
    reply = GenerationResult(text=whole, completion_tokens=256, finish_reason="length")
    [answer] = answer_mixtures(LLMClient(ScriptedBackend([reply]), max_attempts=1), mixtures)
    assert not answer.ok and answer.cause == TRUNCATED
    assert answer.raw_texts == (whole,)
