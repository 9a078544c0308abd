"""Consistency checks for the shipped sample corpus and its hand-written QA set.

The corpus under ``sample/corpus/`` is the default input of the nightly pipeline and the QA set
``sample/qa/handbook_qa.jsonl`` its default test set, so both must stay in step: every ground
document must exist, and the short answers of fact_single questions must be findable verbatim in
the text a parser extracts from the ground document.

Extraction here is deliberately independent of ragtrail's own parsers (stdlib, pypdf,
python-docx and BeautifulSoup only), so a regression in ragtrail cannot hide a broken corpus.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import cache
from pathlib import Path

import docx
import pytest
from bs4 import BeautifulSoup
from pypdf import PdfReader

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DIR = REPO_ROOT / "sample"
CORPUS_DIR = SAMPLE_DIR / "corpus"
QA_PATH = SAMPLE_DIR / "qa" / "handbook_qa.jsonl"

LABELS = ("fact_single", "summary", "reasoning", "unanswerable")
QA_KEYS = {"qid", "question", "label", "answer", "ground_doc_ids"}
SUFFIX_FORMAT = {".md": "markdown", ".html": "html", ".pdf": "pdf", ".docx": "docx"}
FORBIDDEN_PHRASES = ("the context", "the passage", "the document", "the text")


def _corpus_files() -> list[Path]:
    return sorted(p for p in CORPUS_DIR.rglob("*") if p.is_file())


def _doc_id(path: Path) -> str:
    return path.relative_to(CORPUS_DIR).as_posix()


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


@cache
def extract_text(doc_id: str) -> str:
    """Plain text of one corpus document, as a simple parser would see it."""
    path = CORPUS_DIR / doc_id
    suffix = path.suffix.lower()
    if suffix == ".md":
        return path.read_text(encoding="utf-8")
    if suffix == ".html":
        soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
        for tag in soup(["script", "style", "nav", "header", "footer"]):
            tag.decompose()
        # Both joinings: without a separator inline markup stays glued to punctuation, with one
        # adjacent block elements never run together.
        return soup.get_text() + "\n" + soup.get_text(" ")
    if suffix == ".pdf":
        return "\n".join(page.extract_text() or "" for page in PdfReader(path).pages)
    if suffix == ".docx":
        document = docx.Document(str(path))
        parts = [p.text for p in document.paragraphs]
        for table in document.tables:
            for row in table.rows:
                parts.extend(cell.text for cell in row.cells)
        return "\n".join(parts)
    raise AssertionError(f"unexpected file type in corpus: {doc_id}")


def _load_qa() -> tuple[list[dict], list[str]]:
    """QA items and the lines that failed to parse (reported by a test, not at collection)."""
    if not QA_PATH.is_file():
        return [], [f"{QA_PATH} is missing"]
    items, errors = [], []
    for number, line in enumerate(QA_PATH.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: {exc}")
            continue
        if not isinstance(item, dict):
            errors.append(f"line {number}: not a JSON object")
            continue
        items.append(item)
    return items, errors


QA, QA_ERRORS = _load_qa()


def test_qa_file_parses() -> None:
    assert not QA_ERRORS


def test_corpus_has_enough_documents_in_all_formats() -> None:
    files = _corpus_files()
    assert len(files) >= 28
    unexpected = [_doc_id(p) for p in files if p.suffix.lower() not in SUFFIX_FORMAT]
    assert not unexpected, f"unexpected files in the corpus: {unexpected}"
    formats = Counter(SUFFIX_FORMAT[p.suffix.lower()] for p in files)
    assert set(formats) == set(SUFFIX_FORMAT.values()), formats
    assert not (CORPUS_DIR / "README.md").exists(), "a README inside the corpus would be ingested"


@pytest.mark.parametrize("doc_id", [_doc_id(p) for p in _corpus_files()])
def test_every_document_has_substantial_text(doc_id: str) -> None:
    words = len(extract_text(doc_id).split())
    if doc_id.endswith(".html"):
        words //= 2  # extract_text returns the page text twice
    assert words >= 200, f"{doc_id} has only {words} words"


def test_sample_corpus_is_small() -> None:
    total = sum(p.stat().st_size for p in SAMPLE_DIR.rglob("*") if p.is_file())
    assert total < 2 * 1024 * 1024


def test_qa_items_are_well_formed() -> None:
    assert len(QA) >= 48
    for item in QA:
        assert set(item) == QA_KEYS, item
        assert re.fullmatch(r"q\d{3}", item["qid"]), item["qid"]
        assert item["label"] in LABELS, item
        assert isinstance(item["question"], str) and item["question"].strip(), item
        assert isinstance(item["answer"], str), item
        assert isinstance(item["ground_doc_ids"], list) and item["ground_doc_ids"], item
        if item["label"] == "unanswerable":
            assert item["answer"] == "", item["qid"]
        else:
            assert item["answer"].strip(), item["qid"]


def test_qids_are_unique() -> None:
    counts = Counter(item["qid"] for item in QA)
    assert not [qid for qid, n in counts.items() if n > 1]


def test_questions_are_unique() -> None:
    counts = Counter(_normalise(item["question"]) for item in QA)
    assert not [q for q, n in counts.items() if n > 1]


def test_every_label_is_well_represented() -> None:
    counts = Counter(item["label"] for item in QA)
    for label in LABELS:
        assert counts[label] >= 12, counts


def test_ground_documents_exist() -> None:
    missing = [
        (item["qid"], doc_id)
        for item in QA
        for doc_id in item["ground_doc_ids"]
        if not (CORPUS_DIR / doc_id).is_file()
    ]
    assert not missing


def test_questions_cover_many_documents_and_all_formats() -> None:
    doc_ids = {doc_id for item in QA for doc_id in item["ground_doc_ids"]}
    assert len(doc_ids) >= 20
    formats = {SUFFIX_FORMAT[Path(doc_id).suffix] for doc_id in doc_ids}
    assert formats == set(SUFFIX_FORMAT.values())


def test_questions_do_not_refer_to_a_source_text() -> None:
    offending = [
        item["qid"]
        for item in QA
        if any(phrase in item["question"].casefold() for phrase in FORBIDDEN_PHRASES)
    ]
    assert not offending


@pytest.mark.parametrize(
    "item", [i for i in QA if i["label"] == "fact_single"], ids=lambda item: item["qid"]
)
def test_fact_single_answer_is_verbatim_in_ground_document(item: dict) -> None:
    answer = _normalise(item["answer"])
    texts = {doc_id: _normalise(extract_text(doc_id)) for doc_id in item["ground_doc_ids"]}
    assert any(answer in text for text in texts.values()), (
        f"{item['qid']}: {item['answer']!r} not found in {sorted(texts)}"
    )
