"""Relevance mixtures: spec parsing, seeded determinism, passage kinds, the ground-document
exclusion rule, the audit of retriever-chosen relevant chunks, input errors."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import pytest

from ragtrail.evaluate.citations.mixtures import (
    GROUND_CHUNKS,
    MIXTURE_TYPES,
    NO_RELEVANT,
    RETRIEVER_TOP,
    MixtureCorpus,
    MixtureInputError,
    MixtureSpec,
    build_mixtures,
    stable_seed,
)
from ragtrail.records import Chunk, QAItem, SearchHit

QUESTION = "when does the harbour ferry leave the pier"


def _chunk(chunk_id: str, text: str) -> Chunk:
    return Chunk(chunk_id, chunk_id[0], int(chunk_id[1:]), text, (), len(text.split()))


# Documents a..f, three chunks each. a0 is the ground chunk; a1 overlaps it (shares its window
# and is the question's nearest neighbour after a0); b*, c* mention some question words.
CHUNKS = [
    _chunk("a0", "the harbour ferry leaves the pier every forty minutes"),
    _chunk("a1", "ferry leaves the pier every forty minutes from six"),
    _chunk("a2", "tickets cost three euros"),
    _chunk("b0", "the harbour is old"),
    _chunk("b1", "the ferry company"),
    _chunk("b2", "when the pier was built"),
    _chunk("c0", "the harbour lighthouse"),
    _chunk("c1", "the ferry timetable"),
    _chunk("c2", "the pier kiosk"),
    *[_chunk(f"{d}{i}", f"unrelated text {d} {i}") for d in "def" for i in range(3)],
]


def overlap_search(
    chunks: Sequence[Chunk],
) -> Callable[[Sequence[str], int], list[list[SearchHit]]]:
    """A search over ``chunks`` where nearest = most shared words, ties by chunk id: a stand-in
    for embedding similarity."""

    def search(questions: Sequence[str], k: int) -> list[list[SearchHit]]:
        out = []
        for q in questions:
            words = set(q.split())
            ranked = sorted(chunks, key=lambda c: (-len(words & set(c.text.split())), c.chunk_id))
            out.append([SearchHit(c.chunk_id, c.doc_id, 1.0, c.text) for c in ranked[:k]])
        return out

    return search


_overlap_search = overlap_search(CHUNKS)


HYBRID_ORDER = ["c1", "b2", "a0", "b0", "d0"]


def _scripted_hybrid(questions: Sequence[str], k: int) -> list[list[SearchHit]]:
    by_id = {c.chunk_id: c for c in CHUNKS}
    hits = [SearchHit(cid, by_id[cid].doc_id, 1.0) for cid in HYBRID_ORDER[:k]]
    return [list(hits) for _ in questions]


CORPUS = MixtureCorpus(CHUNKS, _overlap_search, _scripted_hybrid)
ITEM = QAItem("q1", QUESTION, "fact", ground_doc_ids=("a",), ground_chunk_ids=("a0",))


def test_spec_parses_ranges_and_fixed_counts() -> None:
    assert MixtureSpec.parse("1-3/3/3") == MixtureSpec(1, 3, 3, 3)
    assert MixtureSpec.parse(" 2 / 4 / 0 ") == MixtureSpec(2, 2, 4, 0)
    assert MixtureSpec.parse("1-3/3/3").text == "1-3/3/3"
    assert MixtureSpec.parse("2/3/3").text == "2/3/3"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1-3/3", "expected"),
        ("a/b/c", "expected"),
        ("", "expected"),
        ("1-3/-1/3", "expected"),
        ("3-1/3/3", "below the minimum"),
        ("0/3/3", "minimum must be >= 1"),
    ],
)
def test_bad_spec_strings_are_refused_clearly(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MixtureSpec.parse(text)


def test_stable_seed_is_fixed_across_processes() -> None:
    # The first 8 bytes of sha256('[13,"q1","all"]'), unlike Python's salted hash().
    assert stable_seed(13, "q1", "all") != stable_seed(14, "q1", "all")
    assert stable_seed(13, "q1", "all") == int.from_bytes(
        hashlib.sha256(b'[13,"q1","all"]').digest()[:8], "big"
    )


def test_same_seed_same_bytes_other_seed_other_mixtures() -> None:
    items = [
        ITEM,
        QAItem(
            "q2", "the ferry timetable", "fact", ground_doc_ids=("c",), ground_chunk_ids=("c1",)
        ),
    ]
    first = build_mixtures(items, CORPUS, seed=7).to_json()
    again = build_mixtures(items, CORPUS, seed=7).to_json()
    assert first.encode() == again.encode()
    assert build_mixtures(items, CORPUS, seed=8).to_json() != first


def test_kinds_counts_and_numbering() -> None:
    built = build_mixtures([ITEM], CORPUS, spec=MixtureSpec.parse("1/3/3"), seed=3)
    by_type = {m.mixture_type: m for m in built.mixtures}
    assert set(by_type) == set(MIXTURE_TYPES)
    for mixture in built.mixtures:
        assert [p.number for p in mixture.passages] == list(range(1, len(mixture.passages) + 1))
        assert mixture.relevant_source == GROUND_CHUNKS
        relevant = [p.chunk_id for p in mixture.passages if p.kind == "relevant"]
        assert relevant == ["a0"]
    assert sorted(by_type["relevant+irrelevant"].kinds) == ["irrelevant"] * 3 + ["relevant"]
    assert sorted(by_type["relevant+seemingly"].kinds) == ["relevant"] + ["seemingly"] * 3
    assert sorted(by_type["all"].kinds) == ["irrelevant"] * 3 + ["relevant"] + ["seemingly"] * 3
    # Seemingly relevant = from the 10 nearest outside document a: b0..c2 and d0 by overlap.
    nearest_outside_a = [h.chunk_id for h in _overlap_search([QUESTION], 30)[0]]
    pool = [c for c in nearest_outside_a if not c.startswith("a")][:10]
    for mixture in built.mixtures:
        for p in mixture.passages:
            if p.kind == "seemingly":
                assert p.chunk_id in pool
            if p.kind == "irrelevant":
                assert p.doc_id != "a" and p.chunk_id not in pool


def test_relevant_passages_are_the_same_in_every_mixture_type() -> None:
    item = QAItem(
        "q3", QUESTION, "summary", ground_doc_ids=("a", "c"), ground_chunk_ids=("a0", "c1", "c2")
    )
    built = build_mixtures([item], CORPUS, seed=5)
    sets = {
        frozenset(p.chunk_id for p in m.passages if p.kind == "relevant") for m in built.mixtures
    }
    assert len(sets) == 1
    assert 1 <= len(next(iter(sets))) <= 3


def test_overlapping_chunk_of_a_ground_document_is_never_seemingly_relevant() -> None:
    # a1 repeats most of a0 (overlapping windows) and is the nearest non-ground chunk.
    spec = MixtureSpec.parse("1/0/1")
    built = build_mixtures([ITEM], CORPUS, spec=spec, seed=0, seemingly_pool=1)
    seemingly = {p.chunk_id for m in built.mixtures for p in m.passages if p.kind == "seemingly"}
    assert seemingly == {"b2"}  # the nearest chunk outside document a (3 shared words)
    for seed in range(20):
        built = build_mixtures([ITEM], CORPUS, seed=seed)
        drawn = {p.chunk_id for m in built.mixtures for p in m.passages if p.kind != "relevant"}
        assert not drawn & {"a1", "a2"}
    unsafe = build_mixtures(
        [ITEM], CORPUS, spec=spec, seed=0, seemingly_pool=1, exclude_ground_documents=False
    )
    assert {p.chunk_id for m in unsafe.mixtures for p in m.passages if p.kind == "seemingly"} == {
        "a1"
    }


def test_document_level_item_takes_the_retrievers_top_chunks_and_records_them() -> None:
    item = QAItem("q4", "where is the harbour", "fact", ground_doc_ids=("b",))
    built = build_mixtures([item], CORPUS, spec=MixtureSpec.parse("2/3/3"), seed=1)
    for mixture in built.mixtures:
        assert mixture.relevant_source == RETRIEVER_TOP
        assert mixture.relevant_ranks == (2, 4)  # b2 at rank 2, b0 at rank 4 of HYBRID_ORDER
        relevant = {p.chunk_id for p in mixture.passages if p.kind == "relevant"}
        assert relevant == {"b2", "b0"}
        assert all(p.doc_id != "b" for p in mixture.passages if p.kind != "relevant")
        assert mixture.as_dict()["relevant_ranks"] == [2, 4]


def test_item_whose_documents_the_retriever_misses_is_skipped_with_a_reason() -> None:
    item = QAItem("q5", "about e", "fact", ground_doc_ids=("e",))
    built = build_mixtures([item, ITEM], CORPUS, seed=1)
    assert [s.qid for s in built.skipped] == ["q5"]
    assert "['e']" in built.skipped[0].reason
    assert {m.qid for m in built.mixtures} == {"q1"}


def test_unanswerable_item_has_only_distractors() -> None:
    item = QAItem("q6", QUESTION, "unanswerable")
    built = build_mixtures([item], CORPUS, seed=2)
    for mixture in built.mixtures:
        assert mixture.relevant_source == NO_RELEVANT
        assert not mixture.answerable
        assert "relevant" not in mixture.kinds
        assert len(mixture.passages) == (6 if mixture.mixture_type == "all" else 3)


def test_every_input_problem_is_listed_with_its_row() -> None:
    items = [
        ITEM,
        QAItem("q1", QUESTION, "fact", ground_doc_ids=("a",), ground_chunk_ids=("a0",)),
        QAItem("q7", QUESTION, "fact", ground_doc_ids=("zz",), ground_chunk_ids=("zz9",)),
        QAItem("q8", " ", "fact"),
    ]
    with pytest.raises(MixtureInputError) as err:
        build_mixtures(items, CORPUS, types=("all", "bogus"))  # type: ignore[arg-type]
    message = str(err.value)
    assert "unknown mixture type 'bogus'" in message
    assert "row 2: qid 'q1' repeats row 1" in message
    assert "row 4 (q8): empty question" in message
    assert "row 4 (q8): answerable item without ground context" in message
    assert "q7" not in message  # a ground context the corpus lacks is no input error...


def test_items_whose_ground_the_corpus_lacks_are_skipped_and_the_rest_evaluated() -> None:
    stale = [
        QAItem("q7", QUESTION, "fact", ground_doc_ids=("zz",), ground_chunk_ids=("zz9",)),
        QAItem("q9", QUESTION, "fact", ground_doc_ids=("zz",)),
    ]
    built = build_mixtures([ITEM, *stale], CORPUS, types=("all",))
    assert [m.qid for m in built.mixtures] == [ITEM.qid]  # ...it is skipped with its reason
    assert [(s.qid, s.reason) for s in built.skipped] == [
        ("q7", "ground chunks not in the corpus: ['zz9']"),
        ("q9", "ground documents not in the corpus: ['zz']"),
    ]
