"""Contrast pairs for the critique judges: one documented perturbation per criterion (seeded).

No human gives 1-5 critique ratings to calibrate against, but for each criterion we can damage an
item so that it must rate lower on that criterion and on little else: a question made to lean on
"the passage above" cannot stand alone; an answer that repeats the question is a tautology. A
critique judge is then measured on how often it rates the intact item above its damaged twin
(:func:`ragtrail.judges.calibration.calibrate_contrasts`).

Sources are intact (context, question, answer) triples with the document they come from: golden
QA items (context = the ground chunk) and accepted test-set items. Perturbations that borrow text
from elsewhere always borrow it from another document, so it cannot accidentally still fit.

Shortfall policy: :func:`build_contrasts` returns fewer than ``n`` pairs when fewer sources are
eligible (a warning names the shortfall, and the calibration's ``n`` shows it); it raises only
when not a single pair can be built, listing why.
"""

from __future__ import annotations

import logging
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ragtrail.judges.calibration import ContrastPair
from ragtrail.judges.contract import JudgeInput
from ragtrail.text import word_tokens

logger = logging.getLogger(__name__)

CRITERION_FIELDS: dict[str, tuple[str, ...]] = {
    "q_to_c_groundedness": ("context", "question"),
    "a_to_c_groundedness": ("context", "answer"),
    "q_feasibility": ("context", "question"),
    "stand_alone": ("question",),
    "q_usefulness": ("question",),
    "c_usefulness": ("context",),
    "c_clarity": ("context",),
    "qa_tautology": ("question", "answer"),
}
"""The fields of an item each critique criterion reads (the same as the critique prompts')."""

PASSAGE_PREFIX = "According to the passage above, "
FRAGMENT_WORDS = 3
MIN_STATEMENT_WORDS = 5
MAX_STATEMENT_WORDS = 40
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


@dataclass(frozen=True)
class ContrastSource:
    """An intact item a contrast pair is built from; ``doc_id`` is its document."""

    source_id: str
    doc_id: str
    context: str
    question: str
    answer: str


Apply = Callable[[ContrastSource, ContrastSource | None, random.Random], ContrastSource]


@dataclass(frozen=True)
class Perturbation:
    """How one criterion's perturbed twin is made.

    ``apply(source, foreign, rng)`` returns the damaged source; ``foreign`` is a source of another
    document when ``needs_foreign`` (else None). ``eligible`` says whether a source can be damaged
    this way (beyond having the criterion's fields); ``lends_to(lender, source)`` whether a
    source of another document has text to lend that ``source`` does not already hold.
    ``description`` is what the report and README show.
    """

    name: str
    criterion: str
    description: str
    apply: Apply
    needs_foreign: bool = False
    eligible: Callable[[ContrastSource], bool] = lambda source: True
    lends_to: Callable[[ContrastSource, ContrastSource], bool] = lambda lender, source: (
        lender.context.strip() != source.context.strip()
    )


# -- the perturbations ---------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return text.split()


def statements(text: str) -> list[str]:
    """The sentences of ``text`` that can stand as a statement: 5 to 40 words, whitespace
    collapsed, in order."""
    out = []
    for piece in _SENTENCE_END.split(text):
        sentence = " ".join(piece.split())
        if MIN_STATEMENT_WORDS <= len(_words(sentence)) <= MAX_STATEMENT_WORDS:
            out.append(sentence)
    return out


def _lower_first(text: str) -> str:
    """``text`` with its first letter lowered, unless its first word is an acronym ("PTO")."""
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    if len(first) > 1 and first[1].isupper():
        return text
    return text[:1].lower() + text[1:]


def _refer_to_passage(
    source: ContrastSource, _: ContrastSource | None, __: random.Random
) -> ContrastSource:
    question = source.question.strip()
    return replace(source, question=PASSAGE_PREFIX + _lower_first(question))


def _answer_is_question(
    source: ContrastSource, _: ContrastSource | None, __: random.Random
) -> ContrastSource:
    return replace(source, answer=source.question)


def _lender(foreign: ContrastSource | None) -> ContrastSource:
    if foreign is None:
        raise ValueError("this perturbation borrows from a source of another document: none given")
    return foreign


def _foreign_context(
    source: ContrastSource, foreign: ContrastSource | None, __: random.Random
) -> ContrastSource:
    return replace(source, context=_lender(foreign).context)


def _foreign_statement(
    source: ContrastSource, foreign: ContrastSource | None, rng: random.Random
) -> ContrastSource:
    return replace(source, answer=rng.choice(_new_statements(_lender(foreign), source)))


def _vague_fragment(
    source: ContrastSource, _: ContrastSource | None, __: random.Random
) -> ContrastSource:
    head = _words(source.question)[:FRAGMENT_WORDS]
    head[-1] = head[-1].rstrip("?.!,;:")
    return replace(source, question=" ".join(head) + "?")


def _word_list(
    source: ContrastSource, _: ContrastSource | None, __: random.Random
) -> ContrastSource:
    return replace(source, context=" ".join(sorted(set(word_tokens(source.context)))))


def _shuffled_words(
    source: ContrastSource, _: ContrastSource | None, rng: random.Random
) -> ContrastSource:
    words = _words(source.context)
    shuffled = list(words)
    rng.shuffle(shuffled)
    if shuffled == words:  # tiny contexts: rotating a list of >= 2 distinct words changes it
        shuffled = shuffled[1:] + shuffled[:1]
    return replace(source, context=" ".join(shuffled))


def _new_statements(lender: ContrastSource, source: ContrastSource) -> list[str]:
    """The statements of ``lender``'s context that ``source``'s context does not hold (shared
    boilerplate would still be supported)."""
    return [s for s in statements(lender.context) if s not in source.context]


def _has_new_statement(lender: ContrastSource, source: ContrastSource) -> bool:
    return bool(_new_statements(lender, source))


def _not_passage_bound(source: ContrastSource) -> bool:
    return not source.question.strip().lower().startswith(PASSAGE_PREFIX.strip().lower())


def _longer_than_fragment(source: ContrastSource) -> bool:
    return len(_words(source.question)) > FRAGMENT_WORDS


def _two_distinct_words(source: ContrastSource) -> bool:
    return len(set(_words(source.context))) >= 2


def _answer_differs(source: ContrastSource) -> bool:
    return source.answer.strip() != source.question.strip()


_FOREIGN_CONTEXT = (
    "the question paired with the context of a source from another document (seeded pick), "
    "so the context no longer holds what the question asks"
)

PERTURBATIONS: dict[str, Perturbation] = {
    "q_to_c_groundedness": Perturbation(
        "foreign_context",
        "q_to_c_groundedness",
        _FOREIGN_CONTEXT + ": it cannot be answered from it",
        _foreign_context,
        needs_foreign=True,
    ),
    "a_to_c_groundedness": Perturbation(
        "foreign_statement",
        "a_to_c_groundedness",
        "the answer replaced by a sentence (5-40 words, seeded pick) from the context of a "
        "source from another document, one its own context does not hold: a statement the "
        "context does not support",
        _foreign_statement,
        needs_foreign=True,
        lends_to=_has_new_statement,
    ),
    "q_feasibility": Perturbation(
        "foreign_context",
        "q_feasibility",
        _FOREIGN_CONTEXT + ": the question would not retrieve it",
        _foreign_context,
        needs_foreign=True,
    ),
    "stand_alone": Perturbation(
        "passage_reference",
        "stand_alone",
        f'the question prefixed with "{PASSAGE_PREFIX.strip()}" (its first letter lowered '
        "unless it starts an acronym): it leans on a passage the reader does not have",
        _refer_to_passage,
        eligible=_not_passage_bound,
    ),
    "q_usefulness": Perturbation(
        "vague_fragment",
        "q_usefulness",
        f"the question cut to its first {FRAGMENT_WORDS} words plus '?' (questions of more than "
        f"{FRAGMENT_WORDS} words only): a vague fragment a domain user cannot act on",
        _vague_fragment,
        eligible=_longer_than_fragment,
    ),
    "c_usefulness": Perturbation(
        "word_list",
        "c_usefulness",
        "the context replaced by its distinct words, lower-cased, in alphabetical order: the "
        "vocabulary stays, not one statement does",
        _word_list,
    ),
    "c_clarity": Perturbation(
        "shuffled_words",
        "c_clarity",
        "the context's words (punctuation attached) shuffled in a seeded order: same words, "
        "no readable sentence",
        _shuffled_words,
        eligible=_two_distinct_words,
    ),
    "qa_tautology": Perturbation(
        "answer_is_question",
        "qa_tautology",
        "the answer replaced by the question itself: it only repeats the question",
        _answer_is_question,
        eligible=_answer_differs,
    ),
}
"""Criterion -> its perturbation, in the critiques' report order."""

assert tuple(PERTURBATIONS) == tuple(CRITERION_FIELDS)


# -- building pairs ------------------------------------------------------------------------------


def criterion_input(criterion: str, source: ContrastSource) -> JudgeInput:
    """The judge input of ``source`` for ``criterion``: only the fields the criterion reads."""
    fields = CRITERION_FIELDS[criterion]
    return JudgeInput(**{f: getattr(source, f) for f in fields})


def _has_fields(criterion: str, source: ContrastSource) -> bool:
    return all(getattr(source, f).strip() for f in CRITERION_FIELDS[criterion])


def build_contrasts(
    criterion: str, sources: Sequence[ContrastSource], *, n: int, seed: int
) -> list[ContrastPair]:
    """A seeded sample of up to ``n`` contrast pairs for ``criterion``.

    Sources are eligible when they hold non-empty text in every field the criterion reads and
    pass the perturbation's own check; for a perturbation that borrows text, when some source of
    another document can lend it (``lends_to``; by default its context differs). The sample, the foreign picks and any
    shuffles come from one ``random.Random`` seeded by ``seed`` and the criterion, over sources in
    ``source_id`` order, so the input order does not matter. Fewer eligible sources than ``n``
    give fewer pairs and a warning; none at all is an error.
    """
    if criterion not in PERTURBATIONS:
        raise KeyError(f"unknown criterion {criterion!r}; known: {list(PERTURBATIONS)}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    counts = Counter(s.source_id for s in sources)
    duplicates = sorted(i for i, k in counts.items() if k > 1)
    if duplicates:
        raise ValueError(f"duplicate contrast source ids {duplicates}")
    perturbation = PERTURBATIONS[criterion]
    ordered = sorted(sources, key=lambda s: s.source_id)

    def foreign_for(source: ContrastSource) -> list[ContrastSource]:
        return [
            s for s in ordered if s.doc_id != source.doc_id and perturbation.lends_to(s, source)
        ]

    eligible = [
        s
        for s in ordered
        if _has_fields(criterion, s)
        and perturbation.eligible(s)
        and (not perturbation.needs_foreign or foreign_for(s))
    ]
    if not eligible:
        need = f"the fields {list(CRITERION_FIELDS[criterion])}"
        if perturbation.needs_foreign:
            need += " and another document to borrow from"
        raise ValueError(
            f"no contrast pair for {criterion} can be built from {len(sources)} source(s): "
            f"none has {need} and passes the {perturbation.name!r} check"
        )
    rng = random.Random(f"{seed}:{criterion}")
    chosen = rng.sample(eligible, min(n, len(eligible)))
    if len(chosen) < n:
        logger.warning(
            "contrasts for %s: %d pair(s) requested, only %d of %d source(s) eligible",
            criterion,
            n,
            len(chosen),
            len(sources),
        )
    pairs = []
    for source in chosen:
        foreign = rng.choice(foreign_for(source)) if perturbation.needs_foreign else None
        perturbed = perturbation.apply(source, foreign, rng)
        pairs.append(
            ContrastPair(
                criterion=criterion,
                perturbation=perturbation.name,
                intact=criterion_input(criterion, source),
                perturbed=criterion_input(criterion, perturbed),
                source_id=source.source_id,
            )
        )
    return pairs


__all__ = [
    "CRITERION_FIELDS",
    "PERTURBATIONS",
    "ContrastSource",
    "Perturbation",
    "build_contrasts",
    "criterion_input",
    "statements",
]
