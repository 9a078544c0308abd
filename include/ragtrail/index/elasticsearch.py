"""Elasticsearch backend: one physical index per corpus snapshot, published by an alias swap.

Readers always search the alias ``ragtrail-<corpus>``; a nightly run writes into a fresh physical
index ``ragtrail-<corpus>-<snapshot>`` seeded from the published one with ``_reindex``, and
:meth:`ElasticsearchHybridIndex.publish` flips the alias in one atomic ``update_aliases`` call. A
failed run therefore never leaves readers looking at a half-updated index.

Languages: each chunk's text is indexed into the field of its language's built-in analyzer,
``text_<key>`` (:mod:`ragtrail.index.analysis`); those copies are left out of ``_source`` (one
stored copy of the text per chunk) and rebuilt by the seeding ``_reindex``'s script from
``text`` and ``analysis``. A physical index written before languages existed has no ``analysis``
and is seeded as English, which is how it was analysed. Lexical queries are ``multi_match`` over
``text_*``: each field analyses the query with its own analyzer.

The request bodies are built by pure functions (``index_mapping``, ``bulk_upsert_actions``,
``delete_by_doc_query``, ``lexical_query``, ``knn_query``) so their shape is unit-tested without a
server; ``tests/integration/test_elasticsearch_live.py`` runs the whole protocol against a real one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ragtrail.index.analysis import (
    ELASTICSEARCH_ANALYZERS,
    ELASTICSEARCH_KEYS,
    elasticsearch_key,
    text_field,
)
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import Chunk, SearchHit

if TYPE_CHECKING:
    from ragtrail.config import Settings

VECTOR_FIELD = "embedding"
SOURCE_FIELDS = ("chunk_id", "doc_id", "text")
MAX_NUM_CANDIDATES = 10_000
"""Elasticsearch's upper bound on ``knn.num_candidates``."""
_TERMS_BATCH = 10_000
"""doc ids per ``terms`` query, well below the default ``index.max_terms_count`` (65536)."""
_SIMILARITIES = ("cosine", "dot_product", "l2_norm", "max_inner_product")
LEGACY_ANALYSIS = "en"
"""The analysis of documents indexed before languages existed (one ``english`` text field)."""
SEED_SCRIPT = (
    "if (ctx._source.analysis == null) {"
    f" ctx._source.analysis = '{LEGACY_ANALYSIS}'; ctx._source.language = '{LEGACY_ANALYSIS}'; }}"
    " ctx._source['text_' + ctx._source.analysis] = ctx._source.text;"
)
"""Painless, run by the seeding ``_reindex`` on every document: restores the analysed copy of the
text that ``_source`` leaves out (and tags a document from before languages as English)."""

BulkWriter = Callable[[Any, Iterable[JsonObject], int], list[JsonObject]]
"""(client, actions, chunk_size) -> failed items; injectable so tests can record bulk calls."""


class IndexWriteError(RuntimeError):
    """Some bulk items were rejected; ``failures`` holds the per-item error records."""

    def __init__(self, message: str, failures: Sequence[JsonObject]) -> None:
        super().__init__(message)
        self.failures = list(failures)


# --------------------------------------------------------------------------- pure body builders


def sanitise_index_name(name: str) -> str:
    """Lowercase and replace characters Elasticsearch forbids in index/alias names.

    Allowed: a-z 0-9 . _ -; a name may not start with ``-``, ``_`` or ``+`` nor be ``.``/``..``.
    """
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).lstrip("-_+.")
    if not cleaned:
        raise ValueError(f"cannot derive an Elasticsearch index name from {name!r}")
    if len(cleaned.encode()) > 255:
        raise ValueError(f"index name too long (> 255 bytes): {cleaned!r}")
    return cleaned


def alias_name(corpus: str) -> str:
    """The stable name readers search: ``ragtrail-<corpus>``."""
    return sanitise_index_name(f"ragtrail-{corpus}")


def physical_index_name(alias: str, snapshot_id: str) -> str:
    """The snapshot's physical index: ``<alias>-<snapshot_id>``, sanitised."""
    return sanitise_index_name(f"{alias}-{snapshot_id}")


def index_mapping(
    dim: int,
    similarity: str = "cosine",
    *,
    meta: JsonObject | None = None,
    index_options: JsonObject | None = None,
) -> JsonObject:
    """Mappings: keyword ids and language, the text (stored, not indexed) and one text field per
    language analyzer (indexed, not stored), an indexed dense_vector.

    ``index_options`` defaults to plain (unquantised) HNSW so cosine scores match the embedded
    backend; ES 9 would otherwise pick a quantised format for dims >= 384. ``meta`` lands in
    ``_meta`` and marks which alias/snapshot the physical index belongs to.
    """
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if similarity not in _SIMILARITIES:
        raise ValueError(f"similarity must be one of {_SIMILARITIES}, got {similarity!r}")
    mapping: JsonObject = {
        "dynamic": "strict",
        "_source": {"excludes": ["text_*"]},
        "properties": {
            "chunk_id": {"type": "keyword"},
            "doc_id": {"type": "keyword"},
            "language": {"type": "keyword"},
            "analysis": {"type": "keyword"},
            "text": {"type": "text", "index": False},
            **{
                text_field(key): {"type": "text", "analyzer": ELASTICSEARCH_ANALYZERS[key]}
                for key in ELASTICSEARCH_KEYS
            },
            VECTOR_FIELD: {
                "type": "dense_vector",
                "dims": dim,
                "index": True,
                "similarity": similarity,
                "index_options": index_options or {"type": "hnsw"},
            },
        },
    }
    if meta:
        mapping["_meta"] = dict(meta)
    return mapping


def index_settings(shards: int = 1, replicas: int = 0) -> JsonObject:
    """Physical index settings; one shard keeps BM25 statistics global (comparable scores)."""
    return {"number_of_shards": shards, "number_of_replicas": replicas}


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    out = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0).astype(np.float32)


def bulk_upsert_actions(
    index: str, chunks: Sequence[Chunk], vectors: np.ndarray
) -> Iterator[JsonObject]:
    """One ``index`` action per chunk with ``_id = chunk_id`` (re-indexing overwrites); the text
    goes to ``text`` and to its language analyzer's field."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[0] != len(chunks):
        raise ValueError(f"need one vector row per chunk, got {vectors.shape} for {len(chunks)}")
    for chunk, vector in zip(chunks, _unit_rows(vectors), strict=True):
        key = elasticsearch_key(chunk.language)
        text = chunk.index_text()
        yield {
            "_op_type": "index",
            "_index": index,
            "_id": chunk.chunk_id,
            "_source": {
                "chunk_id": chunk.chunk_id,
                "doc_id": chunk.doc_id,
                "language": chunk.language,
                "analysis": key,
                "text": text,
                text_field(key): text,
                VECTOR_FIELD: [float(x) for x in vector],
            },
        }


def delete_by_doc_query(doc_ids: Sequence[str]) -> JsonObject:
    """Query matching every chunk of the given documents."""
    return {"terms": {"doc_id": list(dict.fromkeys(doc_ids))}}


def lexical_query(query: str, k: int) -> JsonObject:
    """BM25 search body: ``multi_match`` over every language field, each analysing the query with
    its own analyzer (a chunk is indexed in one of them); query syntax is never interpreted."""
    return {
        "query": {"multi_match": {"query": query, "fields": ["text_*"]}},
        "size": k,
        "_source": list(SOURCE_FIELDS),
    }


def knn_query(vector: np.ndarray | Sequence[float], k: int, num_candidates: int) -> JsonObject:
    """Approximate kNN search body; ``num_candidates`` is clamped to [k, 10000]."""
    vec = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(vec))
    if norm > 0:
        vec = vec / norm
    return {
        "knn": {
            "field": VECTOR_FIELD,
            "query_vector": [float(x) for x in vec],
            "k": k,
            "num_candidates": min(max(num_candidates, k), MAX_NUM_CANDIDATES),
        },
        "size": k,
        "_source": list(SOURCE_FIELDS),
    }


def alias_swap_actions(alias: str, old_indices: Sequence[str], new_index: str) -> list[dict]:
    """``update_aliases`` actions moving ``alias`` from ``old_indices`` to ``new_index``."""
    actions: list[JsonObject] = [
        {"remove": {"index": old, "alias": alias}}
        for old in sorted(old_indices)
        if old != new_index
    ]
    actions.append({"add": {"index": new_index, "alias": alias}})
    return actions


def knn_score_to_cosine(score: float, similarity: str) -> float:
    """Undo Elasticsearch's ``(1 + cos) / 2`` kNN score transform for cosine/dot_product."""
    return 2.0 * score - 1.0 if similarity in ("cosine", "dot_product") else score


# --------------------------------------------------------------------------- client and bulk


def make_client(settings: Settings, *, request_timeout: float = 60.0) -> Any:
    """Elasticsearch client from settings: URL, API key or basic auth, timeouts, retries."""
    from elasticsearch import Elasticsearch

    if not settings.es_url:
        raise ValueError("index_backend is 'elasticsearch' but es_url (RAGTRAIL_ES_URL) is unset")
    auth: JsonObject = {}
    if settings.es_api_key:
        auth["api_key"] = settings.es_api_key
    elif settings.es_username:
        auth["basic_auth"] = (settings.es_username, settings.es_password or "")
    return Elasticsearch(
        settings.es_url,
        request_timeout=request_timeout,
        retry_on_timeout=True,
        max_retries=3,
        **auth,
    )


def streaming_bulk_writer(
    client: Any, actions: Iterable[JsonObject], chunk_size: int
) -> list[JsonObject]:
    """Send actions with ``helpers.streaming_bulk`` (429s retried); return the failed items."""
    from elasticsearch import helpers

    failures: list[JsonObject] = []
    for ok, item in helpers.streaming_bulk(
        client,
        actions,
        chunk_size=chunk_size,
        raise_on_error=False,
        max_retries=3,
        initial_backoff=1,
    ):
        if not ok:
            failures.append(item)
    return failures


def _describe_failures(failures: Sequence[JsonObject], limit: int = 5) -> str:
    parts = []
    for item in failures[:limit]:
        op, info = next(iter(item.items()))
        error = info.get("error", info) if isinstance(info, dict) else info
        parts.append(f"{op} _id={info.get('_id') if isinstance(info, dict) else '?'}: {error}")
    more = f" (+{len(failures) - limit} more)" if len(failures) > limit else ""
    return "; ".join(parts) + more


# --------------------------------------------------------------------------- the backend


class ElasticsearchHybridIndex:
    """HybridIndex over Elasticsearch with snapshot-per-run and atomic alias publication.

    Call sequence for a run: :meth:`begin_snapshot` -> upsert/delete -> :meth:`commit` ->
    :meth:`publish`. Searches use the alias unless ``search_unpublished`` is set, in which case
    they see the snapshot being built. ``document_ids``/``count_chunks`` describe the snapshot being
    built when one is open (that is what a crashed run must reconcile), else the published one.
    """

    def __init__(
        self,
        client: Any,
        corpus: str,
        dim: int,
        *,
        name: str | None = None,
        chunk_size: int = 500,
        similarity: str = "cosine",
        num_candidates_factor: int = 10,
        shards: int = 1,
        replicas: int = 0,
        search_unpublished: bool = False,
        bulk_writer: BulkWriter | None = None,
    ) -> None:
        index_mapping(dim, similarity)  # validate early
        self.client = client
        self.corpus = corpus
        self.dim = dim
        self.name = name or corpus
        self.alias = alias_name(corpus)
        self.chunk_size = chunk_size
        self.similarity = similarity
        self.num_candidates_factor = num_candidates_factor
        self.shards = shards
        self.replicas = replicas
        self.search_unpublished = search_unpublished
        self._bulk_writer: BulkWriter = bulk_writer or streaming_bulk_writer
        self.write_index: str | None = None
        self.snapshot_id: str | None = None
        self._dirty = False

    # ------------------------------------------------------------------ snapshots

    def docs_to_repair(self) -> frozenset[str]:
        """Always empty: a crashed run's writes stay in an unpublished snapshot index, which the
        next ``begin_snapshot`` rebuilds, so searches never see a half-written document."""
        return frozenset()

    def published_indices(self) -> list[str]:
        """Physical indices the alias currently points at (normally exactly one)."""
        if not self.client.indices.exists_alias(name=self.alias):
            return []
        return sorted(dict(self.client.indices.get_alias(name=self.alias)).keys())

    def begin_snapshot(self, snapshot_id: str, *, resume: bool = False) -> str:
        """Create ``<alias>-<snapshot_id>`` seeded with the published documents; return its name.

        An unpublished index of the same name left by a failed run is deleted and rebuilt, unless
        ``resume`` is set (then it is reused as is). Re-opening the published index is refused.
        """
        target = physical_index_name(self.alias, snapshot_id)
        published = self.published_indices()
        if target in published:
            raise ValueError(f"snapshot {snapshot_id!r} ({target}) is already published")
        exists = bool(self.client.indices.exists(index=target))
        if exists and resume:
            self.write_index, self.snapshot_id = target, snapshot_id
            self._dirty = True  # unknown refresh state: refresh before the next delete_by_query
            return target
        if exists:
            self.client.indices.delete(index=target)
        meta = {"ragtrail_alias": self.alias, "snapshot_id": snapshot_id, "created_ms": _now_ms()}
        self.client.indices.create(
            index=target,
            mappings=index_mapping(self.dim, self.similarity, meta=meta),
            settings=index_settings(self.shards, self.replicas),
        )
        if published:
            resp = self.client.reindex(
                source={"index": ",".join(published)},
                dest={"index": target},
                script={"lang": "painless", "source": SEED_SCRIPT},
                wait_for_completion=True,
                refresh=True,
            )
            failures = list(dict(resp).get("failures") or [])
            if failures:
                raise IndexWriteError(f"reindex into {target} failed: {failures[:5]}", failures)
        self.write_index, self.snapshot_id = target, snapshot_id
        self._dirty = False
        return target

    def publish(self, keep: int | None = None) -> list[str]:
        """Atomically point the alias at the snapshot; optionally delete older snapshots.

        ``keep`` = number of this alias's physical indices to retain, newest first, the just
        published one included (e.g. 2 keeps one rollback target). Returns the deleted names.
        """
        target = self._require_snapshot()
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.commit()
        actions = alias_swap_actions(self.alias, self.published_indices(), target)
        self.client.indices.update_aliases(actions=actions)
        self.write_index = self.snapshot_id = None
        return self.prune(keep, protect=target) if keep is not None else []

    def snapshot_indices(self) -> list[str]:
        """This alias's physical indices (recognised by ``_meta``), oldest first."""
        pattern = f"{self.alias}-*"
        found = dict(self.client.indices.get_mapping(index=pattern))
        owned = []
        for index_name, body in found.items():
            meta = (body.get("mappings") or {}).get("_meta") or {}
            if meta.get("ragtrail_alias") == self.alias:
                owned.append((int(meta.get("created_ms", 0)), index_name))
        return [n for _, n in sorted(owned)]

    def prune(self, keep: int, *, protect: str | None = None) -> list[str]:
        """Delete all but the newest ``keep`` snapshot indices, never a published/protected one."""
        published = set(self.published_indices())
        candidates = self.snapshot_indices()
        doomed = [
            n
            for n in candidates[: max(len(candidates) - keep, 0)]
            if n not in published | {protect}
        ]
        if doomed:
            self.client.indices.delete(index=",".join(doomed))
        return doomed

    def _require_snapshot(self) -> str:
        if self.write_index is None:
            raise RuntimeError(
                "no snapshot open: call begin_snapshot(snapshot_id) before writing or publishing"
            )
        return self.write_index

    def _read_target(self) -> str:
        """Index searched: the open snapshot if ``search_unpublished``, else the alias."""
        if self.search_unpublished and self.write_index is not None:
            return self.write_index
        return self.alias

    def _working_target(self) -> str:
        """Index reconciled by document_ids/count_chunks: the open snapshot, else the alias."""
        return self.write_index or self.alias

    def _target_exists(self, target: str) -> bool:
        if target == self.alias:
            return bool(self.client.indices.exists_alias(name=self.alias))
        return bool(self.client.indices.exists(index=target))

    # ------------------------------------------------------------------ writes

    def upsert_documents(
        self, doc_ids: Sequence[str], chunks: Sequence[Chunk], vectors: np.ndarray
    ) -> None:
        """Delete the documents' chunks, then index the new ones (``_id = chunk_id``)."""
        vectors = np.asarray(vectors)
        if vectors.shape != (len(chunks), self.dim):
            raise ValueError(
                f"vectors must have shape ({len(chunks)}, {self.dim}), got {vectors.shape}"
            )
        strays = sorted({c.doc_id for c in chunks} - set(doc_ids))
        if strays:
            raise ValueError(f"chunks belong to documents not listed in doc_ids: {strays[:5]}")
        self.delete_documents(doc_ids)
        self._bulk(bulk_upsert_actions(self._require_snapshot(), chunks, vectors))

    def delete_documents(self, doc_ids: Sequence[str]) -> None:
        """Delete every chunk of ``doc_ids`` from the open snapshot (refreshing first if needed).

        delete_by_query only sees refreshed documents, so pending writes are refreshed first.
        """
        target = self._require_snapshot()
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return
        if self._dirty:
            self.client.indices.refresh(index=target)
            self._dirty = False
        for start in range(0, len(ids), _TERMS_BATCH):
            resp = self.client.delete_by_query(
                index=target,
                query=delete_by_doc_query(ids[start : start + _TERMS_BATCH]),
                conflicts="proceed",
                wait_for_completion=True,
                refresh=False,
            )
            failures = list(dict(resp).get("failures") or [])
            if failures:
                raise IndexWriteError(
                    f"delete_by_query on {target} failed: {failures[:5]}", failures
                )
        self._dirty = True

    def _bulk(self, actions: Iterable[JsonObject]) -> None:
        failures = self._bulk_writer(self.client, actions, self.chunk_size)
        self._dirty = True
        if failures:
            raise IndexWriteError(
                f"{len(failures)} bulk item(s) failed: {_describe_failures(failures)}", failures
            )

    def commit(self) -> None:
        """Refresh the open snapshot so its writes are searchable (through ``search_unpublished``)."""
        if self.write_index is not None:
            self.client.indices.refresh(index=self.write_index)
            self._dirty = False

    # ------------------------------------------------------------------ reads

    def _search(self, body: JsonObject) -> list[JsonObject]:
        target = self._read_target()
        if not self._target_exists(target):
            return []  # nothing published yet
        resp = self.client.search(index=target, **body)
        return list(dict(resp)["hits"]["hits"])

    def search_lexical(self, query: str, k: int) -> list[SearchHit]:
        """BM25 top-k through each language's analyzer; empty/blank queries return []."""
        if k <= 0 or not (query or "").strip():
            return []
        return [_hit(h, float(h["_score"])) for h in self._search(lexical_query(query, k))]

    def search_dense(self, query_vector: np.ndarray, k: int) -> list[SearchHit]:
        """kNN top-k; scores converted back to cosine similarity for parity with faiss."""
        vec = np.asarray(query_vector, dtype=np.float32).reshape(-1)
        if vec.shape[0] != self.dim:
            raise ValueError(f"query vector has dim {vec.shape[0]}, index has {self.dim}")
        if k <= 0:
            return []
        body = knn_query(vec, k, k * self.num_candidates_factor)
        return [
            _hit(h, knn_score_to_cosine(float(h["_score"]), self.similarity))
            for h in self._search(body)
        ]

    def document_ids(self) -> set[str]:
        """All doc ids in the working index, paged with a composite aggregation."""
        target = self._working_target()
        if not self._target_exists(target):
            return set()
        out: set[str] = set()
        after: JsonObject | None = None
        while True:
            composite: JsonObject = {
                "size": 1000,
                "sources": [{"doc_id": {"terms": {"field": "doc_id"}}}],
            }
            if after:
                composite["after"] = after
            resp = dict(
                self.client.search(index=target, size=0, aggs={"docs": {"composite": composite}})
            )
            agg = resp["aggregations"]["docs"]
            out.update(b["key"]["doc_id"] for b in agg["buckets"])
            after = agg.get("after_key")
            if not agg["buckets"] or not after:
                return out

    def count_chunks(self) -> int:
        target = self._working_target()
        if not self._target_exists(target):
            return 0
        return int(dict(self.client.count(index=target))["count"])

    def close(self) -> None:
        """Close the HTTP connections (an open snapshot stays on the server for resume/cleanup)."""
        close = getattr(self.client, "close", None)
        if callable(close):
            close()


def _hit(raw: JsonObject, score: float) -> SearchHit:
    src = raw.get("_source") or {}
    return SearchHit(
        chunk_id=src.get("chunk_id", raw.get("_id", "")),
        doc_id=src.get("doc_id", ""),
        score=score,
        text=src.get("text", ""),
    )


def _now_ms() -> int:
    return int(time.time() * 1000)
