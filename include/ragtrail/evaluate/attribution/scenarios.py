"""Attributed-answer scenarios (AIR, METHODS §8): answers with citations produced from the corpus.

Each scenario turns a question into an :class:`AnswerRecord` (the shape every citation metric
scores) and, where passages are retrieved, a ranked list that the IR metric registry scores:

* ``G``: closed book (:data:`CLOSED_BOOK_PROMPT`); statements are the answer's sentences, with no
  citation and no passage.
* ``RTG-vanilla``: the top-k chunks of the hybrid search at the given text weight, answered with
  :data:`CITED_ANSWER_PROMPT`.
* ``RTG-query-gen``: the model writes up to m sub-queries (:mod:`ragtrail.evaluate.attribution.subqueries`);
  the question and each sub-query retrieve k chunks, the lists are fused (CombSUM, CombMNZ or RRF,
  :mod:`ragtrail.index.rank_fusion`) and the fused top-k answered as in RTG-vanilla.
* ``GTR``: the closed-book answer first; each sentence then retrieves its hybrid top-1 chunk,
  which becomes its one citation; passages are the distinct chunks in sentence order.
* ``RTG-gold``: the item's ground chunks (or, when only documents are named, their k chunks
  ranked highest for the question): the upper bound.

Relevance follows the retrieval evaluation (:func:`resolve_level`): per chunk when every item
names ground chunks, else per document; a passage's ``docid`` is then the chunk id or the
document id. Unanswerable items have no relevant id and are left out of the retrieval metrics
(every such metric would be 0 by definition).

Model calls go through :meth:`LLMClient.run`, so a rerun with a cache makes none, and are batched
across scenarios: the closed-book answers and the sub-queries first, then one call answers every
cited scenario's questions (a question with the same passages in two scenarios is asked once). A
failed call keeps its item: the record has an empty answer, and the scenario answer holds the
cause, the error and every raw attempt. An item with no passage to answer from (no
ground chunk, say) is recorded as ``skipped`` without a model call.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragtrail.evaluate.attribution.cited_answers import (
    CITED_ANSWER_PROMPT,
    CLOSED_BOOK_PROMPT,
    AnswerRecord,
    CitedAnswerInput,
    ClosedBookInput,
    ClosedBookOutput,
    SourcePassage,
    Statement,
    render_answer,
    split_sentences,
    statements_of,
)
from ragtrail.evaluate.attribution.passage_corpus import CorpusPassage, PassageCorpus
from ragtrail.evaluate.attribution.scenario_results import (
    NO_RELEVANT_REASON,
    RETRIEVAL_METRICS,
    ScenarioAnswer,
    ScenarioResult,
    ScenarioRun,
    ranked_run,
    retrieval_metrics,
)
from ragtrail.evaluate.attribution.subqueries import (
    DEFAULT_SUBQUERIES,
    Subqueries,
    write_subqueries,
)
from ragtrail.evaluate.retrieval.evaluator import resolve_level
from ragtrail.index.rank_fusion import fuse_rankings
from ragtrail.llm.client import CallOutcome, GenerationParams, LLMClient
from ragtrail.llm.together import together
from ragtrail.records import (
    FUSION_METHODS,
    SCENARIOS,
    FusionMethod,
    QAItem,
    QuestionLabel,
    Scenario,
)

DEFAULT_K = 3
CLOSED_BOOK_STAGE = "scenario.closed_book"
CITED_STAGE = "scenario.cited_answer"

CLOSED_BOOK_SCENARIOS = (Scenario.G, Scenario.GTR)
"""The scenarios built on the closed-book answers (:meth:`FirstRound.closed_outcomes`)."""
FIRST_ROUND_SCENARIOS = (*CLOSED_BOOK_SCENARIOS, Scenario.RTG_QUERY_GEN)
"""The scenarios that build on a first-round call (:class:`FirstRound`)."""

NO_PASSAGES_REASON = "closed book: the scenario retrieves no passage"
NOTHING_TO_CITE = "no passage to answer from"


# ------------------------------------------------------------------------------------ running


@dataclass(frozen=True)
class _Prepared:
    """What an item is answered from in a cited scenario, before the model call."""

    passages: tuple[CorpusPassage, ...]
    queries: tuple[str, ...]
    note: str = ""


def run_scenarios(
    items: Sequence[QAItem],
    corpus: PassageCorpus,
    client: LLMClient,
    *,
    scenarios: Sequence[str] = SCENARIOS,
    k: int = DEFAULT_K,
    text_weight: float,
    subqueries: int = DEFAULT_SUBQUERIES,
    fusion: FusionMethod = FusionMethod.RRF,
    params: GenerationParams | None = None,
    bootstrap_samples: int = 1000,
    seed: int = 13,
) -> ScenarioRun:
    """Answer every item in every requested scenario (see the module docstring).

    The model is asked in two rounds, not scenario by scenario: first the calls no answer
    depends on (:class:`FirstRound`; at once on a concurrent backend), then every
    cited scenario's questions in one batched call (:meth:`_Runner.answer_cited`). A scenario's
    ``seconds`` are its own work (retrieval, its first-round call) plus its share of that
    answering call, in proportion to the questions it asked.
    """
    _check_settings(items, scenarios, k, text_weight, subqueries, fusion)
    params = params or GenerationParams(seed=seed)
    level = resolve_level(items, "auto")
    first = FirstRound(items, client, params)
    first.ask(scenarios, subqueries)
    runner = _Runner(items, corpus, first, level, k, text_weight)

    written: dict[str, Subqueries] = {}
    answers: dict[str, list[ScenarioAnswer]] = {}
    prepared: dict[str, list[_Prepared]] = {}
    seconds: dict[str, float] = {}
    for name in scenarios:
        start = time.perf_counter()
        if name == Scenario.G:
            answers[name] = runner.closed_book()
        elif name == Scenario.GTR:
            answers[name] = runner.generate_then_retrieve()
        elif name == Scenario.RTG_QUERY_GEN:
            prepared[name] = runner.query_gen(fusion, written)
        elif name == Scenario.RTG_VANILLA:
            prepared[name] = runner.vanilla()
        else:
            prepared[name] = runner.gold()
        seconds[name] = time.perf_counter() - start + first.seconds(name)

    start = time.perf_counter()
    answers.update(runner.answer_cited(prepared))
    answering = time.perf_counter() - start
    asked = {name: sum(1 for p in prep if p.passages) for name, prep in prepared.items()}
    for name, count in asked.items():
        seconds[name] += answering * count / sum(asked.values()) if count else 0.0

    results = {
        name: _result(name, answers[name], bootstrap_samples, seed, seconds[name])
        for name in scenarios
    }
    settings = {
        "scenarios": list(scenarios),
        "k": k,
        "text_weight": text_weight,
        "subqueries": subqueries,
        "fusion": fusion,
        "seed": params.seed,
        "temperature": params.temperature,
        "bootstrap_samples": bootstrap_samples,
        "retrieval_metrics": list(RETRIEVAL_METRICS),
    }
    return ScenarioRun(results, written, level, settings)


def _check_settings(
    items: Sequence[QAItem],
    scenarios: Sequence[str],
    k: int,
    text_weight: float,
    subqueries: int,
    fusion: str,
) -> None:
    problems = []
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        problems.append(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    if len(set(scenarios)) != len(scenarios):
        problems.append(f"scenarios repeated: {list(scenarios)}")
    if k < 1:
        problems.append(f"k must be >= 1, got {k}")
    if not 0.0 <= text_weight <= 1.0:
        problems.append(f"text_weight must be in [0, 1], got {text_weight}")
    if subqueries < 1:
        problems.append(f"subqueries must be >= 1, got {subqueries}")
    if fusion not in FUSION_METHODS:
        problems.append(f"unknown fusion {fusion!r}; known: {', '.join(FUSION_METHODS)}")
    repeated = sorted(q for q, n in Counter(item.qid for item in items).items() if n > 1)
    if repeated:
        problems.append(f"question ids repeated: {repeated}")
    if problems:
        raise ValueError("cannot run the scenarios:\n- " + "\n- ".join(problems))


class FirstRound:
    """The calls no scenario answer depends on, each made once per item: the closed-book
    answers (shared by G and GTR) and RTG-query-gen's sub-queries.

    Asked through the client's cache before :func:`run_scenarios` runs on the same items, client
    and params, they leave that function a single round of calls
    (:mod:`ragtrail.pipeline.citations.ask_ahead`)."""

    def __init__(
        self, items: Sequence[QAItem], client: LLMClient, params: GenerationParams
    ) -> None:
        self.items = items
        self.client = client
        self.params = params
        self._closed: list[CallOutcome[ClosedBookOutput]] | None = None
        self.closed_seconds = 0.0
        self._subqueries: list[Subqueries] | None = None
        self.subquery_seconds = 0.0

    def ask(self, scenarios: Sequence[str], subqueries: int) -> int:
        """Make the first-round calls ``scenarios`` need (at once on a concurrent backend);
        returns how many inputs were asked."""
        calls: list[Callable[[], object]] = []
        if set(scenarios) & set(CLOSED_BOOK_SCENARIOS):
            calls.append(self.closed_outcomes)
        if Scenario.RTG_QUERY_GEN in scenarios:
            calls.append(lambda: self.subqueries(subqueries))
        together(calls, concurrent=self.client.concurrent)
        return len(calls) * len(self.items)

    def seconds(self, scenario: str) -> float:
        """The time of the first-round call ``scenario`` builds on: the closed-book answers
        count in G and in GTR alike (each needs them on its own), the sub-queries in
        RTG-query-gen."""
        if scenario in CLOSED_BOOK_SCENARIOS:
            return self.closed_seconds
        return self.subquery_seconds if scenario == Scenario.RTG_QUERY_GEN else 0.0

    def closed_outcomes(self) -> list[CallOutcome[ClosedBookOutput]]:
        if self._closed is None:
            start = time.perf_counter()
            inputs = [ClosedBookInput(question=item.question) for item in self.items]
            self._closed = self.client.run(
                CLOSED_BOOK_PROMPT, inputs, stage=CLOSED_BOOK_STAGE, params=self.params
            )
            self.closed_seconds = time.perf_counter() - start
        return self._closed

    def subqueries(self, count: int) -> list[Subqueries]:
        """Every item's sub-queries (one batched call, made once)."""
        if self._subqueries is None:
            start = time.perf_counter()
            questions = [item.question for item in self.items]
            self._subqueries = write_subqueries(self.client, questions, count, self.params)
            self.subquery_seconds = time.perf_counter() - start
        return self._subqueries

    @property
    def written_subqueries(self) -> list[Subqueries]:
        """The sub-queries :meth:`ask` wrote (RTG-query-gen was among its scenarios)."""
        assert self._subqueries is not None, "the sub-queries are written in the first round"
        return self._subqueries


class _Runner:
    """Builds each scenario's answers on the first round's replies."""

    def __init__(
        self,
        items: Sequence[QAItem],
        corpus: PassageCorpus,
        first: FirstRound,
        level: str,
        k: int,
        text_weight: float,
    ) -> None:
        self.items = items
        self.corpus = corpus
        self.first = first
        self.client = first.client
        self.params = first.params
        self.level = level
        self.k = k
        self.text_weight = text_weight

    # -- closed book -------------------------------------------------------------------------

    def closed_book(self) -> list[ScenarioAnswer]:
        out = []
        for item, outcome in zip(self.items, self.first.closed_outcomes(), strict=True):
            if not outcome.ok or outcome.value is None:
                out.append(self._failed(item, outcome, ()))
                continue
            answer = outcome.value.answer
            statements = tuple(Statement(s) for s in split_sentences(answer))
            out.append(
                ScenarioAnswer(
                    self._record(item, answer, (), statements),
                    "ok",
                    raw=tuple(outcome.raw_texts),
                )
            )
        return out

    # -- generate then retrieve --------------------------------------------------------------

    def generate_then_retrieve(self) -> list[ScenarioAnswer]:
        outcomes = self.first.closed_outcomes()
        sentences = [
            split_sentences(o.value.answer) if o.ok and o.value is not None else []
            for o in outcomes
        ]
        flat = [s for per_item in sentences for s in per_item]
        hits = iter(self.corpus.search(flat, 1, self.text_weight))
        out = []
        for item, outcome, texts in zip(self.items, outcomes, sentences, strict=True):
            if not outcome.ok or outcome.value is None:
                out.append(self._failed(item, outcome, ()))
                continue
            passages: list[CorpusPassage] = []
            statements = []
            for text in texts:
                top = next(hits)[:1]
                if not top:
                    statements.append(Statement(text))
                    continue
                if top[0].chunk_id not in [p.chunk_id for p in passages]:
                    passages.append(top[0])
                number = 1 + [p.chunk_id for p in passages].index(top[0].chunk_id)
                statements.append(Statement(text, (number,)))
            out.append(
                ScenarioAnswer(
                    self._record(item, render_answer(statements), passages, tuple(statements)),
                    "ok",
                    raw=tuple(outcome.raw_texts),
                    retrieval_queries=tuple(texts),
                )
            )
        return out

    # -- passages of the cited scenarios -----------------------------------------------------

    def vanilla(self) -> list[_Prepared]:
        questions = [item.question for item in self.items]
        ranked = self.corpus.search(questions, self.k, self.text_weight)
        return [_Prepared(tuple(r[: self.k]), (q,)) for q, r in zip(questions, ranked, strict=True)]

    def query_gen(self, fusion: FusionMethod, written: dict[str, Subqueries]) -> list[_Prepared]:
        """Passages of RTG-query-gen, from the sub-queries written in the first round."""
        subs = self.first.written_subqueries
        flat = [q for s in subs for q in s.retrieval_queries]
        lists = iter(self.corpus.search(flat, self.k, self.text_weight))
        out = []
        for item, sub in zip(self.items, subs, strict=True):
            written[item.qid] = sub
            per_query = [next(lists) for _ in sub.retrieval_queries]
            by_id = {p.chunk_id: p for ranked in per_query for p in ranked}
            fused = fuse_rankings(
                [{p.chunk_id: p.score for p in ranked} for ranked in per_query], fusion
            )
            passages = tuple(
                _rescored(by_id[chunk_id], score) for chunk_id, score in fused[: self.k]
            )
            out.append(_Prepared(passages, sub.retrieval_queries, sub.fallback or ""))
        return out

    def gold(self) -> list[_Prepared]:
        out = []
        for item in self.items:
            if self.level == "chunk":
                chunks = {p.chunk_id: p for p in self.corpus.document_chunks(item.ground_doc_ids)}
                passages = tuple(chunks[c] for c in item.ground_chunk_ids if c in chunks)
                missing = [c for c in item.ground_chunk_ids if c not in chunks]
                note = f"ground chunks not in the corpus: {missing}" if missing else ""
            else:
                passages = tuple(
                    self.corpus.rank_within(
                        item.question, item.ground_doc_ids, self.k, self.text_weight
                    )
                )
                note = ""
            out.append(_Prepared(passages, (item.question,), note))
        return out

    # -- answering with citations ------------------------------------------------------------

    def answer_cited(
        self, prepared: Mapping[str, Sequence[_Prepared]]
    ) -> dict[str, list[ScenarioAnswer]]:
        """The answers of every cited scenario in ``prepared``, from one batched call: each
        distinct (question, passages) pair is asked once, whichever scenarios share it."""
        inputs: dict[tuple[str, tuple[str, ...]], CitedAnswerInput] = {}
        for prep in prepared.values():
            for item, p in zip(self.items, prep, strict=True):
                if p.passages:
                    question, texts = _asked(item, p)
                    inputs.setdefault(
                        (question, texts), CitedAnswerInput(question=question, passages=list(texts))
                    )
        outcomes = dict(
            zip(
                inputs,
                self.client.run(
                    CITED_ANSWER_PROMPT,
                    list(inputs.values()),
                    stage=CITED_STAGE,
                    params=self.params,
                ),
                strict=True,
            )
        )
        return {
            name: [
                self._cited(item, p, outcomes.get(_asked(item, p)))
                for item, p in zip(self.items, prep, strict=True)
            ]
            for name, prep in prepared.items()
        }

    def _cited(
        self, item: QAItem, prep: _Prepared, outcome: CallOutcome[Any] | None
    ) -> ScenarioAnswer:
        """One item's answer in a cited scenario (``outcome`` None: it had nothing to cite)."""
        if outcome is None:
            note = "; ".join(n for n in (prep.note, NOTHING_TO_CITE) if n)
            record = self._record(item, "", (), ())
            return ScenarioAnswer(record, "skipped", retrieval_queries=prep.queries, note=note)
        if not outcome.ok or outcome.value is None:
            return self._failed(item, outcome, prep.passages, prep.queries, prep.note)
        statements = tuple(statements_of(outcome.value))
        record = self._record(item, render_answer(statements), prep.passages, statements)
        return ScenarioAnswer(
            record,
            "ok",
            raw=tuple(outcome.raw_texts),
            retrieval_queries=prep.queries,
            note=prep.note,
        )

    # -- records -----------------------------------------------------------------------------

    def _docid(self, passage: CorpusPassage) -> str:
        return passage.chunk_id if self.level == "chunk" else passage.doc_id

    def _record(
        self,
        item: QAItem,
        answer: str,
        passages: Sequence[CorpusPassage],
        statements: tuple[Statement, ...],
    ) -> AnswerRecord:
        return AnswerRecord(
            qid=item.qid,
            question=item.question,
            answer=answer,
            passages=tuple(SourcePassage(self._docid(p), p.text) for p in passages),
            relevant_docids=relevant_ids(item, self.level),
            statements=statements,
            label=item.label,
        )

    def _failed(
        self,
        item: QAItem,
        outcome: CallOutcome[Any],
        passages: Sequence[CorpusPassage],
        queries: tuple[str, ...] = (),
        note: str = "",
    ) -> ScenarioAnswer:
        return ScenarioAnswer(
            self._record(item, "", passages, ()),
            "failed",
            cause=str(outcome.cause) if outcome.cause else None,
            error=outcome.error,
            raw=tuple(outcome.raw_texts),
            retrieval_queries=queries,
            note=note,
        )


def _asked(item: QAItem, prep: _Prepared) -> tuple[str, tuple[str, ...]]:
    """What a cited answer is asked from: the question and its passages' texts (the key that
    lets scenarios sharing them share one request)."""
    return item.question, tuple(p.text for p in prep.passages)


def _rescored(passage: CorpusPassage, score: float) -> CorpusPassage:
    return CorpusPassage(passage.chunk_id, passage.doc_id, passage.text, score)


def relevant_ids(item: QAItem, level: str) -> tuple[str, ...]:
    """The ids a passage must carry to be relevant: none for an unanswerable item."""
    if item.label == QuestionLabel.UNANSWERABLE:
        return ()
    return item.ground_chunk_ids if level == "chunk" else item.ground_doc_ids


def _result(
    name: str,
    answers: list[ScenarioAnswer],
    bootstrap_samples: int,
    seed: int,
    seconds: float,
) -> ScenarioResult:
    if name == Scenario.G:
        return ScenarioResult(name, answers, None, None, NO_PASSAGES_REASON, seconds)
    run = ranked_run(answers)
    metrics = retrieval_metrics(answers, run, bootstrap_samples, seed)
    absent = None if metrics is not None else NO_RELEVANT_REASON
    return ScenarioResult(name, answers, run, metrics, absent, seconds)
