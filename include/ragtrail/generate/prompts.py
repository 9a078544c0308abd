"""The typed, versioned prompts of QA generation, labelling and critique (METHODS §1-§3).

Every prompt maps a small pydantic input model to a small output model and is registered in
:data:`GENERATION_PROMPTS` (and, for discovery, in the process-wide :data:`ragtrail.llm.PROMPTS`).
Corpus text and model-written text (contexts, statements, questions, answers) only ever reach the
model through :meth:`ragtrail.llm.prompts.Prompt.render_input`, which fences and escapes it, so a
document cannot pose as an instruction.

The instructions are deliberately short and end with a one-line output spec: the default local
model (SmolLM2-135M-Instruct) follows one tight worked example far better than long prose. The
output models reject what such a model typically gets wrong instead of passing it on: statement
lists are de-duplicated and stripped of non-sentences before their length is checked, a question
must stand alone (no "according to the passage"), a critique rating must be an integer 1-5, and
an echo of the worked example's own answer is invalid (the examples themselves are validated
under :data:`EXAMPLE_CONTEXT`). Invalid output is retried by the client with a corrective message.
Change a prompt's ``version`` whenever its instruction, example or models change: the version is
part of every cache key and of every candidate id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field, StringConstraints, ValidationInfo, field_validator

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.prompts import PROMPTS, Prompt, PromptRegistry
from ragtrail.text import text_key

__all__ = [
    "CRITIQUE_NAMES",
    "EXAMPLE_CONTEXT",
    "GENERATION_PROMPTS",
    "LABEL_DESCRIPTIONS",
    "TOKEN_BUDGETS",
    "AnswerContextInput",
    "BaselineInput",
    "BaselineOutput",
    "ContextInput",
    "CritiqueOutput",
    "DerivedInput",
    "DerivedStatements",
    "FactsInput",
    "FactsOutput",
    "LabelInput",
    "LabelOutput",
    "QuestionAnswerInput",
    "QuestionContextInput",
    "QuestionInput",
    "QuestionOnlyInput",
    "QuestionOutput",
    "copies_example",
    "critique_prompt",
    "prompt_versions",
]

OutT = TypeVar("OutT", bound=BaseModel)

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
"""A non-empty string (surrounding whitespace removed)."""

LabelName = Literal["fact_single", "summary", "reasoning", "unanswerable"]

LABEL_DESCRIPTIONS: dict[str, str] = {
    "fact_single": "the document states the answer, and it is one single piece of information",
    "summary": (
        "the document states the answer, and it is made of several pieces of information "
        "(a list, steps, several conditions); leaving one out makes the answer incomplete"
    ),
    "reasoning": (
        "the document does not state the answer, but it can be worked out from the document "
        "with a simple inference"
    ),
    "unanswerable": "the document neither states the answer nor lets you work it out",
}
"""The taxonomy of METHODS §1, phrased for the labeller prompt."""

TOKEN_BUDGETS: dict[str, int] = {
    "facts": 220,
    "summaries": 200,
    "conclusions": 200,
    "question": 48,
    "label": 64,
    "critique": 96,
    "single_shot_qa": 192,
}
"""Default ``max_new_tokens`` per prompt family (critiques share ``"critique"``).

Tight budgets keep a tiny model from rambling; the client doubles the budget when a reply is cut
off, so a budget that is too small costs a retry, not a lost item.
"""

# A short, invented example context shared by the examples (no corpus text is copied).
_EX_CONTEXT = (
    "Library cards at the Elm Street branch are free for residents. A card lets you borrow up to "
    "ten items at once. Books are lent for three weeks and can be renewed twice online. Late "
    "returns are charged 20 cents per day."
)
_EX_HEADINGS = "Elm Street Library > Borrowing"
_EX_THEME = "Elm Street Library borrowing rules"
_EX_FACTS = [
    "Library cards at the Elm Street Library are free for residents.",
    "An Elm Street Library card allows borrowing up to ten items at once.",
    "Elm Street Library books are lent for three weeks.",
    "Elm Street Library loans can be renewed twice online.",
    "The Elm Street Library charges 20 cents per day for late returns.",
]
_EX_SENTENCES = [  # verbatim sentences of _EX_CONTEXT
    "A card lets you borrow up to ten items at once.",
    "Books are lent for three weeks and can be renewed twice online.",
    "Late returns are charged 20 cents per day.",
]

_EX_SUMMARIES = [
    "Elm Street Library cards are free for residents and allow borrowing up to ten items at once.",
    "Elm Street Library books are lent for three weeks and can be renewed twice online.",
    "The Elm Street Library charges 20 cents per day for late returns, and its cards are free "
    "for residents.",
]
_EX_CONCLUSIONS = [
    "With two online renewals, an Elm Street Library book can be kept for up to nine weeks.",
    "A resident can borrow ten items from the Elm Street Library without paying anything if they "
    "return them on time.",
    "Returning an Elm Street Library book one week late costs $1.40.",
]
_EX_FACT_QUESTION = "How long can I keep a book from the Elm Street Library?"
_EX_LABEL_QUESTION = "What are the loan period and renewal rules at Elm Street Library?"
_EX_BASELINE_QUESTION = "How much is the late fee at the Elm Street Library?"
_EX_QUESTION = "How long is the loan period for books at the Elm Street Library?"
_EX_ANSWER = "Elm Street Library books are lent for three weeks."

# Worked question examples in French, on invented subjects of their own: with only the English
# example, SmolLM2-135M wrote English questions about French statements even when told the
# language (5 of 6 measured); with these, French ones (6 of 6).
_EX_QUESTIONS_FR = [
    (
        "Un billet de train TER Normandie reste valable vingt-quatre heures après son achat.",
        "Billets de train TER Normandie",
        "Quelle est la durée de validité d'un billet TER Normandie ?",
    ),
    (
        "La piscine municipale de Vernon est fermée tous les lundis pour l'entretien.",
        "Horaires de la piscine municipale de Vernon",
        "Quel jour la piscine municipale de Vernon est-elle fermée ?",
    ),
]


# --------------------------------------------------------------------------- input models


class FactsInput(BaseModel):
    """A chunk and its heading path (``"Doc title > Section"``), for fact extraction."""

    context: str
    headings: str = ""


class DerivedInput(BaseModel):
    """A chunk, its theme and the facts extracted from it (summaries and conclusions)."""

    context: str
    theme: str
    facts: list[str]


class QuestionInput(BaseModel):
    """The one statement the question must be answered by, and the theme of its chunk.

    The chunk itself is deliberately not part of the input: statements are self-contained by
    construction and the theme supplies the subject (METHODS §2 uses it to avoid generic
    questions). Measured on SmolLM2-135M with 8 statements of the sample corpus, adding the chunk
    made the model echo the worked example's question for 6-7 of 8 inputs; without it, 1 of 8.
    """

    statement: str
    theme: str


class LabelInput(BaseModel):
    """The (context, question) pair the labeller classifies."""

    context: str
    question: str


class QuestionOnlyInput(BaseModel):
    """Critiques that judge the question alone (stand_alone, q_usefulness)."""

    question: str


class QuestionContextInput(BaseModel):
    """Critiques that judge a question against its context."""

    context: str
    question: str


class AnswerContextInput(BaseModel):
    """Critiques that judge an answer against its context."""

    context: str
    answer: str


class QuestionAnswerInput(BaseModel):
    """Critiques that judge a question against its answer."""

    question: str
    answer: str


class ContextInput(BaseModel):
    """Critiques that judge the context alone; also the single-prompt baseline's input."""

    context: str


BaselineInput = ContextInput


# --------------------------------------------------------------------------- output models


_BULLET_RE = re.compile(r"^\s*(?:[>\-*•]+|\d+[.)])\s+")
MIN_STATEMENT_WORDS = 4
"""A statement is a sentence; shorter items ("Data Retention Schedule") are headings, not facts."""


def strip_bullet(text: str) -> str:
    """The text without a leading list mark (``"> "``, ``"- "``, ``"2. "``) and outer spaces."""
    return _BULLET_RE.sub("", text).strip()


def statement_key(text: str) -> str:
    """Comparison key of a statement: :func:`ragtrail.text.text_key` (case, punctuation and
    spacing don't count), the same key test-set dedup gives questions."""
    return text_key(text)


_EXAMPLE_KEYS = frozenset(
    statement_key(t)
    for t in (
        *_EX_FACTS,
        *_EX_SENTENCES,
        *_EX_SUMMARIES,
        *_EX_CONCLUSIONS,
        _EX_FACT_QUESTION,
        _EX_LABEL_QUESTION,
        _EX_BASELINE_QUESTION,
        _EX_QUESTION,
        *(text for example in _EX_QUESTIONS_FR for text in example),
    )
)


def copies_example(text: str) -> bool:
    """Whether ``text`` repeats a sentence of the prompts' worked examples.

    Small models often echo the few-shot answer instead of answering the real input; such an
    echo is never about the document, so it is treated as invalid output.
    """
    return statement_key(text) in _EXAMPLE_KEYS


EXAMPLE_CONTEXT: dict[str, bool] = {"allow_example_copies": True}
"""Validation context under which the worked examples themselves are built (and may be checked)."""


def _copies_allowed(info: ValidationInfo) -> bool:
    return bool((info.context or {}).get("allow_example_copies"))


def normalise_statements(items: Any, *, allow_example_copies: bool = False) -> Any:
    """Drop bullet marks, non-sentences, repeats and echoes of the worked example from a list.

    Lossless for a well-behaved model; for a small one that loops ("X.", "X.", "X.") it keeps the
    distinct sentences instead of failing on the count. Nothing is invented; the count limits of
    the model are checked afterwards, on what remains. Non-lists are left for validation to reject.
    """
    if not isinstance(items, list):
        return items
    seen: set[str] = set()
    out: list[Any] = []
    for item in items:
        if not isinstance(item, str):
            out.append(item)  # let validation report it
            continue
        text = strip_bullet(item)
        key = statement_key(text)
        echo = key in _EXAMPLE_KEYS and not allow_example_copies
        if len(key.split()) < MIN_STATEMENT_WORDS or key in seen or echo:
            continue
        seen.add(key)
        out.append(text)
    return out


class FactsOutput(BaseModel):
    """A theme and one to five distinct factual statements."""

    theme: Text
    statements: list[Text] = Field(min_length=1, max_length=5)

    @field_validator("statements", mode="before")
    @classmethod
    def _normalise(cls, value: Any, info: ValidationInfo) -> Any:
        return normalise_statements(value, allow_example_copies=_copies_allowed(info))


class DerivedStatements(BaseModel):
    """Summary or conclusion statements: three are asked for, one to three are accepted."""

    statements: list[Text] = Field(min_length=1, max_length=3)

    @field_validator("statements", mode="before")
    @classmethod
    def _normalise(cls, value: Any, info: ValidationInfo) -> Any:
        return normalise_statements(value, allow_example_copies=_copies_allowed(info))


_META_REFERENCE_RE = re.compile(
    r"\b(?:(?:according to|in|from|based on|by|within|mentioned in|described in|stated in|"
    r"given in)\s+(?:the|this|that)\s+(?:given\s+|above\s+|provided\s+)?"
    r"(?:passage|context|document|text|excerpt|article|paragraph)"
    r"|(?:this|the given|the above|the provided)\s+(?:passage|context|document|text|excerpt))\b",
    re.IGNORECASE,
)


MIN_QUESTION_WORDS = 3


class QuestionOutput(BaseModel):
    """One question of a few words; refers to no "passage" or "document" (it must stand alone)."""

    question: Text

    @field_validator("question")
    @classmethod
    def _stands_alone(cls, value: str, info: ValidationInfo) -> str:
        if len(re.findall(r"\w+", value)) < MIN_QUESTION_WORDS:
            raise ValueError(f"the question needs at least {MIN_QUESTION_WORDS} words")
        if _META_REFERENCE_RE.search(value):
            raise ValueError("the question must not refer to the passage, text or document")
        if copies_example(value) and not _copies_allowed(info):
            raise ValueError("the question repeats the worked example; write one for this input")
        return value


class LabelOutput(BaseModel):
    label_name: LabelName
    reason: str = ""


class CritiqueOutput(BaseModel):
    """An integer rating 1-5 (out of range is an error, never clamped) and a short rationale.

    The rating comes first: measured on SmolLM2-135M, a rationale written first often ran past
    the token budget and took the rating with it; this way a cut-off rationale still leaves a
    usable rating (the rationale is optional).
    """

    rating: int = Field(ge=1, le=5)
    evaluation: str = ""

    @field_validator("rating", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        # pydantic would read true as 1; a boolean is not a rating.
        if isinstance(value, bool):
            raise ValueError("rating must be an integer from 1 to 5, not a boolean")
        return value


class BaselineOutput(BaseModel):
    question: Text
    answer: Text

    @field_validator("question")
    @classmethod
    def _not_the_example(cls, value: str, info: ValidationInfo) -> str:
        if copies_example(value) and not _copies_allowed(info):
            raise ValueError("the question repeats the worked example; write one for this input")
        return value


# --------------------------------------------------------------------------- prompts


def _example(model: type[OutT], **data: Any) -> OutT:
    """A worked-example output, validated like model output but allowed to be "the example"."""
    return model.model_validate(data, context=EXAMPLE_CONTEXT)


GENERATION_PROMPTS = PromptRegistry()
"""Every prompt of this module, by (name, version)."""


def _register(prompt: Prompt[Any, Any]) -> Prompt[Any, Any]:
    GENERATION_PROMPTS.register(prompt)
    if prompt.key not in PROMPTS:  # the process-wide registry, for listing and auditing
        PROMPTS.register(prompt)
    return prompt


FACTS: Prompt[FactsInput, FactsOutput] = _register(
    Prompt(
        name="facts",
        version="1",
        instruction=(
            "List the facts a document states. Give its theme in a few words, then up to five "
            "statements: each one short sentence with one fact from the document, naming its "
            "subject so it is clear on its own. Use only what the document says and never "
            "repeat a statement. Reply in JSON with the keys theme and statements."
        ),
        input_model=FactsInput,
        output_model=FactsOutput,
        examples=[
            (
                FactsInput(context=_EX_CONTEXT, headings=_EX_HEADINGS),
                _example(FactsOutput, theme=_EX_THEME, statements=_EX_FACTS[1:4]),
            )
        ],
        document_fields=frozenset({"context", "headings"}),
    )
)

MIN_EXTRACTIVE_FACTS = 3
"""Facts a context with enough sentences must yield under extractive guided decoding."""

MAX_SENTENCE_WORDS = 40
"""Longer "sentences" are usually run-together lists or tables, not one fact."""

_SENTENCE_END_RE = re.compile(
    r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|\n\s*\n|\n(?=\s*(?:[-*+>]|\d+[.)])\s)"
)
_MARKUP_RE = re.compile(r"\*\*|__|`")


def context_sentences(text: str, limit: int = 24) -> list[str]:
    """The sentences of ``text`` that can stand as fact statements, cleaned, in order, unique.

    Splits at sentence ends, blank lines and list items; removes list marks and bold / code
    markup and table rows; keeps sentences of :data:`MIN_STATEMENT_WORDS` to
    :data:`MAX_SENTENCE_WORDS` words holding no quote or backslash (they become JSON enum values).
    """
    out: dict[str, str] = {}
    prose = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("|"))
    for piece in _SENTENCE_END_RE.split(prose):
        sentence = " ".join(_MARKUP_RE.sub("", strip_bullet(piece)).split())
        words = len(re.findall(r"\w+", sentence))
        if not MIN_STATEMENT_WORDS <= words <= MAX_SENTENCE_WORDS:
            continue
        if "|" in sentence or '"' in sentence or "\\" in sentence:
            continue
        out.setdefault(statement_key(sentence), sentence)
        if len(out) >= limit:
            break
    return list(out.values())


def _extractive_facts_schema(inp: FactsInput) -> JsonObject:
    """The facts schema with statements restricted to the context's own sentences."""
    schema = FactsOutput.model_json_schema()
    sentences = context_sentences(inp.context)
    if sentences:
        items = schema["properties"]["statements"]
        items["items"] = {"type": "string", "enum": sentences}
        items["maxItems"] = min(int(items.get("maxItems", 5)), len(sentences))
        # A small model stops after one pick; three facts make summaries possible.
        items["minItems"] = min(MIN_EXTRACTIVE_FACTS, len(sentences))
    return schema


FACTS_EXTRACTIVE: Prompt[FactsInput, FactsOutput] = _register(
    Prompt(
        name="facts_extractive",
        version="1",
        instruction=(
            "Pick the facts a document states. Give its theme in a few words, then choose up to "
            "five sentences of the document, each stating one fact, and copy them exactly as "
            "written. Never choose the same sentence twice. Reply in JSON with the keys theme "
            "and statements."
        ),
        input_model=FactsInput,
        output_model=FactsOutput,
        examples=[
            (
                FactsInput(context=_EX_CONTEXT, headings=_EX_HEADINGS),
                _example(FactsOutput, theme=_EX_THEME, statements=_EX_SENTENCES),
            )
        ],
        document_fields=frozenset({"context", "headings"}),
        decoding_schema=_extractive_facts_schema,
    )
)
"""Fact extraction for small models: statements are sentences picked from the context.

Guided decoding restricts each statement to one of :func:`context_sentences`, so every fact is
grounded by construction. Measured on SmolLM2-135M with 8 sample-corpus contexts, the
abstractive :data:`FACTS` prompt gave grounded facts for 2 of 8 contexts even with guided JSON
(the rest were invented or echoed the example).
"""


SUMMARIES: Prompt[DerivedInput, DerivedStatements] = _register(
    Prompt(
        name="summaries",
        version="1",
        instruction=(
            "Merge facts into summaries. Write three sentences, each joining two or more of the "
            "given facts about the theme. No two sentences share a fact, and each is complete "
            "and clear on its own. Use only the facts. Reply in JSON with the key statements."
        ),
        input_model=DerivedInput,
        output_model=DerivedStatements,
        examples=[
            (
                DerivedInput(context=_EX_CONTEXT, theme=_EX_THEME, facts=_EX_FACTS),
                _example(DerivedStatements, statements=_EX_SUMMARIES),
            )
        ],
        document_fields=frozenset({"context"}),
    )
)

CONCLUSIONS: Prompt[DerivedInput, DerivedStatements] = _register(
    Prompt(
        name="conclusions",
        version="1",
        instruction=(
            "Draw conclusions from facts. Write three sentences, each a conclusion that follows "
            "from two or more of the given facts taken together but is not said by any one of "
            "them. Each is complete and clear on its own; never copy a fact. "
            "Reply in JSON with the key statements."
        ),
        input_model=DerivedInput,
        output_model=DerivedStatements,
        examples=[
            (
                DerivedInput(context=_EX_CONTEXT, theme=_EX_THEME, facts=_EX_FACTS),
                _example(DerivedStatements, statements=_EX_CONCLUSIONS),
            )
        ],
        document_fields=frozenset({"context"}),
    )
)

QUESTION: Prompt[QuestionInput, QuestionOutput] = _register(
    Prompt(
        name="question",
        version="1",
        instruction=(
            "Write the search query for a statement: one short question, as typed into a search "
            "engine, that the statement answers exactly. Name the subject from the theme so the "
            "question is specific. Never mention a passage, text, document or context. "
            "Reply in JSON with the key question."
        ),
        input_model=QuestionInput,
        output_model=QuestionOutput,
        examples=[
            (
                QuestionInput(statement=_EX_FACTS[2], theme=_EX_THEME),
                _example(QuestionOutput, question=_EX_FACT_QUESTION),
            )
        ],
        examples_by_language={
            "fr": [
                (
                    QuestionInput(statement=statement, theme=theme),
                    _example(QuestionOutput, question=question),
                )
                for statement, theme, question in _EX_QUESTIONS_FR
            ]
        },
    )
)

LABEL: Prompt[LabelInput, LabelOutput] = _register(
    Prompt(
        name="label",
        version="1",
        instruction=(
            "Classify the question by how the document answers it. Pick exactly one label:\n"
            + "\n".join(f"- {name}: {desc}." for name, desc in LABEL_DESCRIPTIONS.items())
            + "\nReply in JSON with the label_name and a one-sentence reason."
        ),
        input_model=LabelInput,
        output_model=LabelOutput,
        examples=[
            (
                LabelInput(
                    context=_EX_CONTEXT,
                    question=_EX_LABEL_QUESTION,
                ),
                LabelOutput(
                    label_name="summary",
                    reason="The answer needs two stated facts: the three-week loan and the two "
                    "online renewals.",
                ),
            )
        ],
        document_fields=frozenset({"context"}),
    )
)

SINGLE_SHOT_QA: Prompt[BaselineInput, BaselineOutput] = _register(
    Prompt(
        name="single_shot_qa",
        version="1",
        instruction=(
            "Write a factoid question that the document answers, and its short answer taken "
            "from the document. Reply in JSON with the keys question and answer."
        ),
        input_model=BaselineInput,
        output_model=BaselineOutput,
        examples=[
            (
                BaselineInput(context=_EX_CONTEXT),
                _example(
                    BaselineOutput,
                    question=_EX_BASELINE_QUESTION,
                    answer="20 cents per day.",
                ),
            )
        ],
        document_fields=frozenset({"context"}),
    )
)


# --------------------------------------------------------------------------- critiques

_CRITIQUE_TAIL = (
    "Reply in JSON: the rating as an integer from 1 to 5, then a one-sentence evaluation."
)


def _critique(
    name: str,
    task: str,
    input_model: type[BaseModel],
    example_input: BaseModel,
    example_output: CritiqueOutput,
    document_fields: frozenset[str] = frozenset(),
) -> Prompt[Any, CritiqueOutput]:
    return _register(
        Prompt(
            name=f"critique_{name}",
            version="1",
            instruction=f"{task} {_CRITIQUE_TAIL}",
            input_model=input_model,
            output_model=CritiqueOutput,
            examples=[(example_input, example_output)],
            document_fields=document_fields,
        )
    )


_DOC = frozenset({"context"})

CRITIQUE_PROMPTS: dict[str, Prompt[Any, CritiqueOutput]] = {
    "q_to_c_groundedness": _critique(
        "q_to_c_groundedness",
        "Rate from 1 to 5 how clearly the question can be answered from the document alone: "
        "5 = the document answers it without any doubt, 1 = it cannot be answered from the "
        "document, or it is not a question at all.",
        QuestionContextInput,
        QuestionContextInput(context=_EX_CONTEXT, question=_EX_QUESTION),
        CritiqueOutput(evaluation="The document gives the three-week loan period.", rating=5),
        _DOC,
    ),
    "a_to_c_groundedness": _critique(
        "a_to_c_groundedness",
        "Rate from 1 to 5 how well the document supports the answer: 5 = everything the answer "
        "says follows from the document, 1 = the document does not support it.",
        AnswerContextInput,
        AnswerContextInput(context=_EX_CONTEXT, answer=_EX_ANSWER),
        CritiqueOutput(evaluation="The document states the three-week loan period.", rating=5),
        _DOC,
    ),
    "q_feasibility": _critique(
        "q_feasibility",
        "Rate from 1 to 5 how well a search with this question would find this document: "
        "5 = the question is specific and clearly about the document's subject, 1 = it is too "
        "vague or about something else.",
        QuestionContextInput,
        QuestionContextInput(context=_EX_CONTEXT, question=_EX_QUESTION),
        CritiqueOutput(evaluation="It names the library and the loan period.", rating=5),
        _DOC,
    ),
    "stand_alone": _critique(
        "stand_alone",
        "Rate from 1 to 5 how well the question makes sense without any document: 5 = fully "
        "understandable alone (technical terms are fine), 1 = it depends on an unseen text, "
        "e.g. it says 'in the passage' or 'this policy'.",
        QuestionOnlyInput,
        QuestionOnlyInput(question=_EX_QUESTION),
        CritiqueOutput(evaluation="It is clear without any extra text.", rating=5),
    ),
    "q_usefulness": _critique(
        "q_usefulness",
        "Rate from 1 to 5 how useful the question is to a person who uses this document "
        "collection in their work: 5 = a question they would really ask, 1 = useless or trivial.",
        QuestionOnlyInput,
        QuestionOnlyInput(question=_EX_QUESTION),
        CritiqueOutput(evaluation="Library users often need the loan period.", rating=4),
    ),
    "c_usefulness": _critique(
        "c_usefulness",
        "Rate from 1 to 5 how much useful information the document holds: 5 = many distinct "
        "useful facts, 1 = nothing useful.",
        ContextInput,
        ContextInput(context=_EX_CONTEXT),
        CritiqueOutput(evaluation="It gives several distinct borrowing rules.", rating=4),
        _DOC,
    ),
    "c_clarity": _critique(
        "c_clarity",
        "Rate from 1 to 5 how complete, clear and well formatted the document is: 5 = complete "
        "and easy to read, 1 = broken, cut off or unreadable.",
        ContextInput,
        ContextInput(context=_EX_CONTEXT),
        CritiqueOutput(evaluation="Short, complete and clearly written.", rating=5),
        _DOC,
    ),
    "qa_tautology": _critique(
        "qa_tautology",
        "Rate from 1 to 5 how much new information the answer gives beyond the question: "
        "5 = the answer brings information the question does not contain, 1 = the answer "
        "only repeats the question.",
        QuestionAnswerInput,
        QuestionAnswerInput(question=_EX_QUESTION, answer=_EX_ANSWER),
        CritiqueOutput(evaluation="The answer adds the length, three weeks.", rating=5),
    ),
}
"""Critique name (METHODS §3) -> its prompt (registered as ``critique_<name>``)."""

CRITIQUE_NAMES: tuple[str, ...] = tuple(CRITIQUE_PROMPTS)


def critique_prompt(name: str) -> Prompt[Any, CritiqueOutput]:
    """The prompt of one critique by its short name (``"stand_alone"``)."""
    try:
        return CRITIQUE_PROMPTS[name]
    except KeyError:
        raise KeyError(f"unknown critique {name!r}; known: {', '.join(CRITIQUE_NAMES)}") from None


def prompt_versions(names: Iterable[str] | None = None) -> dict[str, str]:
    """``{prompt name: version}`` of every generation prompt, or of just ``names``."""
    wanted = set(names) if names is not None else None
    return {p.name: p.version for p in GENERATION_PROMPTS if wanted is None or p.name in wanted}
