"""The full HybridIndex protocol against a live Elasticsearch (RAGTRAIL_ES_URL), alias swap included.

Skipped when no server is configured; start one with the compose file under docker/.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from ragtrail.config import Settings
from ragtrail.index.elasticsearch import ElasticsearchHybridIndex, make_client
from ragtrail.records import Chunk

pytestmark = pytest.mark.es

DIM = 8


def vector_for(chunk_id: str) -> np.ndarray:
    rng = np.random.default_rng(list(chunk_id.encode()))
    v = rng.normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def chunks_for(
    doc_id: str, texts: list[str], version: str = "v1", language: str = "en"
) -> list[Chunk]:
    return [
        Chunk(f"{doc_id}#{version}-{i}", doc_id, i, t, (), len(t.split()), language=language)
        for i, t in enumerate(texts)
    ]


def upsert(
    ix: ElasticsearchHybridIndex,
    doc_id: str,
    texts: list[str],
    version: str = "v1",
    language: str = "en",
) -> None:
    chunks = chunks_for(doc_id, texts, version, language)
    ix.upsert_documents([doc_id], chunks, np.stack([vector_for(c.chunk_id) for c in chunks]))


@pytest.fixture
def live_index() -> Iterator[ElasticsearchHybridIndex]:
    url = os.environ.get("RAGTRAIL_ES_URL")
    if not url:
        pytest.skip("no Elasticsearch server: set RAGTRAIL_ES_URL (see docker/)")
    client = make_client(Settings(es_url=url))
    corpus = f"test-{uuid.uuid4().hex[:8]}"
    ix = ElasticsearchHybridIndex(client, corpus, DIM, chunk_size=2)
    try:
        yield ix
    finally:
        for name in ix.snapshot_indices():
            client.indices.delete(index=name)
        client.close()


def test_full_protocol_with_alias_swap(live_index: ElasticsearchHybridIndex) -> None:
    ix = live_index
    assert ix.search_lexical("anything", 5) == []  # nothing published yet

    ix.begin_snapshot("s1")
    upsert(ix, "travel.md", ["Travel expenses are reimbursed within thirty days.", "Book trains."])
    upsert(ix, "leave.md", ["Parental leave lasts sixteen weeks."])
    upsert(ix, "leave.md", ["Parental leave lasts sixteen weeks."])  # idempotent re-upsert
    ix.commit()
    assert ix.count_chunks() == 3
    assert ix.document_ids() == {"travel.md", "leave.md"}
    assert ix.search_lexical("leave", 5) == []  # alias not published yet
    ix.publish()

    lex = ix.search_lexical("reimbursing expenses", 5)
    assert lex[0].chunk_id == "travel.md#v1-0"
    for hostile in ("AND OR (", '"unterminated', "title:foo", "*", "[1 TO"):
        assert isinstance(ix.search_lexical(hostile, 5), list)
    dense = ix.search_dense(vector_for("leave.md#v1-0"), 3)
    assert dense[0].chunk_id == "leave.md#v1-0"
    assert dense[0].score == pytest.approx(1.0, abs=1e-3)

    s1 = ix.published_indices()
    ix.begin_snapshot("s2")  # seeded from s1 by _reindex
    assert ix.count_chunks() == 3
    ix.delete_documents(["travel.md"])
    upsert(ix, "leave.md", ["Parental leave now lasts twenty weeks."], version="v2")
    upsert(ix, "it.md", ["Laptops are replaced every four years."])
    ix.commit()
    assert ix.document_ids() == {"leave.md", "it.md"}
    assert ix.count_chunks() == 2
    # readers still see s1 until publication
    assert ix.search_lexical("reimbursed", 5)[0].doc_id == "travel.md"

    deleted = ix.publish(keep=1)
    assert deleted == s1
    assert ix.published_indices() == [f"{ix.alias}-s2"]
    assert ix.search_lexical("reimbursed", 5) == []
    assert [h.chunk_id for h in ix.search_lexical("parental leave", 5)] == ["leave.md#v2-0"]
    assert ix.search_dense(vector_for("it.md#v1-0"), 1)[0].chunk_id == "it.md#v1-0"


def test_languages_are_analysed_apart_and_survive_the_seeding_reindex(
    live_index: ElasticsearchHybridIndex,
) -> None:
    ix = live_index
    ix.begin_snapshot("s1")
    french = "Les paquets sont installés par apt à partir des dépôts configurés."
    upsert(ix, "fr.html", [french], language="fr")
    upsert(ix, "en.html", ["Packages are installed by apt."], language="en")
    ix.commit()
    ix.publish()
    assert ix.search_lexical("un dépôt", 5)[0].doc_id == "fr.html"
    assert ix.search_lexical("un dépôt", 5)[0].text == french
    ix.begin_snapshot("s2")  # seeded by _reindex: the analysed copies are rebuilt by its script
    ix.commit()
    ix.publish()
    assert [h.doc_id for h in ix.search_lexical("un dépôt", 5)] == ["fr.html"]
    assert ix.search_lexical("installing", 5)[0].doc_id == "en.html"
