"""The facts prompt on the real bundled SmolLM2 (slow): outcomes are ok or recorded failures.

The model is tiny, so quality is not asserted; the point is that the prompt renders within the
model's limits and that every outcome is either a validated value or a failure carrying the raw
text. The converted model is cached in ``$RAGTRAIL_TEST_MODEL_CACHE`` when set (shared with the
LLM-layer slow test), else in a temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragtrail.generate.prompts import FACTS, FactsInput, FactsOutput
from ragtrail.generate.steps import params_for
from ragtrail.ingest.loaders import parse_document
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


@pytest.mark.slow
def test_smollm2_facts_outcomes_are_ok_or_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gguf")
    monkeypatch.setenv("RAGTRAIL_HOME", str(tmp_path / "home"))
    cache = Path(os.environ.get("RAGTRAIL_TEST_MODEL_CACHE") or tmp_path / "models")
    backend = load_llm_backend("builtin:smollm2-135m-instruct", cache_dir=cache)
    client = LLMClient(backend, MemoryLLMCache(), max_attempts=2)
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
