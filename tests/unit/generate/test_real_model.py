"""The facts and question prompts on the real bundled SmolLM2 (slow).

The model is tiny, so quality is not asserted. The abstractive prompt must render within the
model's limits and end as a validated value or a failure carrying the raw text; the extractive
prompt, decoded under its schema, must validate on the first attempt with every statement a
sentence of the context, and must not echo the worked example. The converted model is cached in ``$RAGTRAIL_TEST_MODEL_CACHE`` when set (shared with the
LLM-layer slow test), else in a temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragtrail.generate.checks import wrong_language
from ragtrail.generate.prompts import (
    FACTS,
    FACTS_EXTRACTIVE,
    QUESTION,
    FactsInput,
    FactsOutput,
    QuestionInput,
    context_sentences,
    copies_example,
)
from ragtrail.generate.steps import params_for
from ragtrail.ingest.loaders import parse_document
from ragtrail.llm.backends.base import LLMBackend
from ragtrail.llm.cache import MemoryLLMCache
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.factory import load_llm_backend
from ragtrail.paths import sample_corpus_dir
from ragtrail.records import SourceFile


def code_review_section() -> tuple[str, str]:
    """The "basic rules" section of the sample corpus' code-review guide: (headings, text)."""
    rel = "engineering/code-review.md"
    path = sample_corpus_dir() / rel
    doc = parse_document(SourceFile(rel, str(path), path.read_bytes()), max_bytes=1_000_000)
    section = next(s for s in doc.sections if s.headings and s.headings[-1] == "The basic rules")
    return " > ".join(section.headings), section.text


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> LLMBackend:
    pytest.importorskip("gguf")
    default = tmp_path_factory.mktemp("models")
    cache = Path(os.environ.get("RAGTRAIL_TEST_MODEL_CACHE") or default)
    return load_llm_backend("builtin:smollm2-135m-instruct", cache_dir=cache)


@pytest.mark.slow
def test_smollm2_extractive_facts_are_context_sentences(smollm2: LLMBackend) -> None:
    client = LLMClient(smollm2, MemoryLLMCache(), max_attempts=1)
    headings, text = code_review_section()
    (out,) = client.run(
        FACTS_EXTRACTIVE,
        [FactsInput(context=text, headings=headings)],
        stage="test.facts",
        params=params_for("facts", GenerationParams()),
    )
    assert out.ok and out.value is not None, out.error
    allowed = set(context_sentences(text))
    assert len(out.value.statements) >= 2 and set(out.value.statements) <= allowed
    assert not copies_example(out.value.theme)


@pytest.mark.slow
def test_smollm2_facts_outcomes_are_ok_or_recorded(smollm2: LLMBackend) -> None:
    client = LLMClient(smollm2, MemoryLLMCache(), max_attempts=2)
    headings, text = code_review_section()
    (out,) = client.run(
        FACTS,
        [FactsInput(context=text, headings=headings)],
        stage="test.facts",
        params=params_for("facts", GenerationParams()),
    )
    assert out.attempts and all(a.error is None for a in out.attempts)
    if out.ok:
        assert isinstance(out.value, FactsOutput) and 1 <= len(out.value.statements) <= 5
    else:
        assert out.cause is not None and out.error
        assert out.raw_texts and all(t.strip() for t in out.raw_texts)
    assert client.usage.totals("test.facts").calls == len(out.attempts)


FRENCH_STATEMENTS = [
    ("La commande apt-get update met à jour la liste des paquets disponibles.", "Paquets Debian"),
    ("Le fichier /etc/fstab décrit les systèmes de fichiers montés au démarrage.", "Fichiers"),
    ("Debian publie une nouvelle version stable environ tous les deux ans.", "Versions de Debian"),
    ("La commande dpkg -l affiche la liste des paquets installés.", "Paquets Debian"),
]


@pytest.mark.slow
def test_smollm2_asks_french_questions_about_french_statements(smollm2: LLMBackend) -> None:
    """The French worked examples make the tiny model write French (its English example alone
    gave English questions); every question passes the model-free language check."""
    client = LLMClient(smollm2, MemoryLLMCache(), max_attempts=2)
    inputs = [QuestionInput(statement=s, theme=t) for s, t in FRENCH_STATEMENTS]
    outcomes = client.run(
        QUESTION, inputs, stage="question", params=params_for("question", GenerationParams())
    )
    questions = [o.value.question for o in outcomes if o.value is not None]
    assert len(questions) == len(inputs)
    assert [wrong_language(q, "fr") for q in questions] == [None] * len(inputs), questions
