"""Shared test doubles for the generation tests.

:func:`routed_backend` builds a :class:`ragtrail.llm.testing.ScriptedBackend` (a scripted test
double, NOT a model) whose replies are chosen by prompt name: it recognises the prompt from the
rendered system message, reads the input fields back out of the tagged user message, and hands
them to a per-prompt handler. The default handlers answer every generation prompt with valid,
deterministic JSON derived from the input, so tests override only the prompt they exercise.
"""

from __future__ import annotations

import html
import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ragtrail.evaluate.attribution.cited_answers import CITED_ANSWER_PROMPT, CLOSED_BOOK_PROMPT
from ragtrail.evaluate.attribution.subqueries import SUBQUERY_PROMPT
from ragtrail.evaluate.evidence.extraction import EVIDENCE_PROMPT
from ragtrail.evaluate.evidence.full_answers import FULL_ANSWER_PROMPT
from ragtrail.evaluate.sufficiency.confidence import CONFIDENCE_PROMPTS
from ragtrail.evaluate.sufficiency.short_answers import SHORT_ANSWER_PROMPT
from ragtrail.generate.prompts import GENERATION_PROMPTS
from ragtrail.judges.correctness import CORRECTNESS_PROMPT
from ragtrail.judges.sufficiency_raters import SUFFICIENCY_PROMPTS
from ragtrail.llm.backends.base import GenerationRequest, GenerationResult
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.records import Context, sha256_text
from ragtrail.text import content_words

Handler = Callable[[dict[str, Any]], "str | GenerationResult"]

_SYSTEM_TO_NAME = {
    p.system_message(): p.name
    for p in (
        *GENERATION_PROMPTS,
        CITED_ANSWER_PROMPT,
        CLOSED_BOOK_PROMPT,
        SUBQUERY_PROMPT,
        *SUFFICIENCY_PROMPTS,
    )
}
# issue 10, C/A/H prompts
_SYSTEM_TO_NAME.update(
    {p.system_message(): p.name for p in (SHORT_ANSWER_PROMPT, CORRECTNESS_PROMPT)}
)
_SYSTEM_TO_NAME.update({p.system_message(): p.name for p in CONFIDENCE_PROMPTS})
_SYSTEM_TO_NAME.update({p.system_message(): p.name for p in (EVIDENCE_PROMPT, FULL_ANSWER_PROMPT)})
_DOC_RE = re.compile(r'<document field="(\w+)"( index="\d+")?>\n(.*?)\n</document>', re.S)
_FIELD_RE = re.compile(r"<(\w+)>(.*?)</\1>", re.S)


def prompt_name(request: GenerationRequest) -> str:
    """The generation prompt a request was rendered from (by its system message)."""
    return _SYSTEM_TO_NAME[request.messages[0]["content"]]


def input_fields(request: GenerationRequest) -> dict[str, Any]:
    """The input fields of the request's own input (the last ``<input>`` user message)."""
    user = [m["content"] for m in request.messages if m["role"] == "user"]
    block = next(u for u in reversed(user) if u.startswith("<input>"))
    fields: dict[str, Any] = {}
    for name, indexed, value in _DOC_RE.findall(block):
        if indexed:  # a list field: one block per item, in order
            fields.setdefault(name, []).append(html.unescape(value))
        else:
            fields[name] = html.unescape(value)
    inner = block.removeprefix("<input>").removesuffix("</input>")
    for name, value in _FIELD_RE.findall(_DOC_RE.sub("", inner)):
        value = html.unescape(value)
        try:
            fields[name] = json.loads(value) if value[:1] in "[{" else value
        except ValueError:
            fields[name] = value
    return fields


def sentences(text: str) -> list[str]:
    """Sentences of at least three words (a crude splitter, enough for test data)."""
    parts = re.split(r"(?<=[.!?])\s+", text.strip())
    return [p.strip() for p in parts if len(p.split()) >= 3]


def _facts(f: dict[str, Any]) -> str:
    theme = (f.get("headings") or "General").split(" > ")[-1]
    return json.dumps({"theme": theme, "statements": sentences(f["context"])[:5]})


def _summaries(f: dict[str, Any]) -> str:
    facts = f["facts"]
    pairs = [f"{a.rstrip('.')} and {b[0].lower()}{b[1:]}" for a, b in itertools.pairwise(facts)]
    return json.dumps({"statements": pairs[:3]})


def _conclusions(f: dict[str, Any]) -> str:
    facts = f["facts"]
    return json.dumps(
        {
            "statements": [
                f"Together, {a.rstrip('.')} implies {b}" for a, b in itertools.pairwise(facts)
            ][:3]
        }
    )


def mask_last_word(statement: str) -> str:
    """``statement`` with its last word that occurs nowhere else in it replaced by "what", so the
    answer (the statement) brings a word the question lacks, as the model-free check
    ``answer_repeats_question`` requires of every question."""
    words = statement.rstrip(".").split()
    for i in reversed(range(len(words))):
        if content_words(words[i]) - content_words(" ".join(words[:i] + words[i + 1 :])):
            return " ".join([*words[:i], "what", *words[i + 1 :]])
    return " ".join(words)


def _question(f: dict[str, Any]) -> str:
    return json.dumps({"question": f"Is it true that {mask_last_word(f['statement'])}?"})


def _label(f: dict[str, Any]) -> str:
    return json.dumps({"label_name": "fact_single", "reason": "stated once"})


def _critique(f: dict[str, Any]) -> str:
    return json.dumps({"evaluation": "fine", "rating": 4})


def _baseline(f: dict[str, Any]) -> str:
    first = sentences(f["context"])[0]
    return json.dumps({"question": f"What is said about {first.split()[0]}?", "answer": first})


def statement_kind(question: str) -> tuple[str, str]:
    """The kind and a fragment of the statement a routed-backend question was written from."""
    body = question.removeprefix("Is it true that ").rstrip("?")
    if body.startswith("Together, "):
        return "reasoning", body.removeprefix("Together, ").split(" implies ")[0]
    if " and " in body:
        return "summary", body.split(" and ")[0]
    return "fact_single", body


def label_by_kind(fields: dict[str, Any]) -> str:
    """A labeller handler that reads the kind back from the question (unanswerable when the
    statement is not in the context): gives balanced sets from the routed backend."""
    kind, fragment = statement_kind(fields["question"])
    if fragment[:25] not in fields["context"]:
        kind = "unanswerable"
    return json.dumps({"label_name": kind, "reason": "routed test double"})


def _cited_answer(fields: dict[str, Any]) -> str:
    """Answers with the first sentence of the last passage, citing it (a deterministic reader that
    always trusts the passage shown last)."""
    passages = fields.get("passages") or []
    if not passages:
        return json.dumps({"sentences": []})
    sentence = re.split(r"(?<=[.!?])\s", passages[-1].strip())[0][:150]
    return json.dumps({"sentences": [{"text": sentence, "citations": [len(passages)]}]})


def _closed_book(fields: dict[str, Any]) -> str:
    return json.dumps({"answer": f"It depends on the policy. {fields['question'][:80]}"})


def _subqueries(fields: dict[str, Any]) -> str:
    words = sorted(content_words(fields["question"]))
    return json.dumps({"queries": [" ".join(words[:3]) or fields["question"]]})


def _short_answer(fields: dict[str, Any]) -> str:
    """answer.short: the first sentence of the first passage; abstains without passages."""
    passages = fields.get("passages") or []
    if not passages:
        return json.dumps({"answer": "", "abstain": True})
    first = re.split(r"(?<=[.!?])\s", passages[0].strip())[0][:150]
    return json.dumps({"answer": first, "abstain": False})


def _correctness(fields: dict[str, Any]) -> str:
    """judge.correctness: correct when every content word of some gold is in the candidate."""
    candidate = content_words(fields["candidate"])
    correct = any(g and g <= candidate for g in map(content_words, fields["gold_answers"]))
    return json.dumps({"reason": "scripted word overlap", "correct": correct})


SUFFICIENT_OVERLAP = 0.5
"""The scripted sufficiency rater calls a context sufficient when it holds at least this share of
the question's content words."""


def question_overlap(fields: dict[str, Any]) -> float:
    """Share of the question's content words that occur in the context (0 without any)."""
    words = content_words(fields["question"])
    return len(words & content_words(fields["context"])) / len(words) if words else 0.0


def _sufficiency(fields: dict[str, Any]) -> str:
    share = question_overlap(fields)
    return json.dumps(
        {
            "reason": f"{share:.2f} of the question's words",
            "sufficient": share >= SUFFICIENT_OVERLAP,
        }
    )


# confidence.sample_answer / confidence.p_true / confidence.p_correct (selective generation)
def _sample_answer(fields: dict[str, Any]) -> str:
    """The first four words of the first passage (``"unknown"`` without passages)."""
    passages = fields.get("passages") or []
    return json.dumps({"answer": " ".join(passages[0].split()[:4]) if passages else "unknown"})


def shares_first_passage_word(fields: dict[str, Any]) -> bool:
    """Whether the proposed answer shares a content word with the first passage."""
    passages = fields.get("passages") or []
    first = passages[0] if passages else ""
    return bool(content_words(fields["proposed_answer"]) & content_words(first))


def _p_true(fields: dict[str, Any]) -> str:
    return json.dumps({"correct": shares_first_passage_word(fields)})


def _p_correct(fields: dict[str, Any]) -> str:
    """0.8 for the first passage's opening words, 0.1 for "unknown" (0.3 without passages)."""
    top = json.loads(_sample_answer(fields))["answer"]
    p = 0.8 if fields.get("passages") else 0.3
    return json.dumps(
        {"answers": [{"answer": top, "probability": p}, {"answer": "unknown", "probability": 0.1}]}
    )


def _evidence(fields: dict[str, Any]) -> str:
    """evidence.extract: the sentence of the passages sharing most content words with the
    question (the first on ties); "" without passages."""
    question = content_words(fields["question"])
    sentences = [
        s for p in fields.get("passages") or [] for s in re.split(r"(?<=[.!?])\s", p.strip()) if s
    ]
    if not sentences:
        return json.dumps({"evidence": ""})
    best = max(sentences, key=lambda s: (len(question & content_words(s)), -sentences.index(s)))
    return json.dumps({"evidence": best[:300]})


def _full_answer(fields: dict[str, Any]) -> str:
    return json.dumps({"sentence": f"{fields['question'].rstrip('?')}: {fields['answer']}."})


DEFAULT_HANDLERS: dict[str, Handler] = {
    "answer.cited": _cited_answer,
    "answer.closed_book": _closed_book,
    "retrieval.subqueries": _subqueries,
    "facts": _facts,
    "facts_extractive": _facts,  # picks whole sentences of the context, as guided decoding would
    "summaries": _summaries,
    "conclusions": _conclusions,
    "question": _question,
    "label": _label,
    "single_shot_qa": _baseline,
    **{p.name: _critique for p in GENERATION_PROMPTS if p.name.startswith("critique_")},
    # issue 10, C/A/H: answer.short and judge.correctness
    "answer.short": _short_answer,
    "judge.correctness": _correctness,
    # sufficiency raters (sufficiency.rate, sufficiency.rate_1shot): question-word overlap
    **{p.name: _sufficiency for p in SUFFICIENCY_PROMPTS},
    # confidence features (selective generation)
    "confidence.sample_answer": _sample_answer,
    "confidence.p_true": _p_true,
    "confidence.p_correct": _p_correct,
    # the evidence extractor (SEER)
    "evidence.extract": _evidence,
    "evidence.full_answer": _full_answer,
}


def routed_backend(
    handlers: Mapping[str, Handler] | None = None, *, model_id: str = "routed-test-v1"
) -> ScriptedBackend:
    """A scripted backend answering each prompt with ``handlers[name](input_fields)``."""
    table = {**DEFAULT_HANDLERS, **(handlers or {})}

    def responder(request: GenerationRequest, number: int) -> str | GenerationResult:
        return table[prompt_name(request)](input_fields(request))

    return ScriptedBackend(responder, model_id=model_id)


def calls_by_prompt(backend: ScriptedBackend) -> dict[str, int]:
    """How many requests the backend received per prompt name."""
    counts: dict[str, int] = {}
    for req in backend.calls:
        name = prompt_name(req)
        counts[name] = counts.get(name, 0) + 1
    return counts


def make_context(doc_id: str, ordinal: int, text: str, headings: Sequence[str] = ()) -> Context:
    """A :class:`Context` with consistent ids and hashes."""
    return Context(
        corpus="test",
        snapshot_id="snap-1",
        doc_id=doc_id,
        doc_content_hash=sha256_text(doc_id),
        chunk_id=f"{doc_id}#{ordinal:04d}",
        chunk_hash=sha256_text(text),
        text=text,
        headings=tuple(headings),
    )


SAMPLE_TEXTS: dict[str, list[tuple[str, str]]] = {
    "handbook/leave.md": [
        (
            "Leave > Annual leave",
            "Full-time staff receive 27 days of annual leave per year. After five years of "
            "service the entitlement rises to 30 days. Leave is requested in PeopleHub at least "
            "two weeks ahead. Managers answer leave requests within three working days.",
        ),
        (
            "Leave > Carry over",
            "Up to 5 unused days can be carried into the next leave year. Carried days must be "
            "taken by 30 June. Exceptions are approved by the Head of People Operations.",
        ),
    ],
    "handbook/review.md": [
        (
            "Code review > Rules",
            "Every merge request needs one approval from someone other than the author. "
            "Security-sensitive changes need two approvals including a code owner. The CI "
            "pipeline must pass before merging. Authors merge their own requests with squash "
            "merge.",
        ),
        ("Code review > Size", "Keep merge requests under 400 changed lines."),
    ],
    "handbook/retention.md": [
        (
            "Retention > Principles",
            "Every record type has an owner accountable for deletion. Deletion is automated "
            "wherever possible. Retention periods start from the trigger event. Copies count as "
            "records for retention purposes.",
        ),
    ],
}


def sample_contexts() -> list[Context]:
    """Five contexts from three documents (one of them too short for derived statements)."""
    return [
        make_context(doc, i, text, headings.split(" > "))
        for doc, chunks in SAMPLE_TEXTS.items()
        for i, (headings, text) in enumerate(chunks)
    ]
