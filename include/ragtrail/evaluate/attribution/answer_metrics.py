"""Per-answer attribution metrics of an :class:`~ragtrail.evaluate.attribution.cited_answers.AnswerRecord`
(METHODS §8): entailment-based citation quality, citation overlap with a gold answer, correctness
against gold answers, and citation precision/recall against known relevance.

An answer is read as statements (``record.cited_statements()``, parsed once per answer text:
pysbd sentences with their ``[k]`` numbers); ``[k]`` names ``record.passages[k-1]``. A number outside ``1..len(passages)``
cites nothing and is counted apart as an invalid citation.

Entailment metrics ask a :class:`~ragtrail.judges.contract.Judge` whether a premise (one passage,
or several joined by a line break) supports a statement. :class:`Entailments` keeps every verdict
of an evaluation, keyed by the (premise, hypothesis) text pair, so a pair is judged once however
many metrics or answers need it; :func:`judge_entailments` fills it for a whole evaluation in at
most two judge calls (the pairs every metric needs, then the leave-one-out pairs the over-citation test
of precision needs for the few statements that reach it). A failed verdict makes every metric
that reads it undefined, with the judge's error as the reason, never 0 and never NaN.

- ``autoais_cit``: mean over statements of "some cited passage alone entails it" (a statement
  without a valid citation scores 0).
- ``autoais_pssg``: the same over every passage the model was given (undefined without
  passages).
- ``alce_citation_recall``: mean over statements of "its cited passages together entail it".
- ``alce_citation_precision``: over the (statement, valid citation) pairs, a citation counts 1
  when its statement is supported jointly, unless it is an over-citation: it does not entail the
  statement alone and the statement's other cited passages still entail it together. Undefined
  when the answer has no valid citation. This follows ALCE's ``compute_autoais`` with one
  deliberate difference: ALCE scores a statement with any out-of-range citation as unsupported
  and leaves its citations out of the precision denominator; here the invalid numbers are
  dropped and the statement is judged on its valid ones (and the invalid count is reported).

Citation overlap, correctness and relevance metrics need no judge; see their functions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragtrail.evaluate.attribution.cited_answers import (
    AnswerRecord,
    GoldAnswer,
    Statement,
    all_citations,
    parse_citation_markers,
    parse_statements,
    strip_citation_markers,
)
from ragtrail.jsonsafe import JsonObject, mark_undefined
from ragtrail.judges.contract import (
    ENTAILMENT_CATEGORIES,
    SUPPORTED,
    Judge,
    JudgeInput,
    Verdict,
)

AUTOAIS_CIT = "autoais_cit"
AUTOAIS_PSSG = "autoais_pssg"
ALCE_RECALL = "alce_citation_recall"
ALCE_PRECISION = "alce_citation_precision"
OVERLAP_PRECISION = "overlap_precision"
OVERLAP_RECALL = "overlap_recall"
ROUGE_L_PRECISION = "rouge_l_precision"
ROUGE_L_RECALL = "rouge_l_recall"
ROUGE_L_F1 = "rouge_l_f1"
BLEU = "bleu"
CITATION_PRECISION = "citation_precision"
CITATION_RECALL = "citation_recall"
CITATION_F1 = "citation_f1"

ENTAILMENT_METRICS = (AUTOAIS_CIT, AUTOAIS_PSSG, ALCE_RECALL, ALCE_PRECISION)
OVERLAP_METRICS = (OVERLAP_PRECISION, OVERLAP_RECALL)
CORRECTNESS_METRICS = (ROUGE_L_PRECISION, ROUGE_L_RECALL, ROUGE_L_F1, BLEU)
RELEVANCE_METRICS = (CITATION_PRECISION, CITATION_RECALL, CITATION_F1)
ALL_METRICS = (*ENTAILMENT_METRICS, *OVERLAP_METRICS, *CORRECTNESS_METRICS, *RELEVANCE_METRICS)

PASSAGE_SEPARATOR = "\n"
"""Joins the passages of a joint premise (ALCE joins its formatted documents the same way)."""

NO_STATEMENTS = "the answer has no statement (empty answer or abstention)"
NO_PASSAGES = "no passages were given to the model"
NO_VALID_CITATION = "the answer cites no passage (no valid citation)"
NO_GOLD_ANSWERS = "the record has no gold answers"
NO_GOLD_PASSAGES = "the record has no gold passages"
NO_GOLD_CITATION = "the chosen gold answer cites no gold passage"
NO_GOLD_TEXT = "every gold answer is empty once citation markers are removed"
NO_RELEVANCE = "the record has no relevant_docids"
NO_RELEVANT_PASSAGE = "none of the relevant documents is among the passages"

Pair = tuple[str, str]
"""(premise, hypothesis) texts of one entailment question."""


@dataclass(frozen=True)
class Score:
    """One per-answer metric value in [0, 1], or None with the reason it is undefined."""

    value: float | None
    reason: str | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.reason is None):
            raise ValueError("a Score has either a value or an undefined reason, not both")
        if self.value is not None and not math.isfinite(self.value):
            raise ValueError(f"a Score must be finite, got {self.value!r}")

    @classmethod
    def undefined(cls, reason: str) -> Score:
        return cls(None, reason)


# ---------------------------------------------------------------------------------- passages


@functools.lru_cache(maxsize=4096)
def _parsed(answer: str) -> tuple[Statement, ...]:
    return tuple(parse_statements(answer))


def statements_of_record(record: AnswerRecord) -> tuple[Statement, ...]:
    """``record.cited_statements()``, parsing each answer text once however many metrics read
    it (pysbd is the slow part of scoring)."""
    if record.statements is not None:
        return record.statements
    return _parsed(record.answer)


def valid_citations(statement: Statement, n_passages: int) -> tuple[int, ...]:
    """The statement's citation numbers that name a passage (1..n_passages), in order."""
    return tuple(k for k in statement.citations if 1 <= k <= n_passages)


def citation_counts(record: AnswerRecord) -> tuple[int, int]:
    """(all, invalid) (statement, citation) pairs of the answer; invalid = outside 1..n."""
    n = len(record.passages)
    statements = statements_of_record(record)
    total = sum(len(s.citations) for s in statements)
    valid = sum(len(valid_citations(s, n)) for s in statements)
    return total, total - valid


def joint_premise(record: AnswerRecord, numbers: Sequence[int]) -> str:
    """The texts of passages ``numbers`` (1-based) joined; one passage is its own text."""
    return PASSAGE_SEPARATOR.join(record.passages[k - 1].text for k in numbers)


# ------------------------------------------------------------------------------ entailments


class Entailments:
    """Entailment verdicts of one judge, keyed by (premise, hypothesis).

    :meth:`judge_all` sends every pair not judged yet, each once, in one ``judge.judge`` call.
    :meth:`entailed` reads a verdict, judging a pair it has not seen on its own (the metric
    functions stay usable one answer at a time; :func:`judge_entailments` fills the table first
    so that an evaluation makes at most two calls).
    """

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self.calls = 0
        self._verdicts: dict[Pair, Verdict] = {}

    def judge_all(self, pairs: Iterable[Pair]) -> None:
        todo = list(dict.fromkeys(p for p in pairs if p not in self._verdicts))
        if not todo:
            return
        items = [JudgeInput(premise=premise, hypothesis=hypothesis) for premise, hypothesis in todo]
        verdicts = self.judge.judge(items)
        self.calls += 1
        if len(verdicts) != len(todo):
            raise ValueError(
                f"judge {self.judge.spec.ref} returned {len(verdicts)} verdicts for "
                f"{len(todo)} items (the Judge contract is one verdict per item)"
            )
        self._verdicts.update(zip(todo, verdicts, strict=True))

    def verdict(self, premise: str, hypothesis: str) -> Verdict:
        pair = (premise, hypothesis)
        if pair not in self._verdicts:
            self.judge_all([pair])
        return self._verdicts[pair]

    def entailed(self, premise: str, hypothesis: str) -> bool | None:
        """True/False, or None when the verdict failed (see :func:`verdict_problem`)."""
        verdict = self.verdict(premise, hypothesis)
        return None if verdict_problem(verdict) else verdict.value == SUPPORTED

    @property
    def judged(self) -> int:
        """Distinct pairs judged."""
        return len(self._verdicts)

    def failures(self) -> dict[Pair, Verdict]:
        """The pairs whose verdict failed, with the verdicts (error and raw output)."""
        return {pair: v for pair, v in self._verdicts.items() if verdict_problem(v)}


def verdict_problem(verdict: Verdict) -> str | None:
    """Why a verdict cannot be read as entailed / not entailed, or None when it can."""
    if not verdict.ok:
        return verdict.error or "the judge returned no value"
    if verdict.value not in ENTAILMENT_CATEGORIES:
        return f"not an entailment category: {verdict.value!r}"
    return None


class _Reads:
    """The entailment reads of one metric on one answer: a failed verdict reads as False while
    the metric is computed, and :meth:`score` then makes the whole metric undefined."""

    def __init__(self, table: Entailments) -> None:
        self.table = table
        self.failed: dict[Pair, str] = {}

    def __call__(self, premise: str, hypothesis: str) -> bool:
        verdict = self.table.verdict(premise, hypothesis)
        problem = verdict_problem(verdict)
        if problem is not None:
            self.failed[(premise, hypothesis)] = problem
            return False
        return verdict.value == SUPPORTED

    def score(self, value: float) -> Score:
        if self.failed:
            first = next(iter(self.failed.values()))
            return Score.undefined(
                f"the entailment judge failed on {len(self.failed)} pair(s) this metric "
                f"needs (first: {first})"
            )
        return Score(value)


def first_round_pairs(record: AnswerRecord) -> Iterator[Pair]:
    """Every pair the entailment metrics of ``record`` need whatever the verdicts: each passage
    against each statement, and each statement's cited passages together."""
    n = len(record.passages)
    for statement in statements_of_record(record):
        for passage in record.passages:
            yield passage.text, statement.text
        cited = valid_citations(statement, n)
        if cited:
            yield joint_premise(record, cited), statement.text


def overcitation_pairs(record: AnswerRecord, table: Entailments) -> Iterator[Pair]:
    """The leave-one-out pairs precision needs after the first round: for a jointly supported
    statement with several citations, each citation that does not entail it alone (or whose
    verdict failed) is tested by the remaining cited passages together."""
    n = len(record.passages)
    for statement in statements_of_record(record):
        cited = valid_citations(statement, n)
        if len(cited) < 2 or not table.entailed(joint_premise(record, cited), statement.text):
            continue
        for k in cited:
            if table.entailed(record.passages[k - 1].text, statement.text) is not True:
                others = [j for j in cited if j != k]
                yield joint_premise(record, others), statement.text


def judge_entailments(records: Sequence[AnswerRecord], judge: Judge) -> Entailments:
    """Every verdict the entailment metrics of ``records`` need, in at most two judge calls."""
    table = Entailments(judge)
    table.judge_all(pair for record in records for pair in first_round_pairs(record))
    table.judge_all(pair for record in records for pair in overcitation_pairs(record, table))
    return table


# ------------------------------------------------------------------------- entailment metrics


def autoais_cit(record: AnswerRecord, table: Entailments) -> Score:
    """Mean over statements of max over its cited passages of entail(passage, statement)."""
    statements = statements_of_record(record)
    if not statements:
        return Score.undefined(NO_STATEMENTS)
    reads = _Reads(table)
    n = len(record.passages)
    supported = 0
    for s in statements:
        verdicts = [reads(record.passages[k - 1].text, s.text) for k in valid_citations(s, n)]
        supported += any(verdicts)
    return reads.score(supported / len(statements))


def autoais_pssg(record: AnswerRecord, table: Entailments) -> Score:
    """Mean over statements of max over every given passage of entail(passage, statement)."""
    statements = statements_of_record(record)
    if not statements:
        return Score.undefined(NO_STATEMENTS)
    if not record.passages:
        return Score.undefined(NO_PASSAGES)
    reads = _Reads(table)
    supported = 0
    for s in statements:
        supported += any([reads(p.text, s.text) for p in record.passages])
    return reads.score(supported / len(statements))


def alce_citation_recall(record: AnswerRecord, table: Entailments) -> Score:
    """Share of statements entailed by their cited passages together (no citation: 0)."""
    statements = statements_of_record(record)
    if not statements:
        return Score.undefined(NO_STATEMENTS)
    reads = _Reads(table)
    n = len(record.passages)
    supported = 0
    for s in statements:
        cited = valid_citations(s, n)
        supported += bool(cited) and reads(joint_premise(record, cited), s.text)
    return reads.score(supported / len(statements))


def alce_citation_precision(record: AnswerRecord, table: Entailments) -> Score:
    """Share of (statement, valid citation) pairs that count (see the module docstring)."""
    n = len(record.passages)
    statements = statements_of_record(record)
    cited_by = [valid_citations(s, n) for s in statements]
    total = sum(len(cited) for cited in cited_by)
    if total == 0:
        return Score.undefined(NO_STATEMENTS if not statements else NO_VALID_CITATION)
    reads = _Reads(table)
    counted = 0
    for s, cited in zip(statements, cited_by, strict=True):
        if not cited or not reads(joint_premise(record, cited), s.text):
            continue
        if len(cited) == 1:
            counted += 1
            continue
        for k in cited:
            alone = reads(record.passages[k - 1].text, s.text)
            others = [j for j in cited if j != k]
            counted += alone or not reads(joint_premise(record, others), s.text)
    return reads.score(counted / total)


def entailment_scores(record: AnswerRecord, table: Entailments) -> dict[str, Score]:
    return {
        AUTOAIS_CIT: autoais_cit(record, table),
        AUTOAIS_PSSG: autoais_pssg(record, table),
        ALCE_RECALL: alce_citation_recall(record, table),
        ALCE_PRECISION: alce_citation_precision(record, table),
    }


# ---------------------------------------------------------------------------- citation overlap


def choose_gold_answer(answers: Sequence[GoldAnswer]) -> GoldAnswer:
    """The gold answer overlap is measured against: the first that is attributable and
    informative, else the first attributable, else the first informative, else the first
    (Attributed-IR's rule for HAGRID). Unrated flags (None) count as not set."""
    if not answers:
        raise ValueError("no gold answers to choose from")
    preferences = (
        lambda a: a.attributable is True and a.informative is True,
        lambda a: a.attributable is True,
        lambda a: a.informative is True,
    )
    for preferred in preferences:
        chosen = next((a for a in answers if preferred(a)), None)
        if chosen is not None:
            return chosen
    return answers[0]


@dataclass(frozen=True)
class Overlap:
    """Citation overlap of one answer with its chosen gold answer, by document id."""

    precision: Score
    recall: Score
    generated: frozenset[str] = frozenset()
    gold: frozenset[str] = frozenset()


def citation_overlap(record: AnswerRecord, *, defect_compatible: bool = False) -> Overlap:
    """|C_gold ∩ C_gen| / |C_gen| (precision) and / |C_gold| (recall).

    C_gold = docids of the gold passages cited by the chosen gold answer
    (:func:`choose_gold_answer`; its ``[k]`` names ``gold_passages[k-1]``), C_gen = docids of
    every passage the answer cites. An empty C_gen or C_gold leaves its metric undefined.

    ``defect_compatible=True`` reproduces Attributed-IR's ``citation_overlap``
    (``scripts/citations_eval.py``): its range check on the generated side measures the wrong
    object (a one-column selection of the row, whose length is 1), so only citation ``[1]``
    counts there; and an empty set scores 0 instead of being undefined. Use it only to compare
    with numbers published from that script.
    """
    if not record.gold_answers:
        return Overlap(Score.undefined(NO_GOLD_ANSWERS), Score.undefined(NO_GOLD_ANSWERS))
    if not record.gold_passages:
        return Overlap(Score.undefined(NO_GOLD_PASSAGES), Score.undefined(NO_GOLD_PASSAGES))
    gold_passages = record.gold_passages
    gold_numbers = parse_citation_markers(choose_gold_answer(record.gold_answers).text)
    gold = frozenset(
        gold_passages[k - 1].docid for k in gold_numbers if 1 <= k <= len(gold_passages)
    )
    numbers = all_citations(statements_of_record(record))
    if defect_compatible:
        numbers = tuple(k for k in numbers if k == 1)
    generated = frozenset(
        record.passages[k - 1].docid for k in numbers if 1 <= k <= len(record.passages)
    )
    matched = len(gold & generated)

    def ratio(denominator: int, reason: str) -> Score:
        if denominator:
            return Score(matched / denominator)
        return Score(0.0) if defect_compatible else Score.undefined(reason)

    return Overlap(
        precision=ratio(len(generated), NO_VALID_CITATION),
        recall=ratio(len(gold), NO_GOLD_CITATION),
        generated=generated,
        gold=gold,
    )


def overlap_scores(record: AnswerRecord) -> dict[str, Score]:
    overlap = citation_overlap(record)
    return {OVERLAP_PRECISION: overlap.precision, OVERLAP_RECALL: overlap.recall}


# -------------------------------------------------------------------------------- correctness


@functools.cache
def _rouge_scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def answer_text(record: AnswerRecord) -> str:
    """The answer without citation markers: the statements' texts when the producer gave
    statements (its ``answer`` may be raw structured output), else the stripped ``answer``."""
    if record.statements is not None:
        return " ".join(s.text for s in record.statements)
    return strip_citation_markers(record.answer)


def correctness_scores(record: AnswerRecord) -> dict[str, Score]:
    """ROUGE-L precision/recall/F1 (rouge-score, stemmed) and sentence BLEU (sacrebleu, /100),
    each the best over the gold answers, markers stripped from both sides. An empty answer
    scores 0."""
    if not record.gold_answers:
        return dict.fromkeys(CORRECTNESS_METRICS, Score.undefined(NO_GOLD_ANSWERS))
    golds = [t for t in (strip_citation_markers(g.text) for g in record.gold_answers) if t]
    if not golds:
        return dict.fromkeys(CORRECTNESS_METRICS, Score.undefined(NO_GOLD_TEXT))
    import sacrebleu

    answer = answer_text(record)
    rouge = [_rouge_scorer().score(gold, answer)["rougeL"] for gold in golds]
    bleu = [sacrebleu.sentence_bleu(answer, [gold]).score / 100.0 for gold in golds]
    return {
        ROUGE_L_PRECISION: Score(max(float(r.precision) for r in rouge)),
        ROUGE_L_RECALL: Score(max(float(r.recall) for r in rouge)),
        ROUGE_L_F1: Score(max(float(r.fmeasure) for r in rouge)),
        BLEU: Score(max(bleu)),
    }


# ------------------------------------------------------------------- relevance of citations


def relevance_scores(record: AnswerRecord) -> dict[str, Score]:
    """Citation precision/recall/F1 against ``relevant_docids``.

    precision = valid cited passages whose docid is relevant / valid cited passages (each
    passage number once per answer); recall = distinct relevant docids cited / distinct
    relevant docids among the passages; F1 their harmonic mean, 0 when recall is 0 (whatever
    the precision, even undefined for an answer citing nothing: the limit of 2PR/(P+R) as R
    goes to 0), undefined when recall is.
    """
    if record.relevant_docids is None:
        return dict.fromkeys(RELEVANCE_METRICS, Score.undefined(NO_RELEVANCE))
    relevant = set(record.relevant_docids)
    n = len(record.passages)
    cited = [k for k in all_citations(statements_of_record(record)) if 1 <= k <= n]
    docids = [record.passages[k - 1].docid for k in cited]
    present = relevant & {p.docid for p in record.passages}
    if cited:
        precision = Score(sum(d in relevant for d in docids) / len(cited))
    else:
        precision = Score.undefined(NO_VALID_CITATION)
    if present:
        recall = Score(len(present & set(docids)) / len(present))
    else:
        recall = Score.undefined(NO_RELEVANT_PASSAGE)
    return {
        CITATION_PRECISION: precision,
        CITATION_RECALL: recall,
        CITATION_F1: f1(precision, recall),
    }


def f1(precision: Score, recall: Score) -> Score:
    """Harmonic mean of two scores (see :func:`relevance_scores` for the undefined cases)."""
    if recall.value is None:
        return recall
    if recall.value == 0.0:
        return Score(0.0)
    if precision.value is None:
        return precision
    total = precision.value + recall.value
    return Score(2 * precision.value * recall.value / total if total else 0.0)


# ---------------------------------------------------------------------------------- together


def has_inputs(metric: str, record: AnswerRecord) -> bool:
    """Whether ``record`` carries what ``metric`` needs (entailment metrics: always)."""
    if metric in OVERLAP_METRICS:
        return bool(record.gold_answers) and bool(record.gold_passages)
    if metric in CORRECTNESS_METRICS:
        return bool(record.gold_answers)
    if metric in RELEVANCE_METRICS:
        return record.relevant_docids is not None
    return metric in ENTAILMENT_METRICS


def record_scores(record: AnswerRecord, table: Entailments | None) -> dict[str, Score]:
    """Every metric of one answer; the entailment ones only with a table."""
    scores: dict[str, Score] = {}
    if table is not None:
        scores.update(entailment_scores(record, table))
    scores.update(overlap_scores(record))
    scores.update(correctness_scores(record))
    scores.update(relevance_scores(record))
    return scores


def scores_as_json(scores: Mapping[str, Score]) -> JsonObject:
    """``{metric: value}`` with ``undefined: {metric: reason}`` (the jsonsafe convention)."""
    out: JsonObject = {}
    for name, score in scores.items():
        if score.reason is None:
            out[name] = score.value
        else:
            mark_undefined(out, name, score.reason)
    return out
