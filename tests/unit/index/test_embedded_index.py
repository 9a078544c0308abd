"""The embedded (tantivy + faiss) backend: protocol behaviour, persistence, hostile queries, crashes.

Vectors are seeded random unit vectors: exact cosine search must return a stored vector as its own
nearest neighbour, which makes dense expectations exact without loading a model.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ragtrail.config import Settings
from ragtrail.index.base import HybridIndex, fetch_candidates
from ragtrail.index.embedded import EmbeddedHybridIndex
from ragtrail.index.factory import open_index, validate_corpus_name
from ragtrail.index.fusion import fuse
from ragtrail.records import Chunk

DIM = 16
DOCS: dict[str, list[str]] = {
    "policies/travel.md": [
        "Travel expenses are reimbursed within thirty days.",
        "Book flights through the approved travel agency.",
    ],
    "policies/leave.md": ["Parental leave lasts sixteen weeks.", "Sick days need a doctor's note."],
    "it/laptops.md": ["Laptops are replaced every four years by IT."],
}


def vector_for(chunk_id: str) -> np.ndarray:
    """A deterministic unit vector per chunk id (seeded by the id's bytes)."""
    rng = np.random.default_rng(list(chunk_id.encode()))
    v = rng.normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def chunks_for(doc_id: str, texts: list[str], version: str = "v1") -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"{doc_id}#{version}-{i}",
            doc_id=doc_id,
            ordinal=i,
            text=t,
            headings=(doc_id.split("/")[-1],),
            n_tokens=len(t.split()),
            language="en",
        )
        for i, t in enumerate(texts)
    ]


def upsert(index: EmbeddedHybridIndex, doc_id: str, texts: list[str], version: str = "v1") -> None:
    chunks = chunks_for(doc_id, texts, version)
    vectors = np.stack([vector_for(c.chunk_id) for c in chunks]) if chunks else np.zeros((0, DIM))
    index.upsert_documents([doc_id], chunks, vectors)


def load_all(index: EmbeddedHybridIndex) -> None:
    for doc_id, texts in DOCS.items():
        upsert(index, doc_id, texts)
    index.commit()


def chunk_total() -> int:
    return sum(len(t) for t in DOCS.values())


@pytest.fixture
def index(tmp_path: Path) -> EmbeddedHybridIndex:
    ix = EmbeddedHybridIndex(tmp_path / "corpus", dim=DIM, name="corpus")
    yield ix
    ix.close()


def test_satisfies_protocol(index: EmbeddedHybridIndex) -> None:
    assert isinstance(index, HybridIndex)
    assert index.name == "corpus"


def test_upsert_then_search_both_modalities(index: EmbeddedHybridIndex) -> None:
    load_all(index)
    assert index.count_chunks() == chunk_total()
    assert index.document_ids() == set(DOCS)

    lex = index.search_lexical("How many weeks of parental leave?", 3)
    assert lex[0].chunk_id == "policies/leave.md#v1-0"
    assert lex[0].doc_id == "policies/leave.md"
    assert "sixteen weeks" in lex[0].text
    assert all(a.score >= b.score for a, b in itertools.pairwise(lex))

    # stemming: "reimbursing" matches "reimbursed"; heading text is indexed too
    assert index.search_lexical("reimbursing", 5)[0].chunk_id == "policies/travel.md#v1-0"
    assert index.search_lexical("laptops.md", 5)[0].doc_id == "it/laptops.md"

    target = "it/laptops.md#v1-0"
    dense = index.search_dense(vector_for(target), 2)
    assert dense[0].chunk_id == target
    assert dense[0].score == pytest.approx(1.0, abs=1e-5)
    assert dense[0].text.endswith("replaced every four years by IT.")
    assert len(index.search_dense(vector_for(target), 100)) == chunk_total()

    fused = fuse(fetch_candidates(index, "laptops", vector_for(target), 5), 0.5, 3)
    assert fused[0].chunk_id == target


def test_writes_invisible_until_commit(index: EmbeddedHybridIndex) -> None:
    upsert(index, "it/laptops.md", DOCS["it/laptops.md"])
    assert index.search_lexical("laptops", 5) == []
    assert index.search_dense(vector_for("it/laptops.md#v1-0"), 5) == []
    index.commit()
    assert len(index.search_lexical("laptops", 5)) == 1


def test_reupsert_replaces_without_duplicates(index: EmbeddedHybridIndex) -> None:
    load_all(index)
    for _ in range(2):  # same content twice: idempotent
        upsert(index, "policies/leave.md", DOCS["policies/leave.md"])
    index.commit()
    assert index.count_chunks() == chunk_total()
    assert index.consistency_report().consistent

    upsert(index, "policies/leave.md", ["Parental leave now lasts twenty weeks."], version="v2")
    index.commit()
    assert index.count_chunks() == chunk_total() - 1
    hits = index.search_lexical("parental leave", 10)
    assert [h.chunk_id for h in hits if h.doc_id == "policies/leave.md"] == [
        "policies/leave.md#v2-0"
    ]
    dense_ids = {h.chunk_id for h in index.search_dense(vector_for("x"), 100)}
    assert "policies/leave.md#v1-0" not in dense_ids
    assert "policies/leave.md#v2-0" in dense_ids


def test_several_versions_staged_before_one_commit(index: EmbeddedHybridIndex) -> None:
    load_all(index)
    upsert(index, "it/laptops.md", ["v2 text one", "v2 text two"], version="v2")
    upsert(index, "it/laptops.md", ["v3 text"], version="v3")
    index.delete_documents(["policies/travel.md"])
    upsert(index, "policies/travel.md", ["Travel is back."], version="v4")
    index.commit()
    report = index.consistency_report()
    assert report.consistent, report
    dense = {h.chunk_id for h in index.search_dense(vector_for("q"), 100)}
    lexical = {h.chunk_id for h in index.search_lexical("text travel parental sick", 100)}
    expected = {"it/laptops.md#v3-0", "policies/travel.md#v4-0"} | {
        c.chunk_id for c in chunks_for("policies/leave.md", DOCS["policies/leave.md"])
    }
    assert dense == expected
    assert lexical == expected


def test_delete_removes_from_both_modalities(index: EmbeddedHybridIndex) -> None:
    load_all(index)
    index.delete_documents(["policies/travel.md", "unknown/doc.md"])
    index.commit()
    assert index.document_ids() == {"policies/leave.md", "it/laptops.md"}
    assert index.search_lexical("travel flights", 10) == []
    assert all(h.doc_id != "policies/travel.md" for h in index.search_dense(vector_for("q"), 100))
    report = index.consistency_report()
    assert report.consistent
    assert report.lexical_chunks == report.dense_chunks == report.id_rows == 3


def test_persistence_across_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "corpus"
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        load_all(ix)
        upsert(ix, "it/laptops.md", ["never committed"], version="v9")  # discarded on close
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        assert ix.count_chunks() == chunk_total()
        assert ix.document_ids() == set(DOCS)
        assert ix.search_lexical("laptops", 1)[0].chunk_id == "it/laptops.md#v1-0"
        assert ix.search_dense(vector_for("policies/leave.md#v1-1"), 1)[0].chunk_id == (
            "policies/leave.md#v1-1"
        )
        assert ix.search_lexical("committed", 5) == []
    with pytest.raises(ValueError, match="dim"):
        EmbeddedHybridIndex(path, dim=DIM + 1, name="corpus")


@pytest.mark.parametrize(
    "query",
    [
        "AND OR (",
        '"unterminated',
        "title:foo",
        "*",
        "",
        "   ",
        "NOT",
        "-",
        "+",
        "a:b:c",
        "\\",
        "[1 TO 5]",
        "{a TO b}",
        "foo^2",
        "~",
        "text:IN [a b]",
        "naïve café 東京",
        "x" * 100,
        "🙂 ) ) (",
    ],
)
def test_hostile_queries_never_raise(index: EmbeddedHybridIndex, query: str) -> None:
    load_all(index)
    hits = index.search_lexical(query, 5)
    assert isinstance(hits, list)


def test_query_syntax_is_treated_as_words(index: EmbeddedHybridIndex) -> None:
    load_all(index)
    assert index.search_lexical("", 5) == []
    assert index.search_lexical("title:laptops", 5)[0].doc_id == "it/laptops.md"
    assert index.search_lexical('"parental AND (leave', 5)[0].doc_id == "policies/leave.md"
    assert index.search_lexical("laptops", 0) == []


def test_empty_index_and_bad_inputs(index: EmbeddedHybridIndex) -> None:
    assert index.search_lexical("anything", 5) == []
    assert index.search_dense(vector_for("q"), 5) == []
    assert index.document_ids() == set()
    assert index.count_chunks() == 0
    with pytest.raises(ValueError, match="dim"):
        index.search_dense(np.ones(DIM + 1), 3)
    chunks = chunks_for("a.md", ["x"])
    with pytest.raises(ValueError, match="shape"):
        index.upsert_documents(["a.md"], chunks, np.ones((2, DIM)))
    with pytest.raises(ValueError, match="not listed"):
        index.upsert_documents(["b.md"], chunks, np.ones((1, DIM)))


def test_crash_after_lexical_commit_is_repaired_by_reupsert(tmp_path: Path) -> None:
    path = tmp_path / "corpus"
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        load_all(ix)
        upsert(ix, "policies/leave.md", ["Parental leave now lasts twenty weeks."], version="v2")
        upsert(ix, "hr/new.md", ["Brand new onboarding guide."])
        ix._commit_lexical()  # killed here: id map and vectors never committed
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        report = ix.consistency_report()
        assert not report.consistent
        assert report.docs_only_lexical == {"hr/new.md"}
        assert report.docs_mismatched == {"policies/leave.md"}
        assert "hr/new.md" in ix.document_ids()
        # the caller re-runs the same upserts
        upsert(ix, "policies/leave.md", ["Parental leave now lasts twenty weeks."], version="v2")
        upsert(ix, "hr/new.md", ["Brand new onboarding guide."])
        ix.commit()
        report = ix.consistency_report()
        assert report.consistent, report
        assert report.lexical_chunks == report.dense_chunks == chunk_total() - 1 + 1


def test_crash_between_id_map_and_vectors_is_repaired(tmp_path: Path) -> None:
    path = tmp_path / "corpus"
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        load_all(ix)
        upsert(ix, "policies/travel.md", ["Only trains for trips under 500 km."], version="v2")
        ix._commit_lexical()
        ix._commit_ids()  # killed here: vectors.faiss still holds the old travel vectors
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        report = ix.consistency_report()
        assert report.dangling_rows == 1  # new row without its vector
        assert report.docs_only_lexical == {"policies/travel.md"}  # old vectors hidden as orphans
        assert ix.count_chunks() == 3
        assert all(h.doc_id != "policies/travel.md" for h in ix.search_dense(vector_for("q"), 99))
        upsert(ix, "policies/travel.md", ["Only trains for trips under 500 km."], version="v2")
        ix.commit()
        report = ix.consistency_report()
        assert report.consistent, report
        assert report.dangling_rows == 0
        assert report.id_rows == report.dense_chunks == report.lexical_chunks == 4
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        assert ix.consistency_report().consistent
        hit = ix.search_dense(vector_for("policies/travel.md#v2-0"), 1)[0]
        assert hit.chunk_id == "policies/travel.md#v2-0"


def test_real_kill_between_steps(tmp_path: Path) -> None:
    """A process killed (os._exit) mid-commit leaves a repairable index, lock released."""
    path = tmp_path / "corpus"
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        load_all(ix)
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from pathlib import Path
        import test_embedded_index as t
        from ragtrail.index.embedded import EmbeddedHybridIndex
        ix = EmbeddedHybridIndex(Path({str(path)!r}), dim=t.DIM, name="corpus")
        t.upsert(ix, "it/laptops.md", ["Laptops are replaced every three years."], version="v2")
        ix.delete_documents(["policies/leave.md"])
        ix._commit_vectors = lambda: os._exit(9)
        ix.commit()
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == 9, proc.stderr.decode()
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        report = ix.consistency_report()
        assert not report.consistent
        assert "it/laptops.md" in report.docs_to_repair
        # reconciliation: the caller re-applies the run's writes
        upsert(ix, "it/laptops.md", ["Laptops are replaced every three years."], version="v2")
        ix.delete_documents(["policies/leave.md"])
        ix.commit()
        report = ix.consistency_report()
        assert report.consistent, report
        assert ix.document_ids() == {"policies/travel.md", "it/laptops.md"}
        assert ix.count_chunks() == 3


def test_orphan_vectors_are_ignored_and_cleaned(tmp_path: Path) -> None:
    path = tmp_path / "corpus"
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        load_all(ix)
        ix._faiss.add_with_ids(vector_for("ghost")[None, :], np.array([10_000], dtype=np.int64))
        ix._commit_vectors()  # a vector with no id-map row reaches disk
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        assert ix.count_chunks() == chunk_total()
        known = {c.chunk_id for d, t in DOCS.items() for c in chunks_for(d, t)}
        hits = ix.search_dense(vector_for("ghost"), 99)
        assert {h.chunk_id for h in hits} == known
        upsert(ix, "it/laptops.md", DOCS["it/laptops.md"])
        ix.commit()
    with EmbeddedHybridIndex(path, dim=DIM, name="corpus") as ix:
        assert ix.consistency_report().consistent
        assert ix.count_chunks() == chunk_total()


def test_single_writer_and_reader_reload(tmp_path: Path) -> None:
    path = tmp_path / "corpus"
    writer = EmbeddedHybridIndex(path, dim=DIM, name="corpus")
    reader = EmbeddedHybridIndex(path, dim=DIM, name="corpus")
    try:
        load_all(writer)
        assert reader.count_chunks() == 0  # opened before the commit
        reader.reload()
        assert reader.count_chunks() == chunk_total()
        assert reader.search_lexical("laptops", 1)[0].doc_id == "it/laptops.md"
        with pytest.raises(ValueError, match="lock"):
            reader.delete_documents(["it/laptops.md"])
    finally:
        writer.close()
        reader.close()


def test_drop_deletes_directory(tmp_path: Path) -> None:
    ix = EmbeddedHybridIndex(tmp_path / "corpus", dim=DIM, name="corpus")
    load_all(ix)
    ix.drop()
    assert not (tmp_path / "corpus").exists()


def test_factory_opens_embedded_index_under_index_dir(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    ix = open_index(settings, "handbook", DIM)
    try:
        assert isinstance(ix, EmbeddedHybridIndex)
        assert ix.path == settings.index_dir / "handbook"
        assert ix.name == "handbook"
    finally:
        ix.close()
    for bad in ("../escape", "a/b", "", ".hidden"):
        with pytest.raises(ValueError):
            validate_corpus_name(bad)
