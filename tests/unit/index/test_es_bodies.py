"""Request shapes sent to Elasticsearch, verified without a server.

The pure body builders are compared with literal dicts; the snapshot/alias protocol runs against a
small recording client that keeps just enough state (indices, aliases) to answer existence checks,
so the exact sequence and bodies of the calls (notably the single ``update_aliases``) are asserted.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragtrail.config import Settings
from ragtrail.index.elasticsearch import (
    SEED_SCRIPT,
    ElasticsearchHybridIndex,
    IndexWriteError,
    alias_name,
    alias_swap_actions,
    bulk_upsert_actions,
    delete_by_doc_query,
    index_mapping,
    knn_query,
    knn_score_to_cosine,
    lexical_query,
    make_client,
    physical_index_name,
    sanitise_index_name,
)
from ragtrail.index.factory import open_index
from ragtrail.records import Chunk

DIM = 4


def chunk(
    cid: str,
    doc: str,
    text: str = "body",
    headings: tuple[str, ...] = (),
    language: str = "en",
) -> Chunk:
    return Chunk(
        chunk_id=cid,
        doc_id=doc,
        ordinal=0,
        text=text,
        headings=headings,
        n_tokens=1,
        language=language,
    )


# --------------------------------------------------------------------------- body builders


def test_index_mapping_shape() -> None:
    mapping = index_mapping(384, meta={"ragtrail_alias": "ragtrail-x"})
    languages = {k: v for k, v in mapping["properties"].items() if k.startswith("text_")}
    assert languages["text_en"] == {"type": "text", "analyzer": "english"}
    assert languages["text_fr"] == {"type": "text", "analyzer": "french"}
    assert languages["text_cjk"] == {"type": "text", "analyzer": "cjk"}
    assert languages["text_und"] == {"type": "text", "analyzer": "standard"}
    assert len(languages) == 36
    assert {k: v for k, v in mapping["properties"].items() if k not in languages} == {
        "chunk_id": {"type": "keyword"},
        "doc_id": {"type": "keyword"},
        "language": {"type": "keyword"},
        "analysis": {"type": "keyword"},
        "text": {"type": "text", "index": False},
        "embedding": {
            "type": "dense_vector",
            "dims": 384,
            "index": True,
            "similarity": "cosine",
            "index_options": {"type": "hnsw"},
        },
    }
    assert {k: v for k, v in mapping.items() if k != "properties"} == {
        "dynamic": "strict",
        "_source": {"excludes": ["text_*"]},
        "_meta": {"ragtrail_alias": "ragtrail-x"},
    }
    assert index_mapping(384) == {k: v for k, v in mapping.items() if k != "_meta"}
    dot = index_mapping(8, "dot_product", index_options={"type": "int8_hnsw"})
    assert dot["properties"]["embedding"]["similarity"] == "dot_product"
    assert dot["properties"]["embedding"]["index_options"] == {"type": "int8_hnsw"}
    assert "_meta" not in dot
    with pytest.raises(ValueError):
        index_mapping(8, "hamming")
    with pytest.raises(ValueError):
        index_mapping(0)


def test_bulk_upsert_actions() -> None:
    chunks = [chunk("d1#0", "d1", "Leave lasts 16 weeks.", ("HR", "Leave")), chunk("d1#1", "d1")]
    vectors = np.array([[3.0, 4.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    actions = list(bulk_upsert_actions("ragtrail-hr-s1", chunks, vectors))
    assert actions[0] == {
        "_op_type": "index",
        "_index": "ragtrail-hr-s1",
        "_id": "d1#0",
        "_source": {
            "chunk_id": "d1#0",
            "doc_id": "d1",
            "language": "en",
            "analysis": "en",
            "text": "HR > Leave\nLeave lasts 16 weeks.",
            "text_en": "HR > Leave\nLeave lasts 16 weeks.",
            "embedding": pytest.approx([0.6, 0.8, 0.0, 0.0]),
        },
    }
    assert actions[1]["_source"]["embedding"] == [0.0, 0.0, 0.0, 1.0]
    assert all(type(x) is float for x in actions[1]["_source"]["embedding"])
    with pytest.raises(ValueError):
        list(bulk_upsert_actions("i", chunks, vectors[:1]))


def test_bulk_actions_put_each_language_in_its_analyzer_field() -> None:
    chunks = [
        chunk("f#0", "f", "Les paquets.", language="fr"),
        chunk("j#0", "j", "東京", language="ja"),
        chunk("x#0", "x", "Balíčky.", language="cs"),
        chunk("u#0", "u", "apt", language="und"),
        chunk("q#0", "q", "Kuna", language="sw"),
    ]
    sources = [a["_source"] for a in bulk_upsert_actions("i", chunks, np.ones((5, DIM)))]
    fields = [
        (s["language"], s["analysis"], [k for k in s if k.startswith("text_")]) for s in sources
    ]
    assert fields == [
        ("fr", "fr", ["text_fr"]),
        ("ja", "cjk", ["text_cjk"]),
        ("cs", "cs", ["text_cs"]),
        ("und", "und", ["text_und"]),
        ("sw", "und", ["text_und"]),  # no Swahili analyzer: the neutral one
    ]
    mapped = set(index_mapping(DIM)["properties"])
    assert all(f in mapped for _, _, names in fields for f in names)


def test_delete_lexical_and_knn_bodies() -> None:
    assert delete_by_doc_query(["a", "b", "a"]) == {"terms": {"doc_id": ["a", "b"]}}
    hostile = 'title:foo AND ("x'
    assert lexical_query(hostile, 7) == {
        "query": {"multi_match": {"query": hostile, "fields": ["text_*"]}},
        "size": 7,
        "_source": ["chunk_id", "doc_id", "text"],
    }
    assert knn_query(np.array([0.0, 2.0, 0.0, 0.0]), 5, 50) == {
        "knn": {
            "field": "embedding",
            "query_vector": [0.0, 1.0, 0.0, 0.0],
            "k": 5,
            "num_candidates": 50,
        },
        "size": 5,
        "_source": ["chunk_id", "doc_id", "text"],
    }
    assert knn_query([1.0, 0, 0, 0], 20, 3)["knn"]["num_candidates"] == 20
    assert knn_query([1.0, 0, 0, 0], 20, 10**6)["knn"]["num_candidates"] == 10_000


def test_names_and_score_conversion() -> None:
    assert alias_name("HR Docs") == "ragtrail-hr-docs"
    assert (
        physical_index_name("ragtrail-hr", "2024-06-01T02:00:00Z")
        == "ragtrail-hr-2024-06-01t02-00-00z"
    )
    assert sanitise_index_name("_Weird*Name?") == "weird-name-"
    with pytest.raises(ValueError):
        sanitise_index_name("***")
    assert knn_score_to_cosine(0.75, "cosine") == 0.5
    assert knn_score_to_cosine(0.75, "max_inner_product") == 0.75
    assert alias_swap_actions("al", ["al-1", "al-0"], "al-2") == [
        {"remove": {"index": "al-0", "alias": "al"}},
        {"remove": {"index": "al-1", "alias": "al"}},
        {"add": {"index": "al-2", "alias": "al"}},
    ]


# --------------------------------------------------------------------------- recording client


class RecordingIndices:
    def __init__(self, client: RecordingClient) -> None:
        self.c = client

    def exists_alias(self, *, name: str) -> bool:
        self.c.calls.append(("indices.exists_alias", {"name": name}))
        return any(name in a for a in self.c.aliases.values())

    def get_alias(self, *, name: str) -> dict[str, Any]:
        self.c.calls.append(("indices.get_alias", {"name": name}))
        return {i: {"aliases": {name: {}}} for i, a in self.c.aliases.items() if name in a}

    def exists(self, *, index: str) -> bool:
        self.c.calls.append(("indices.exists", {"index": index}))
        return index in self.c.mappings

    def create(self, *, index: str, mappings: dict, settings: dict) -> dict:
        self.c.calls.append(
            ("indices.create", {"index": index, "mappings": mappings, "settings": settings})
        )
        self.c.mappings[index] = mappings
        self.c.aliases[index] = set()
        return {"acknowledged": True}

    def delete(self, *, index: str) -> dict:
        self.c.calls.append(("indices.delete", {"index": index}))
        for name in index.split(","):
            self.c.mappings.pop(name)
            self.c.aliases.pop(name)
        return {"acknowledged": True}

    def refresh(self, *, index: str) -> dict:
        self.c.calls.append(("indices.refresh", {"index": index}))
        return {}

    def update_aliases(self, *, actions: list[dict]) -> dict:
        self.c.calls.append(("indices.update_aliases", {"actions": actions}))
        for action in actions:
            ((op, spec),) = action.items()
            target = self.c.aliases[spec["index"]]
            target.add(spec["alias"]) if op == "add" else target.discard(spec["alias"])
        return {"acknowledged": True}

    def get_mapping(self, *, index: str) -> dict:
        self.c.calls.append(("indices.get_mapping", {"index": index}))
        prefix = index.rstrip("*")
        return {n: {"mappings": m} for n, m in self.c.mappings.items() if n.startswith(prefix)}


class RecordingClient:
    """Records (method, kwargs); ``search_response`` is returned by search()."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.mappings: dict[str, dict] = {}
        self.aliases: dict[str, set[str]] = {}
        self.indices = RecordingIndices(self)
        self.search_response: dict[str, Any] = {"hits": {"hits": []}}
        self.bulk_batches: list[list[dict]] = []

    def reindex(self, **kwargs: Any) -> dict:
        self.calls.append(("reindex", kwargs))
        return {"failures": []}

    def delete_by_query(self, **kwargs: Any) -> dict:
        self.calls.append(("delete_by_query", kwargs))
        return {"deleted": 0, "failures": []}

    def search(self, **kwargs: Any) -> dict:
        self.calls.append(("search", kwargs))
        return self.search_response

    def count(self, **kwargs: Any) -> dict:
        self.calls.append(("count", kwargs))
        return {"count": 3}


def recording_bulk(client: RecordingClient, actions: Iterable[dict], chunk_size: int) -> list:
    batch = list(actions)
    client.calls.append(("bulk", {"n": len(batch), "chunk_size": chunk_size}))
    client.bulk_batches.append(batch)
    return []


def names(client: RecordingClient) -> list[str]:
    return [name for name, _ in client.calls]


@pytest.fixture
def client() -> RecordingClient:
    return RecordingClient()


def make_index(client: RecordingClient, **kw: Any) -> ElasticsearchHybridIndex:
    return ElasticsearchHybridIndex(
        client, "HR", DIM, chunk_size=2, bulk_writer=recording_bulk, **kw
    )


def test_first_snapshot_creates_index_and_adds_alias(client: RecordingClient) -> None:
    ix = make_index(client)
    assert ix.alias == "ragtrail-hr"
    assert ix.begin_snapshot("S1") == "ragtrail-hr-s1"
    assert names(client) == ["indices.exists_alias", "indices.exists", "indices.create"]
    created = client.calls[-1][1]
    assert created["settings"] == {"number_of_shards": 1, "number_of_replicas": 0}
    assert created["mappings"]["_meta"]["ragtrail_alias"] == "ragtrail-hr"
    assert created["mappings"]["properties"]["embedding"]["dims"] == DIM

    client.calls.clear()
    ix.publish()
    assert client.calls == [
        ("indices.refresh", {"index": "ragtrail-hr-s1"}),
        ("indices.exists_alias", {"name": "ragtrail-hr"}),
        (
            "indices.update_aliases",
            {"actions": [{"add": {"index": "ragtrail-hr-s1", "alias": "ragtrail-hr"}}]},
        ),
    ]


def test_next_snapshot_reindexes_then_swaps_alias_atomically(client: RecordingClient) -> None:
    ix = make_index(client)
    ix.begin_snapshot("s1")
    ix.publish()
    client.calls.clear()

    ix.begin_snapshot("s2")
    assert client.calls[-1] == (
        "reindex",
        {
            "source": {"index": "ragtrail-hr-s1"},
            "dest": {"index": "ragtrail-hr-s2"},
            "script": {"lang": "painless", "source": SEED_SCRIPT},
            "wait_for_completion": True,
            "refresh": True,
        },
    )
    client.calls.clear()
    deleted = ix.publish(keep=1)
    swaps = [kw for name, kw in client.calls if name == "indices.update_aliases"]
    assert swaps == [
        {
            "actions": [
                {"remove": {"index": "ragtrail-hr-s1", "alias": "ragtrail-hr"}},
                {"add": {"index": "ragtrail-hr-s2", "alias": "ragtrail-hr"}},
            ]
        }
    ]
    assert deleted == ["ragtrail-hr-s1"]
    assert names(client)[-1] == "indices.delete"
    assert client.calls[-1][1] == {"index": "ragtrail-hr-s1"}
    assert client.aliases == {"ragtrail-hr-s2": {"ragtrail-hr"}}


def test_prune_ignores_foreign_indices_with_same_prefix(client: RecordingClient) -> None:
    other = ElasticsearchHybridIndex(client, "hr-v2", DIM, bulk_writer=recording_bulk)
    other.begin_snapshot("a")  # ragtrail-hr-v2-a: matches ragtrail-hr-* but is not ours
    other.publish()
    ix = make_index(client)
    for snap in ("s1", "s2", "s3"):
        ix.begin_snapshot(snap)
        ix.publish(keep=2)
    assert set(client.mappings) == {"ragtrail-hr-v2-a", "ragtrail-hr-s2", "ragtrail-hr-s3"}


def test_republishing_and_writes_without_snapshot_are_refused(client: RecordingClient) -> None:
    ix = make_index(client)
    with pytest.raises(RuntimeError, match="begin_snapshot"):
        ix.upsert_documents(["d"], [chunk("d#0", "d")], np.ones((1, DIM)))
    with pytest.raises(RuntimeError, match="begin_snapshot"):
        ix.publish()
    ix.begin_snapshot("s1")
    ix.publish()
    with pytest.raises(ValueError, match="already published"):
        ix.begin_snapshot("s1")


def test_failed_run_snapshot_is_rebuilt_or_resumed(client: RecordingClient) -> None:
    ix = make_index(client)
    ix.begin_snapshot("s1")  # never published: the run "crashed"
    client.calls.clear()
    ix.begin_snapshot("s1")
    assert names(client) == [
        "indices.exists_alias",
        "indices.exists",
        "indices.delete",
        "indices.create",
    ]
    client.calls.clear()
    assert ix.begin_snapshot("s1", resume=True) == "ragtrail-hr-s1"
    assert "indices.create" not in names(client)


def test_upsert_deletes_then_bulk_indexes_into_snapshot(client: RecordingClient) -> None:
    ix = make_index(client)
    ix.begin_snapshot("s1")
    client.calls.clear()
    chunks = [chunk("d1#0", "d1"), chunk("d1#1", "d1"), chunk("d2#0", "d2")]
    ix.upsert_documents(["d1", "d2"], chunks, np.eye(3, DIM))
    assert client.calls[0] == (
        "delete_by_query",
        {
            "index": "ragtrail-hr-s1",
            "query": {"terms": {"doc_id": ["d1", "d2"]}},
            "conflicts": "proceed",
            "wait_for_completion": True,
            "refresh": False,
        },
    )
    assert client.calls[1] == ("bulk", {"n": 3, "chunk_size": 2})
    assert {a["_index"] for a in client.bulk_batches[0]} == {"ragtrail-hr-s1"}
    assert [a["_id"] for a in client.bulk_batches[0]] == ["d1#0", "d1#1", "d2#0"]

    # unrefreshed writes are refreshed before the next delete_by_query can miss them
    client.calls.clear()
    ix.delete_documents(["d1"])
    assert names(client) == ["indices.refresh", "delete_by_query"]
    with pytest.raises(ValueError, match="not listed"):
        ix.upsert_documents(["d3"], [chunk("d1#0", "d1")], np.ones((1, DIM)))


def test_bulk_failures_raise_with_item_details(client: RecordingClient) -> None:
    def failing(_c: Any, actions: Iterable[dict], _n: int) -> list[dict]:
        list(actions)
        return [{"index": {"_id": "d1#0", "status": 400, "error": {"type": "mapper_parsing"}}}]

    ix = ElasticsearchHybridIndex(client, "hr", DIM, bulk_writer=failing)
    ix.begin_snapshot("s1")
    with pytest.raises(IndexWriteError, match=r"d1#0.*mapper_parsing") as err:
        ix.upsert_documents(["d1"], [chunk("d1#0", "d1")], np.ones((1, DIM)))
    assert err.value.failures[0]["index"]["status"] == 400


def test_searches_use_alias_and_convert_scores(client: RecordingClient) -> None:
    ix = make_index(client)
    assert ix.search_lexical("leave", 3) == []  # nothing published: no request sent
    assert "search" not in names(client)
    ix.begin_snapshot("s1")
    ix.publish()
    client.search_response = {
        "hits": {
            "hits": [
                {
                    "_id": "d1#0",
                    "_score": 0.9,
                    "_source": {"chunk_id": "d1#0", "doc_id": "d1", "text": "t"},
                }
            ]
        }
    }
    [hit] = ix.search_dense(np.array([1.0, 0, 0, 0]), 3)
    assert hit.chunk_id == "d1#0"
    assert hit.score == pytest.approx(0.8)
    name, kwargs = client.calls[-1]
    assert name == "search"
    assert kwargs["index"] == "ragtrail-hr"
    assert kwargs["knn"]["num_candidates"] == 30
    [hit] = ix.search_lexical("AND (", 3)
    assert hit.score == 0.9
    assert client.calls[-1][1]["query"] == {"multi_match": {"query": "AND (", "fields": ["text_*"]}}
    assert ix.search_lexical("  ", 3) == []
    with pytest.raises(ValueError, match="dim"):
        ix.search_dense(np.ones(DIM + 1), 3)


def test_search_unpublished_and_reconciliation_target(client: RecordingClient) -> None:
    ix = make_index(client, search_unpublished=True)
    ix.begin_snapshot("s1")
    ix.publish()
    ix.begin_snapshot("s2")
    ix.search_lexical("x", 1)
    assert client.calls[-1][1]["index"] == "ragtrail-hr-s2"
    assert ix.count_chunks() == 3
    assert client.calls[-1] == ("count", {"index": "ragtrail-hr-s2"})
    client.search_response = {
        "hits": {"hits": []},
        "aggregations": {"docs": {"buckets": [{"key": {"doc_id": "d1"}}], "after_key": None}},
    }
    assert ix.document_ids() == {"d1"}


def test_make_client_passes_auth_timeouts_and_retries(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import elasticsearch

    for var in (
        "RAGTRAIL_ES_URL",
        "RAGTRAIL_ES_API_KEY",
        "RAGTRAIL_ES_USERNAME",
        "RAGTRAIL_ES_PASSWORD",
    ):
        monkeypatch.delenv(var, raising=False)
    seen: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(elasticsearch, "Elasticsearch", lambda *a, **kw: seen.append((a, kw)))
    make_client(Settings(home=tmp_path, es_url="https://es:9200", es_api_key="k"))
    make_client(Settings(home=tmp_path, es_url="https://es:9200", es_username="u", es_password="p"))
    assert seen[0] == (
        ("https://es:9200",),
        {"request_timeout": 60.0, "retry_on_timeout": True, "max_retries": 3, "api_key": "k"},
    )
    assert seen[1][1]["basic_auth"] == ("u", "p")
    with pytest.raises(ValueError, match="es_url"):
        make_client(Settings(home=tmp_path))


def test_factory_builds_elasticsearch_backend(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path,
        index_backend="elasticsearch",
        es_url="http://127.0.0.1:9",
        es_bulk_chunk_size=7,
    )
    ix = open_index(settings, "hr", DIM)  # constructing a client does not connect
    assert isinstance(ix, ElasticsearchHybridIndex)
    assert (ix.alias, ix.chunk_size, ix.dim) == ("ragtrail-hr", 7, DIM)
    ix.close()
