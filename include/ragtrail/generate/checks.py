"""Model-free checks of generated candidates: they need no model verdict, so they always gate.

Judges that have not been calibrated only advise; these checks reject on their own, before any
labeller or critique call (which they also save). Each is a pure function of the candidate's text
(and, for relatedness, of an embedding function passed in):

- ``mentions_passage``: the question points at its source ("the passage", "according to the
  ..."), so it cannot stand as a search query (patterns:
  :data:`ragtrail.text.SOURCE_REFERENCE_PATTERNS`, the ones the GX test-set suite verifies);
- ``answer_repeats_question``: the answer adds nothing to the question — its comparison key equals
  the question's, or every content word of the answer already occurs in the question (a yes/no
  "Is it true that <statement>?" gives its answer away; a real answer brings at least one new
  word: the number, the name, the rule);
- ``empty_answer``: an answerable candidate with no answer (unanswerable candidates have none by
  design, so they are not checked);
- ``wrong_language``: the question is not in its context's language (the detector gives that
  language less than :data:`MIN_LANGUAGE_PROBABILITY`); a question too short to call, or a
  context of unknown language, is not checked;
- ``unrelated_statement``: cosine similarity of the question and the statement it was written
  from below a measured bar (``generation.min_question_statement_similarity``, measured by
  ``benchmarks/bench_check_similarity.py``).

Failures become ``check:<name>[=<detail>]`` reject reasons (:class:`ragtrail.records.RejectKind`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import NamedTuple

import numpy as np

from ragtrail.languages import UNDETERMINED, language_probability
from ragtrail.records import (
    ANSWERABLE_LABELS,
    REJECT_REASONS_SEPARATOR,
    QACandidate,
    RejectKind,
    format_reject_reason,
)
from ragtrail.text import content_words, source_reference, text_key

__all__ = [
    "CheckFailure",
    "CheckName",
    "Encode",
    "answer_repeats_question",
    "check_candidates",
    "empty_answer",
    "mentions_passage",
    "reject_reason",
    "text_checks",
    "unrelated_statements",
    "wrong_language",
]

MIN_LANGUAGE_PROBABILITY = 0.1
"""Below this probability of the context's language a question is rejected. The sixteen French
golden questions score 0.86 to 1.0 for French; English questions about French text score below
0.01, so the bar sits far from both."""

Encode = Callable[[Sequence[str]], np.ndarray]
"""Texts -> L2-normalised embedding rows (``Runtime.embedder.encode``)."""


class CheckName(StrEnum):
    MENTIONS_PASSAGE = "mentions_passage"
    ANSWER_REPEATS_QUESTION = "answer_repeats_question"
    EMPTY_ANSWER = "empty_answer"
    WRONG_LANGUAGE = "wrong_language"
    UNRELATED_STATEMENT = "unrelated_statement"


class CheckFailure(NamedTuple):
    """One failed check: which, and an optional detail (the matched phrase, the similarity)."""

    kind: CheckName
    detail: str | None = None

    def reason(self) -> str:
        """The stored reject reason, e.g. ``check:unrelated_statement=0.120<0.16``."""
        detail = f"{self.kind.value}={self.detail}" if self.detail else self.kind.value
        return format_reject_reason(RejectKind.CHECK, detail)


def mentions_passage(question: str) -> CheckFailure | None:
    """Fails when the question refers to its source ("the passage", "according to the", ...:
    :data:`ragtrail.text.SOURCE_REFERENCE_PATTERNS`); the detail is the phrase found."""
    phrase = source_reference(question)
    return None if phrase is None else CheckFailure(CheckName.MENTIONS_PASSAGE, phrase)


def answer_repeats_question(
    question: str, answer: str, language: str = "en"
) -> CheckFailure | None:
    """Fails when the answer's comparison key equals the question's, or when the answer has
    content words (stop words of ``language`` aside) and all of them occur in the question. An
    empty answer is not checked here."""
    answer_key = text_key(answer)
    if not answer_key:
        return None
    if answer_key == text_key(question):
        return CheckFailure(CheckName.ANSWER_REPEATS_QUESTION, "same_text")
    words = content_words(answer, language=language)
    if words and words <= content_words(question, language=language):
        return CheckFailure(CheckName.ANSWER_REPEATS_QUESTION, "no_new_word")
    return None


def empty_answer(answer: str, requested_label: str) -> CheckFailure | None:
    """Fails when a candidate requested as answerable has no answer text."""
    if requested_label in ANSWERABLE_LABELS and not answer.strip():
        return CheckFailure(CheckName.EMPTY_ANSWER)
    return None


def wrong_language(question: str, language: str) -> CheckFailure | None:
    """Fails when ``question`` is not in ``language`` (its context's); the detail is the
    detector's probability of that language, e.g. ``fr=0.002``."""
    if language == UNDETERMINED or not question.strip():
        return None
    probability = language_probability(question, language)
    if probability is None or probability >= MIN_LANGUAGE_PROBABILITY:
        return None
    return CheckFailure(CheckName.WRONG_LANGUAGE, f"{language}={probability:.3f}")


def text_checks(cand: QACandidate) -> list[CheckFailure]:
    """The checks that read only the candidate's text, in a fixed order."""
    language = cand.context.language
    found = [
        mentions_passage(cand.question),
        answer_repeats_question(cand.question, cand.answer, language),
        empty_answer(cand.answer, cand.requested_label),
        wrong_language(cand.question, language),
    ]
    return [f for f in found if f is not None]


def unrelated_statements(
    questions: Sequence[str], statements: Sequence[str], encode: Encode, min_similarity: float
) -> list[CheckFailure | None]:
    """Per pair, a failure when cos(question, statement) < ``min_similarity``.

    One ``encode`` call for all texts; pairs where either text is blank are not checked (None).
    """
    if len(questions) != len(statements):
        raise ValueError(f"{len(questions)} questions but {len(statements)} statements")
    todo = [
        i
        for i, (q, s) in enumerate(zip(questions, statements, strict=True))
        if q.strip() and s.strip()
    ]
    out: list[CheckFailure | None] = [None] * len(questions)
    if not todo:
        return out
    rows = encode([questions[i] for i in todo] + [statements[i] for i in todo])
    q_rows, s_rows = rows[: len(todo)], rows[len(todo) :]
    for i, sim in zip(todo, np.einsum("ij,ij->i", q_rows, s_rows), strict=True):
        if sim < min_similarity:
            detail = f"{float(sim):.3f}<{min_similarity:g}"
            out[i] = CheckFailure(CheckName.UNRELATED_STATEMENT, detail)
    return out


def check_candidates(
    cands: Sequence[QACandidate], encode: Encode, min_similarity: float
) -> list[list[CheckFailure]]:
    """Every check on every candidate; one list of failures per candidate (empty = passed)."""
    related = unrelated_statements(
        [c.question for c in cands], [c.statement for c in cands], encode, min_similarity
    )
    return [
        text_checks(c) + ([r] if r is not None else []) for c, r in zip(cands, related, strict=True)
    ]


def reject_reason(failures: Sequence[CheckFailure]) -> str:
    """The stored reason of a candidate's failures, joined like other multi-reason rejections."""
    if not failures:
        raise ValueError("no failed check to give as a reason")
    return REJECT_REASONS_SEPARATOR.join(f.reason() for f in failures)
