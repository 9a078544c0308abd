"""Chunker tests with the real MiniLM tokenizer (loaded offline from the bundled model)."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from ragtrail.config import ChunkingSettings
from ragtrail.ingest.chunk import HFTokenCounter, Tokenizer, as_token_counter, chunk_document
from ragtrail.ingest.loaders import parse_document
from ragtrail.records import DocFormat, ParsedDocument, Section
from tests.unit._docs import MARKDOWN_DOC, hf_tokenizer, source

WORDS = [
    "policy",
    "travel",
    "expense",
    "approval",
    "manager",
    "receipt",
    "hotel",
    "flight",
    "budget",
    "invoice",
    "contract",
    "supplier",
    "quarterly",
    "review",
    "employee",
    "onboarding",
    "security",
    "password",
    "laptop",
    "badge",
]


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer()


@pytest.fixture(scope="module")
def counter(tokenizer) -> HFTokenCounter:
    return HFTokenCounter(tokenizer)


def prose(n_paragraphs: int, seed: int = 3, max_words: int = 20) -> str:
    """Deterministic pseudo-prose: paragraphs of 2–6 sentences of 5–``max_words`` words."""
    rng = random.Random(seed)
    paragraphs = []
    for _ in range(n_paragraphs):
        sentences = []
        for _ in range(rng.randint(2, 6)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(5, max_words))]
            sentences.append(" ".join(words).capitalize() + ".")
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def make_doc(*sections: Section, title: str = "Doc Title", doc_id: str = "a/doc.md"):
    return ParsedDocument(
        doc_id=doc_id,
        uri=f"/src/{doc_id}",
        format=DocFormat.MARKDOWN,
        title=title,
        sections=tuple(sections),
    )


def table_text(n_rows: int) -> str:
    rows = ["| Region | Owner | Budget (EUR) | Notes |"]
    rows += [
        f"| region {i} | team {i % 7} | {1000 + 37 * i} | reviewed quarterly |"
        for i in range(n_rows)
    ]
    return "\n".join(rows)


SETTINGS = ChunkingSettings(max_tokens=64, overlap_tokens=16, max_table_tokens=120)


def test_counter_excludes_special_tokens_and_ignores_model_truncation(counter, tokenizer) -> None:
    assert counter.count("hello world") == 2
    long = "word " * 1000
    assert counter.count(long) == 1000  # tokenizer.json truncates at 128; the counter must not
    assert counter.count_batch(["hello world", "a b c"]) == [2, 3]
    assert (
        counter.encode("hello world")
        == tokenizer("hello world", add_special_tokens=False)["input_ids"]
    )
    text = "Café crème brûlée"
    assert text[slice(*counter.offsets(text)[0])] == "Café"
    assert isinstance(counter, Tokenizer)
    assert as_token_counter(tokenizer) is as_token_counter(tokenizer)  # cached wrapper
    assert as_token_counter(counter) is counter


def test_windows_respect_max_tokens_and_are_substrings(counter) -> None:
    text = prose(30)
    doc = make_doc(Section(text, ("Policy",)))
    chunks = chunk_document(doc, counter, SETTINGS)
    assert len(chunks) > 5
    for chunk in chunks:
        assert chunk.n_tokens <= SETTINGS.max_tokens
        assert chunk.n_tokens == counter.count(chunk.text)
        assert chunk.text in text
        assert chunk.text == chunk.text.strip()
    # the windows cover the whole section text
    assert text.startswith(chunks[0].text)
    assert text.endswith(chunks[-1].text)


def test_consecutive_windows_overlap(counter) -> None:
    text = prose(30)
    chunks = chunk_document(make_doc(Section(text, ("Policy",))), counter, SETTINGS)
    for prev, nxt in itertools.pairwise(chunks):
        prev_start = text.index(prev.text)
        prev_end = prev_start + len(prev.text)
        nxt_start = text.index(nxt.text, prev_start + 1)
        assert prev_start < nxt_start < prev_end, "next window must start inside the previous one"
        overlap = text[nxt_start:prev_end]
        assert 0 < counter.count(overlap) <= SETTINGS.overlap_tokens


def test_cuts_prefer_sentence_or_paragraph_boundaries(counter) -> None:
    """Sentences of at most 10 words always end inside the last 30% of a 64-token window."""
    text = prose(30, max_words=10)
    chunks = chunk_document(make_doc(Section(text)), counter, SETTINGS)
    for chunk in chunks[:-1]:
        assert chunk.text.endswith("."), chunk.text[-30:]
        assert chunk.n_tokens >= 0.7 * SETTINGS.max_tokens - 1  # backed off only a little


def test_paragraph_break_beats_sentence_end(counter) -> None:
    first = "Alpha policy applies. " * 11 + "Final alpha sentence."  # 48 tokens, break in last 30%
    second = "Beta rules follow here. " * 12
    text = f"{first}\n\n{second}"
    window_floor = SETTINGS.max_tokens - int(0.3 * SETTINGS.max_tokens)
    assert window_floor <= counter.count(first) < SETTINGS.max_tokens
    chunks = chunk_document(make_doc(Section(text)), counter, SETTINGS)
    assert chunks[0].text == first


def test_no_overlap_when_disabled(counter) -> None:
    settings = ChunkingSettings(max_tokens=32, overlap_tokens=0, max_table_tokens=64)
    text = prose(10)
    chunks = chunk_document(make_doc(Section(text)), counter, settings)
    position = 0
    for chunk in chunks:
        found = text.index(chunk.text, position)
        assert found >= position
        position = found + len(chunk.text)


def test_deterministic_ids_and_ordinals(tokenizer) -> None:
    doc = make_doc(Section(prose(10), ("A",)), Section(prose(5, seed=9), ("B",)), doc_id="x/y.md")
    first = chunk_document(doc, tokenizer, SETTINGS)
    second = chunk_document(doc, tokenizer, SETTINGS)
    assert first == second
    assert [c.ordinal for c in first] == list(range(len(first)))
    assert [c.chunk_id for c in first] == [f"x/y.md#{i:04d}" for i in range(len(first))]
    assert all(c.doc_id == "x/y.md" for c in first)


def test_chunks_never_span_sections_and_carry_headings(counter) -> None:
    a, b = prose(6, seed=1), prose(6, seed=2)
    doc = make_doc(Section(a, ("Travel",)), Section(b, ("Travel", "Per diem")), Section("Tail."))
    chunks = chunk_document(doc, counter, SETTINGS)
    for chunk in chunks:
        assert (chunk.text in a) or (chunk.text in b) or chunk.text == "Tail."
        if chunk.text in a:
            assert chunk.headings == ("Travel",)
        elif chunk.text in b:
            assert chunk.headings == ("Travel", "Per diem")
    assert chunks[-1].headings == ("Doc Title",)  # empty path -> the document title
    assert chunks[-1].index_text().startswith("Doc Title\n")


def test_small_table_stays_whole_even_above_max_tokens(counter) -> None:
    table = table_text(5)
    n = counter.count(table)
    assert SETTINGS.max_tokens < n <= SETTINGS.max_table_tokens
    chunks = chunk_document(make_doc(Section(table, ("Budgets",), "table")), counter, SETTINGS)
    assert len(chunks) == 1
    assert chunks[0].text == table
    assert chunks[0].kind == "table"
    assert chunks[0].n_tokens == n
    assert chunks[0].headings == ("Budgets",)


def test_large_table_split_by_rows_with_repeated_header(counter) -> None:
    table = table_text(40)
    header, *rows = table.split("\n")
    chunks = chunk_document(make_doc(Section(table, ("Budgets",), "table")), counter, SETTINGS)
    assert len(chunks) > 2
    seen_rows = []
    for chunk in chunks:
        lines = chunk.text.split("\n")
        assert lines[0] == header
        assert len(lines) > 1
        assert chunk.kind == "table"
        assert chunk.n_tokens == counter.count(chunk.text) <= SETTINGS.max_tokens
        seen_rows.extend(lines[1:])
    assert seen_rows == rows  # every row exactly once, in order


def test_oversized_table_row_is_windowed(counter) -> None:
    table = "| Key | Value |\n| notes | " + prose(8) + " |"
    chunks = chunk_document(make_doc(Section(table, ("T",), "table")), counter, SETTINGS)
    assert len(chunks) > 1
    assert all(c.text.startswith("| Key | Value |\n") for c in chunks)
    assert all(c.n_tokens <= SETTINGS.max_tokens for c in chunks)


def test_single_huge_word_is_hard_cut(counter) -> None:
    blob = "qzx" * 33  # one 99-character "word" of 99 word-pieces
    chunks = chunk_document(make_doc(Section(blob)), counter, SETTINGS)
    assert len(chunks) > 1
    assert all(c.n_tokens <= SETTINGS.max_tokens for c in chunks)
    assert all(c.text in blob for c in chunks)


def test_empty_or_tokenless_sections_produce_no_chunks(counter) -> None:
    assert chunk_document(make_doc(), counter, SETTINGS) == []


def test_parsed_markdown_end_to_end(tokenizer) -> None:
    doc = parse_document(source("/src/travel.md", MARKDOWN_DOC.encode()), max_bytes=100_000)
    chunks = chunk_document(doc, tokenizer, ChunkingSettings())
    kinds = [c.kind for c in chunks]
    assert kinds.count("table") == 1
    table = chunks[kinds.index("table")]
    assert table.headings == ("Travel", "Per diem")
    assert re.match(r"^\| City \| Rate \(EUR\) \|", table.text)
    section_texts = [s.text for s in doc.sections]
    assert all(any(c.text in t for t in section_texts) for c in chunks)


def test_many_documents_chunk_quickly(counter) -> None:
    """~250 documents x ~1,500 words must chunk in a few seconds (one tokenisation per section)."""
    import time

    rng = random.Random(5)
    docs = [
        make_doc(
            Section(
                " ".join(
                    rng.choice(WORDS) + ("." if rng.random() < 0.08 else "") for _ in range(1500)
                )
            ),
            doc_id=f"d{i}.md",
        )
        for i in range(250)
    ]
    started = time.perf_counter()
    n_chunks = sum(len(chunk_document(d, counter, ChunkingSettings())) for d in docs)
    elapsed = time.perf_counter() - started
    assert n_chunks >= 250 * 7
    assert elapsed < 20, f"chunking took {elapsed:.1f}s"


# -- the character bound (issue 22) ------------------------------------------------------------

CHARS = ChunkingSettings(max_tokens=64, overlap_tokens=16, max_table_tokens=120, max_chars=500)


def test_char_limit_defaults_to_ten_characters_per_token_of_the_larger_budget() -> None:
    assert ChunkingSettings().char_limit == 4000
    assert ChunkingSettings(max_tokens=1024).char_limit == 10_240
    assert ChunkingSettings(max_chars=1234).char_limit == 1234
    with pytest.raises(ValueError):
        ChunkingSettings(max_chars=10)


def test_one_overlong_token_is_cut_into_pieces_of_the_bound(counter) -> None:
    """One 300,000-character "word" is a single unknown token: it once became one chunk."""
    blob = "z" * 300_000
    assert counter.count(blob) == 1
    chunks = chunk_document(make_doc(Section(blob)), counter, CHARS)
    assert len(chunks) == 600
    assert all(len(c.text) == 500 for c in chunks)
    assert "".join(c.text for c in chunks) == blob  # nothing lost, nothing repeated
    assert all(1 <= c.n_tokens <= CHARS.max_tokens for c in chunks)


def test_prose_around_a_blob_stays_whole_and_the_blob_is_bounded(counter) -> None:
    before, after = prose(3, seed=11), prose(3, seed=12)
    blob = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo" * 600  # base64 letters only: 21,000 chars
    text = f"{before}\n\n{blob}\n\n{after}"
    chunks = chunk_document(make_doc(Section(text)), counter, CHARS)
    assert all(len(c.text) <= CHARS.char_limit for c in chunks)
    assert all(c.n_tokens <= CHARS.max_tokens for c in chunks)
    assert all(c.text in text for c in chunks)
    assert text.startswith(chunks[0].text) and text.endswith(chunks[-1].text)
    covered = "".join(c.text for c in chunks if set(c.text) <= set(blob))
    assert len(covered) >= len(blob)  # every piece of the blob is in some chunk


def test_minified_json_respects_both_bounds(counter) -> None:
    data = [
        {"id": i, "name": f"item-{i}", "tags": ["a" * (i % 90), "b"], "n": i * 1.5}
        for i in range(400)
    ]
    text = json.dumps(data, separators=(",", ":"))
    chunks = chunk_document(make_doc(Section(text)), counter, CHARS)
    assert len(chunks) > 10
    assert all(len(c.text) <= CHARS.char_limit and c.n_tokens <= CHARS.max_tokens for c in chunks)
    assert text.startswith(chunks[0].text) and text.endswith(chunks[-1].text)


def test_long_words_make_short_windows_that_still_advance(counter) -> None:
    """Words of 120 characters (one unknown token each): the character bound, not the token
    budget, ends the windows; the overlap shrinks with them so the windows still move on."""
    words = [f"{i:03d}" + "w" * 117 for i in range(60)]
    text = " ".join(words)
    chunks = chunk_document(make_doc(Section(text)), counter, CHARS)
    assert all(len(c.text) <= CHARS.char_limit for c in chunks)
    assert text.startswith(chunks[0].text) and text.endswith(chunks[-1].text)
    assert len(chunks) <= len(words)  # at most one new window per word
    for word in words:
        assert any(word in c.text for c in chunks)


def test_tables_are_bounded_in_characters_too(counter) -> None:
    header = "| Key | Value |"
    rows = [f"| k{i} | {'x' * 150} |" for i in range(8)]  # few tokens, many characters
    table = "\n".join([header, *rows])
    assert counter.count(table) <= CHARS.max_table_tokens and len(table) > CHARS.char_limit
    chunks = chunk_document(make_doc(Section(table, ("T",), "table")), counter, CHARS)
    assert len(chunks) > 1
    assert all(len(c.text) <= CHARS.char_limit for c in chunks)
    assert all(c.text.startswith(header + "\n") for c in chunks)
    assert [line for c in chunks for line in c.text.split("\n")[1:]] == rows

    huge_cell = f"{header}\n| blob | {'y' * 5000} |"
    pieces = chunk_document(make_doc(Section(huge_cell, ("T",), "table")), counter, CHARS)
    assert len(pieces) > 1
    assert all(len(c.text) <= CHARS.char_limit for c in pieces)
    assert all(c.text.startswith(header + "\n") for c in pieces)


def test_the_bound_changes_nothing_for_ordinary_text(tokenizer) -> None:
    """Prose and tables far below the bound chunk exactly as without it (same texts and ids)."""
    doc = parse_document(source("/src/travel.md", MARKDOWN_DOC.encode()), max_bytes=100_000)
    prose_doc = make_doc(Section(prose(40), ("A",)), Section(table_text(40), ("B",), "table"))
    unbounded = ChunkingSettings(max_chars=10**9)
    for d in (doc, prose_doc):
        assert chunk_document(d, tokenizer, ChunkingSettings()) == chunk_document(
            d, tokenizer, unbounded
        )
