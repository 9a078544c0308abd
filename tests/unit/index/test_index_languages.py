"""Per-language lexical analysis in the embedded index: stemmers and stop words per document
language, mixed-language indices, CJK bigrams, and the rebuild of an index written before
languages existed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
import tantivy

from ragtrail.index.analysis import (
    ELASTICSEARCH_ANALYZERS,
    TANTIVY_KEYS,
    elasticsearch_key,
    tantivy_key,
)
from ragtrail.index.embedded import LEXICAL_SCHEMA, EmbeddedHybridIndex, build_analyzer
from ragtrail.records import Chunk

DIM = 8


def _chunk(doc_id: str, text: str, language: str, ordinal: int = 0) -> Chunk:
    return Chunk(
        chunk_id=f"{doc_id}#{ordinal}",
        doc_id=doc_id,
        ordinal=ordinal,
        text=text,
        headings=(),
        n_tokens=len(text.split()),
        language=language,
    )


def _index(path: Path, docs: dict[str, tuple[str, str]]) -> EmbeddedHybridIndex:
    """An index holding one chunk per document: doc_id -> (text, language)."""
    index = EmbeddedHybridIndex(path, DIM, "t")
    chunks = [_chunk(doc_id, text, lang) for doc_id, (text, lang) in docs.items()]
    rng = np.random.default_rng(0)
    index.upsert_documents(list(docs), chunks, rng.normal(size=(len(chunks), DIM)))
    index.commit()
    return index


def _found(index: EmbeddedHybridIndex, query: str) -> list[str]:
    return [hit.doc_id for hit in index.search_lexical(query, 5)]


FRENCH = "Les paquets sont installés par apt à partir des dépôts configurés."


def test_a_french_stemmed_query_finds_inflected_forms_the_english_analysis_misses(tmp_path):
    french = _index(tmp_path / "fr", {"apt.html": (FRENCH, "fr")})
    english = _index(tmp_path / "en", {"apt.html": (FRENCH, "en")})
    for query in ("installer", "un dépôt"):
        assert _found(french, query) == ["apt.html"], query
        assert _found(english, query) == [], query
    # French stop words are not searchable; the English analysis keeps (and matches) them
    assert _found(french, "les des") == []
    assert _found(english, "les des") == ["apt.html"]


def test_a_mixed_index_analyses_each_document_in_its_language(tmp_path):
    index = _index(
        tmp_path / "mixed",
        {
            "fr.html": (FRENCH, "fr"),
            "en.html": ("Packages are installed by apt from the configured archives.", "en"),
            "de.html": ("Die Pakete werden von apt aus den Archiven installiert.", "de"),
        },
    )
    # each query's best hit is the document of its language (shared stems may match the others)
    assert _found(index, "installing packages")[0] == "en.html"
    assert _found(index, "installer un paquet")[0] == "fr.html"
    assert _found(index, "Paket installieren")[0] == "de.html"
    hit = index.search_lexical("paquets", 1)[0]
    assert hit.text == FRENCH  # the stored text comes back from the chunk's own field


def test_cjk_text_is_found_by_a_word_inside_a_sentence(tmp_path):
    index = _index(
        tmp_path / "ja",
        {"ja.txt": ("東京は日本の首都です。", "ja"), "zh.txt": ("北京是中国的首都。", "zh")},
    )
    assert set(_found(index, "首都")) == {"ja.txt", "zh.txt"}
    assert _found(index, "日本") == ["ja.txt"]


def test_undetermined_and_unsupported_languages_get_the_neutral_analysis(tmp_path):
    index = _index(
        tmp_path / "und",
        {"cs.txt": ("Balíčky instaluje apt.", "cs"), "und.txt": ("apt-get", "und")},
    )
    assert _found(index, "balíčky") == ["cs.txt"]
    assert _found(index, "balíček") == []  # no Czech stemmer in tantivy
    assert set(_found(index, "APT")) == {"cs.txt", "und.txt"}  # lower-cased, both neutral


def test_analysis_keys_per_engine():
    assert tantivy_key("fr") == elasticsearch_key("fr") == "fr"
    assert tantivy_key("ja") == elasticsearch_key("zh") == "cjk"
    assert tantivy_key("cs") == "und" and elasticsearch_key("cs") == "cs"
    assert tantivy_key("xx") == elasticsearch_key("") == "und"
    assert ELASTICSEARCH_ANALYZERS["und"] == "standard"
    for key in TANTIVY_KEYS:  # every analysis tantivy is asked for exists in it
        assert build_analyzer(key).analyze("Hello") is not None


def _legacy_copy(path: Path) -> None:
    """Turn an index into what the previous version wrote: one ``en_stem`` text field, an id map
    without languages and no schema mark (same chunks, same vectors)."""
    db = sqlite3.connect(path / "ids.sqlite", isolation_level=None)
    rows = db.execute("SELECT chunk_id, doc_id, text FROM chunks").fetchall()
    db.execute("ALTER TABLE chunks DROP COLUMN language")
    db.execute("DELETE FROM meta WHERE key = 'lexical_schema'")
    db.close()
    for item in (path / "bm25").iterdir():
        item.unlink()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("doc_id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("text", stored=True, tokenizer_name="en_stem")
    old = tantivy.Index(builder.build(), path=str(path / "bm25"))
    writer = old.writer(heap_size=15_000_000, num_threads=1)
    for chunk_id, doc_id, text in rows:
        writer.add_document(tantivy.Document(chunk_id=chunk_id, doc_id=doc_id, text=text))
    writer.commit()
    writer.wait_merging_threads()


def test_an_index_from_before_languages_is_rebuilt_and_searches_as_before(tmp_path):
    path = tmp_path / "legacy"
    text = "Travel expenses are reimbursed within thirty days."
    _index(path, {"travel.md": (text, "en"), "leave.md": ("Leave lasts weeks.", "en")}).close()
    _legacy_copy(path)

    index = EmbeddedHybridIndex(path, DIM, "t")
    assert _found(index, "reimbursing") == ["travel.md"]
    assert index.search_lexical("reimbursing", 1)[0].text == text
    assert index.consistency_report().consistent
    db = sqlite3.connect(path / "ids.sqlite")
    assert db.execute("SELECT DISTINCT language FROM chunks").fetchall() == [("en",)]
    mark = db.execute("SELECT value FROM meta WHERE key = 'lexical_schema'").fetchone()
    assert mark == (LEXICAL_SCHEMA,)
    assert not (path / "bm25.rebuild").exists() and not (path / "bm25.legacy").exists()
    # a French document written afterwards gets its own analysis beside the old ones
    rng = np.random.default_rng(1)
    index.upsert_documents(["fr.html"], [_chunk("fr.html", FRENCH, "fr")], rng.normal(size=(1, 8)))
    index.commit()
    assert _found(index, "installer un paquet") == ["fr.html"]
    index.close()


def test_an_index_with_an_unknown_lexical_schema_is_refused(tmp_path):
    path = tmp_path / "future"
    _index(path, {"a.md": ("Some text about nothing in particular.", "en")}).close()
    db = sqlite3.connect(path / "ids.sqlite", isolation_level=None)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'lexical_schema'")
    db.close()
    with pytest.raises(ValueError, match="lexical schema 99"):
        EmbeddedHybridIndex(path, DIM, "t")
