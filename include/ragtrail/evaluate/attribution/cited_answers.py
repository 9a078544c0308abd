"""Answers with citations: parsing ``[k]`` markers, splitting answers into cited statements, and
the typed prompts that ask a model for such answers.

Every citation evaluation (relevance mixtures, attributed-answer scenarios, answers brought from a
production system) reads an answer as a list of :class:`Statement` s, each a sentence with the
passage numbers it cites. Two sources produce them:

* **text** (a remote model's reply, a logged production answer): :func:`parse_statements` splits
  the text into sentences with pysbd (a kept sentence-boundary library) and reads the markers
  ``[1]``, ``[1][2]``, ``[1, 2]`` and ``[1,2]`` in each. A marker group that opens a sentence
  ("... in 1902. [2] The ...") belongs to the sentence before it, where writers put it.
* **structured output** of :data:`CITED_ANSWER_PROMPT`: ``{"sentences": [{"text", "citations"}]}``.
  Local models decode it under a per-input schema (:func:`cited_answer_schema`) that admits only
  citation numbers 1..n, one to three per sentence; a backend without guided decoding is only
  prompted, so its numbers are validated here, not trusted.

Numbers outside 1..n are kept (``Statement.citations``) and reported as invalid by the metrics,
never dropped. An answer with no citation, or no sentence at all (the model's way to say the
passages do not answer), is a result, not an error.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.prompts import PROMPTS, Prompt

MAX_CITATIONS_PER_SENTENCE = 3
MAX_ANSWER_SENTENCES = 2
MAX_SENTENCE_CHARS = 160

_GROUP_RE = re.compile(r"\[\s*\d+(?:\s*,\s*\d+)*\s*\]")
_NUMBER_RE = re.compile(r"\d+")
_LEADING_GROUPS_RE = re.compile(r"^(?:\s*\[\s*\d+(?:\s*,\s*\d+)*\s*\])+")
_SPACE_BEFORE_PUNCT_RE = re.compile(r"\s+([.,;:!?])")


@dataclass(frozen=True)
class Statement:
    """One sentence of an answer (markers removed) and the passage numbers it cites, in order of
    first appearance, duplicates removed, out-of-range numbers kept."""

    text: str
    citations: tuple[int, ...] = ()

    def as_dict(self) -> JsonObject:
        return {"text": self.text, "citations": list(self.citations)}


def parse_citation_markers(text: str) -> list[int]:
    """Every cited number in ``text``, in order, duplicates kept: ``"a [1][2] b [1, 3]"`` gives
    ``[1, 2, 1, 3]``. Accepts ``[1]``, ``[1][2]``, ``[1, 2]`` and ``[1,2]``; other brackets
    (``[a]``, ``[1-2]``, ``[]``) are not citations."""
    return [int(n) for group in _GROUP_RE.findall(text) for n in _NUMBER_RE.findall(group)]


def strip_citation_markers(text: str) -> str:
    """``text`` without its citation markers, spaces tidied (``"Paris [1]."`` -> ``"Paris."``)."""
    bare = _GROUP_RE.sub(" ", text)
    bare = _SPACE_BEFORE_PUNCT_RE.sub(r"\1", bare)
    return " ".join(bare.split())


def unique(numbers: Iterable[int]) -> tuple[int, ...]:
    """``numbers`` in order of first appearance, each once."""
    return tuple(dict.fromkeys(numbers))


@functools.cache
def _segmenter() -> Any:
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` by pysbd (English, no cleaning), stripped, empty ones dropped."""
    if not text.strip():
        return []
    return [s.strip() for s in _segmenter().segment(text) if s.strip()]


def parse_statements(answer: str) -> list[Statement]:
    """The answer's sentences with their citations (see the module docstring).

    A segment made only of markers, or the markers opening a segment, are credited to the
    sentence before; markers before the first sentence go to the first one.
    """
    pieces: list[tuple[str, list[int]]] = []
    pending: list[int] = []
    for segment in split_sentences(answer):
        lead = _LEADING_GROUPS_RE.match(segment)
        if lead:
            numbers = parse_citation_markers(lead.group(0))
            if pieces:
                pieces[-1][1].extend(numbers)
            else:
                pending.extend(numbers)
            segment = segment[lead.end() :]
        text = strip_citation_markers(segment)
        if not text.strip(" .,;:!?"):
            continue
        pieces.append((text, [*pending, *parse_citation_markers(segment)]))
        pending = []
    if pending and pieces:
        pieces[-1][1].extend(pending)
    return [Statement(text, unique(numbers)) for text, numbers in pieces]


def render_answer(statements: Sequence[Statement]) -> str:
    """Statements back to text with markers after each sentence (``"Paris is big [1][2]."``)."""
    parts = []
    for s in statements:
        marks = "".join(f"[{k}]" for k in s.citations)
        text = s.text.rstrip()
        end = text[-1] if text and text[-1] in ".!?" else ""
        body = text[:-1] if end else text
        parts.append(f"{body} {marks}{end}" if marks else text)
    return " ".join(parts)


def all_citations(statements: Sequence[Statement]) -> tuple[int, ...]:
    """Every number the answer cites, in order of first appearance, each once."""
    return unique(k for s in statements for k in s.citations)


def answer_words(statements: Sequence[Statement]) -> int:
    """Length of the answer in words (markers excluded)."""
    return sum(len(s.text.split()) for s in statements)


# ------------------------------------------------------------------------------ answer records


@dataclass(frozen=True)
class SourcePassage:
    """A passage an answer may cite: ``[k]`` refers to the k-th passage of its list."""

    docid: str
    text: str


@dataclass(frozen=True)
class GoldAnswer:
    """A reference answer whose ``[k]`` markers point into the record's ``gold_passages``; the
    flags are the human ratings where the source has them (HAGRID), else None."""

    text: str
    attributable: bool | None = None
    informative: bool | None = None


@dataclass(frozen=True)
class AnswerRecord:
    """One answer to score, from any source: an attributed-answer scenario run here, or a line of
    a production system's log (``ragtrail eval answers``).

    ``passages`` are what the answering model saw, in the order its ``[k]`` refer to. The optional
    fields enable more metrics: ``relevant_docids`` (citation precision/recall against known
    relevance, retrieval metrics), ``gold_answers`` + ``gold_passages`` (citation overlap,
    ROUGE-L, BLEU). ``statements`` holds the answer already split when the producer has it
    (structured output); otherwise :meth:`cited_statements` parses ``answer``.
    """

    qid: str
    question: str
    answer: str
    passages: tuple[SourcePassage, ...] = ()
    relevant_docids: tuple[str, ...] | None = None
    gold_answers: tuple[GoldAnswer, ...] | None = None
    gold_passages: tuple[SourcePassage, ...] | None = None
    statements: tuple[Statement, ...] | None = None
    label: str | None = None

    def cited_statements(self) -> list[Statement]:
        if self.statements is not None:
            return list(self.statements)
        return parse_statements(self.answer)


# ------------------------------------------------------------------------------------ prompts


class CitedAnswerInput(BaseModel):
    """A question and the numbered passages the answer may use (passage k is ``passages[k-1]``)."""

    question: str
    passages: list[str]


class CitedSentence(BaseModel):
    """One sentence of the answer and the numbers of the passages that support it."""

    text: str = Field(description="one short sentence, without citation marks")
    citations: list[int] = Field(
        default_factory=list, description="numbers of the passages that support this sentence"
    )


class CitedAnswerOutput(BaseModel):
    """The answer as cited sentences; no sentence means the passages do not answer."""

    sentences: list[CitedSentence] = Field(
        description="empty when the passages do not contain the answer",
    )
    # Required, not defaulted: the client's parser takes the first complete JSON object of a
    # reply, and a cut-off reply's first complete object is an inner sentence, which a default
    # would have read as an abstention.


def statements_of(output: CitedAnswerOutput) -> list[Statement]:
    """The structured answer as statements; markers a model wrote into a sentence's text are
    read too (an unguided backend may write ``"Paris [2]."`` with empty ``citations``)."""
    out = []
    for sentence in output.sentences:
        text = strip_citation_markers(sentence.text)
        if not text.strip(" .,;:!?"):
            continue
        numbers = [*sentence.citations, *parse_citation_markers(sentence.text)]
        out.append(Statement(text, unique(numbers)))
    return out


def cited_answer_schema(inp: CitedAnswerInput) -> JsonObject:
    """What guided decoding enforces for ``inp``: at most two sentences of at most 160 characters
    (short answers, as the method asks; measured on SmolLM2-135M, three 240-character sentences
    took up to 230 new tokens, over two minutes an answer on 2 shared cores), each citing one to
    three passage numbers in 1..n (n = number of passages)."""
    n = max(1, len(inp.passages))
    return {
        "type": "object",
        "properties": {
            "sentences": {
                "type": "array",
                "maxItems": MAX_ANSWER_SENTENCES,
                "items": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "maxLength": MAX_SENTENCE_CHARS},
                        "citations": {
                            "type": "array",
                            "items": {"type": "integer", "minimum": 1, "maximum": n},
                            "minItems": 1,
                            "maxItems": MAX_CITATIONS_PER_SENTENCE,
                        },
                    },
                    "required": ["text", "citations"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["sentences"],
        "additionalProperties": False,
    }


_EX_PASSAGES = [
    "The harbour ferry leaves every 40 minutes from 6 am. A single ticket costs 3 euros.",
    "The old lighthouse was restored in 1998 and is open to visitors on Sundays.",
    "Ferry tickets can be bought on board or at the kiosk by the pier; cards are accepted.",
]

CITED_ANSWER_PROMPT: Prompt[CitedAnswerInput, CitedAnswerOutput] = PROMPTS.register(
    Prompt(
        name="answer.cited",
        version="1",
        instruction=(
            "Answer the question from the numbered passages only. Write a short answer of one "
            "or two sentences. After each sentence list the numbers of the passages that "
            "support it: one to three numbers, the fewest that together back the sentence. "
            "Cite only passages that really say what the sentence states. If the passages do "
            "not contain the answer, reply with an empty list of sentences. Reply in JSON."
        ),
        input_model=CitedAnswerInput,
        output_model=CitedAnswerOutput,
        examples=[
            (
                CitedAnswerInput(
                    question="How much does the harbour ferry cost and where is it sold?",
                    passages=_EX_PASSAGES,
                ),
                CitedAnswerOutput(
                    sentences=[
                        CitedSentence(text="A single ferry ticket costs 3 euros.", citations=[1]),
                        CitedSentence(
                            text="It is sold on board or at the kiosk by the pier.",
                            citations=[3],
                        ),
                    ]
                ),
            )
        ],
        document_fields=frozenset({"passages"}),
        decoding_schema=cited_answer_schema,
    )
)
"""The answering prompt of every citation evaluation with passages (mixtures, RTG scenarios)."""


class ClosedBookInput(BaseModel):
    """A question answered without passages (scenario G)."""

    question: str


class ClosedBookOutput(BaseModel):
    """A short answer in plain sentences."""

    answer: str = Field(description="one to three short sentences")


CLOSED_BOOK_PROMPT: Prompt[ClosedBookInput, ClosedBookOutput] = PROMPTS.register(
    Prompt(
        name="answer.closed_book",
        version="1",
        instruction=(
            "Answer the question from what you know, in one to three short sentences. If you "
            "do not know, say so. Reply in JSON."
        ),
        input_model=ClosedBookInput,
        output_model=ClosedBookOutput,
        examples=[
            (
                ClosedBookInput(question="What is the boiling point of water at sea level?"),
                ClosedBookOutput(answer="Water boils at 100 degrees Celsius at sea level."),
            )
        ],
    )
)
"""The closed-book prompt (scenario G, and the first pass of generate-then-retrieve)."""
