"""The default, serverless index backend: tantivy (BM25) + faiss (exact cosine) on local disk.

Layout under the index directory::

    bm25/            tantivy index: chunk_id, doc_id, analysis (raw keywords) and one text
                     field per analysis key, text_<key> (see :mod:`ragtrail.index.analysis`)
    vectors.faiss    IndexIDMap2(IndexFlatIP(dim)) over unit vectors, int64 ids
    ids.sqlite       int_id <-> chunk_id, doc_id, text, language (the faiss id map)

Languages. Each chunk is indexed into the text field of its language's analysis (stemmer and stop
words where tantivy has them); a query is analysed once per analysis the index holds. An index
built before languages existed (one English-stemmed ``text`` field, lexical schema 1) is rebuilt
from the id map when opened, every chunk tagged ``en``: it searches exactly as before, and a
document gets its own language's analysis when the ingest next writes it.

Commit order and crash safety. Writes are staged: lexical ones in the tantivy writer, dense ones in
memory. ``commit()`` then (1) commits tantivy, (2) commits the id map in one sqlite transaction,
(3) writes the faiss file to a temporary name and renames it into place. A kill between steps
leaves the modalities disagreeing about some documents, never a half-written file. On open, the
dense side is reconciled in memory: vectors whose id has no row (orphans) and rows without a
vector (dangling) are ignored, and the next commit persists that cleanup. Int ids are never reused
(sqlite AUTOINCREMENT), so an old vector can never be mistaken for a new chunk. The caller
reconciles across modalities with :meth:`document_ids` (union of both) or
:meth:`consistency_report`, by re-upserting or deleting the affected documents.

One writer at a time: the tantivy writer lock is taken on the first write and held until
:meth:`close`; it also guards the faiss file and the id map.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import tantivy

from ragtrail.index.analysis import (
    CJK,
    NEUTRAL,
    TANTIVY_ANALYSES,
    TANTIVY_KEYS,
    tantivy_key,
    text_field,
)
from ragtrail.records import Chunk, SearchHit

log = logging.getLogger(__name__)

_SQL_BATCH = 500
"""Ids per ``IN (...)`` clause, well below sqlite's bound-parameter limit."""

_WRITER_HEAP_BYTES = 64_000_000
_MAX_TOKEN_CHARS = 40
"""Same limit as tantivy's built-in ``en_stem`` analyzer (RemoveLongFilter(40))."""
LEXICAL_SCHEMA = "2"
"""1: one English-stemmed ``text`` field; 2: one text field per analysis key."""
_LEGACY_LANGUAGE = "en"
"""The language a schema-1 index analysed every chunk in."""


def _tokenizer_name(key: str) -> str:
    return f"ragtrail_{key}"


def _build_schema() -> tantivy.Schema:
    """chunk_id/doc_id/analysis are untokenised keywords (exact delete by term); the text goes to
    the field of its analysis key, stored there (one copy per chunk)."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("doc_id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("analysis", stored=True, tokenizer_name="raw", index_option="basic")
    for key in TANTIVY_KEYS:
        builder.add_text_field(text_field(key), stored=True, tokenizer_name=_tokenizer_name(key))
    return builder.build()


def build_analyzer(key: str) -> tantivy.TextAnalyzer:
    """The analyzer of one analysis key. ``en`` is identical to tantivy's ``en_stem``; other
    stemmed languages add their stop words (before stemming) where tantivy has a list; ``cjk``
    indexes character uni- and bigrams; ``und`` lower-cases words and nothing more."""
    if key == CJK:
        return (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.ngram(1, 2))
            .filter(tantivy.Filter.lowercase())
            .build()
        )
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
    )
    if key == NEUTRAL:
        return builder.build()
    analysis = TANTIVY_ANALYSES[key]
    if analysis.stopwords:
        builder = builder.filter(tantivy.Filter.stopword(analysis.stopwords))
    return builder.filter(tantivy.Filter.stemmer(analysis.stemmer)).build()


def _open_tantivy(schema: tantivy.Schema, path: Path, analyzers: dict[str, Any]) -> Any:
    index = tantivy.Index(schema, path=str(path), reuse=True)
    for key, analyzer in analyzers.items():
        index.register_tokenizer(_tokenizer_name(key), analyzer)
    return index


def _lexical_document(chunk_id: str, doc_id: str, text: str, language: str) -> tantivy.Document:
    key = tantivy_key(language)
    return tantivy.Document(
        chunk_id=chunk_id, doc_id=doc_id, analysis=key, **{text_field(key): text}
    )


def _normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """C-contiguous float32 copy with unit-norm rows (zero rows stay zero)."""
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    out /= np.where(norms > 0, norms, 1.0).astype(np.float32)
    return out


def _batches(items: Sequence[Any], size: int = _SQL_BATCH) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _fsync_dir(path: Path) -> None:
    """Persist a rename: fsync the directory entry (best effort on platforms without O_DIRECTORY)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ConsistencyReport:
    """Per-modality counts and the documents on which the modalities disagree."""

    lexical_chunks: int
    dense_chunks: int
    id_rows: int
    dangling_rows: int
    docs_only_lexical: frozenset[str] = field(default_factory=frozenset)
    docs_only_dense: frozenset[str] = field(default_factory=frozenset)
    docs_mismatched: frozenset[str] = field(default_factory=frozenset)

    @property
    def consistent(self) -> bool:
        return (
            self.lexical_chunks == self.dense_chunks
            and not self.docs_only_lexical
            and not self.docs_only_dense
            and not self.docs_mismatched
        )

    @property
    def docs_to_repair(self) -> frozenset[str]:
        """Documents to re-upsert (or delete) to make both modalities agree again."""
        return self.docs_only_lexical | self.docs_only_dense | self.docs_mismatched


@dataclass(frozen=True)
class _StagedUpsert:
    doc_ids: tuple[str, ...]
    rows: tuple[tuple[str, str, str, str], ...]  # (chunk_id, doc_id, text, language)
    vectors: np.ndarray


@dataclass(frozen=True)
class _StagedDelete:
    doc_ids: tuple[str, ...]


class EmbeddedHybridIndex:
    """A persistent BM25 + dense index in one directory (see the module docstring)."""

    def __init__(self, path: Path, dim: int, name: str) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.path = Path(path)
        self.dim = dim
        self.name = name
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "bm25").mkdir(exist_ok=True)
        self._lock = threading.RLock()
        self._schema = _build_schema()
        self._analyzers = {key: build_analyzer(key) for key in TANTIVY_KEYS}
        self._writer: Any = None
        self._staged: list[_StagedUpsert | _StagedDelete] = []
        self._db = sqlite3.connect(
            self.path / "ids.sqlite", isolation_level=None, check_same_thread=False
        )
        self._init_db()
        self._upgrade_lexical()
        self._tantivy = _open_tantivy(self._schema, self.path / "bm25", self._analyzers)
        self._keys_present: tuple[str, ...] = ()
        self._faiss: Any = None
        self._dangling: set[int] = set()
        self._max_seen_id = 0
        self._closed = False
        self._load_dense()

    # ----------------------------------------------------------------------------- set-up

    def _init_db(self) -> None:
        """Create the id-map tables and check the stored dimension matches ``dim``."""
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS chunks ("
            " int_id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " chunk_id TEXT UNIQUE NOT NULL,"
            " doc_id TEXT NOT NULL,"
            " text TEXT NOT NULL,"
            " language TEXT NOT NULL)"
        )
        columns = {row[1] for row in db.execute("PRAGMA table_info(chunks)")}
        if "language" not in columns:  # an id map written before languages existed
            db.execute(
                f"ALTER TABLE chunks ADD COLUMN language TEXT NOT NULL DEFAULT '{_LEGACY_LANGUAGE}'"
            )
        db.execute("CREATE INDEX IF NOT EXISTS chunks_doc_id ON chunks(doc_id)")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT OR IGNORE INTO meta VALUES ('dim', ?)", (str(self.dim),))
        stored = db.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()[0]
        if int(stored) != self.dim:
            raise ValueError(
                f"index {self.path} was built with dim {stored}, opened with {self.dim}"
            )

    def _upgrade_lexical(self) -> None:
        """Bring the tantivy index to :data:`LEXICAL_SCHEMA`, rebuilding it from the id map.

        Runs when the id map has no schema mark: a new index (nothing to rebuild) or one written
        before languages existed. Processes opening the index at once take turns (a file lock),
        and the second finds the mark. The new index is built beside the old and renamed into
        place; a crash at any point leaves the mark unset, so the next open rebuilds again.
        """
        if self._lexical_mark() is not None:
            return
        with open(self.path / "upgrade.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if self._lexical_mark() is not None:
                return
            rows = self._db.execute("SELECT chunk_id, doc_id, text, language FROM chunks")
            rows = rows.fetchall()
            if rows or any((self.path / "bm25").iterdir()):
                self._rebuild_lexical(rows)
            self._db.execute(
                "INSERT OR IGNORE INTO meta VALUES ('lexical_schema', ?)", (LEXICAL_SCHEMA,)
            )

    def _lexical_mark(self) -> str | None:
        """The stored lexical schema (None: unmarked); a schema this code cannot read raises."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'lexical_schema'").fetchone()
        if row is not None and row[0] != LEXICAL_SCHEMA:
            raise ValueError(
                f"index {self.path} has lexical schema {row[0]}, this version reads "
                f"{LEXICAL_SCHEMA}: rebuild it by ingesting the corpus into a new home"
            )
        return None if row is None else str(row[0])

    def _rebuild_lexical(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        """Write ``rows`` into a new tantivy index and swap it in for ``bm25/``."""
        log.warning(
            "index %s predates per-language analysis: rebuilding its BM25 side from %d stored "
            "chunks (analysed as before, in English)",
            self.path,
            len(rows),
        )
        target, staging = self.path / "bm25", self.path / "bm25.rebuild"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        index = _open_tantivy(self._schema, staging, self._analyzers)
        writer = index.writer(heap_size=_WRITER_HEAP_BYTES, num_threads=1)
        for row in rows:
            writer.add_document(_lexical_document(*row))
        writer.commit()
        writer.wait_merging_threads()
        del writer, index
        legacy = self.path / "bm25.legacy"
        shutil.rmtree(legacy, ignore_errors=True)
        os.replace(target, legacy)
        os.replace(staging, target)
        _fsync_dir(self.path)
        shutil.rmtree(legacy)

    def _load_dense(self) -> None:
        """(Re)load faiss + id map from disk and hide orphan vectors / dangling rows in memory."""
        vec_path = self.path / "vectors.faiss"
        if vec_path.is_file():
            index = faiss.read_index(str(vec_path))
            if index.d != self.dim:
                raise ValueError(f"{vec_path} has dim {index.d}, expected {self.dim}")
        else:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        faiss_ids = set(faiss.vector_to_array(index.id_map).tolist()) if index.ntotal else set()
        row_ids = {r[0] for r in self._db.execute("SELECT int_id FROM chunks")}
        orphans = faiss_ids - row_ids
        if orphans:
            index.remove_ids(np.fromiter(sorted(orphans), dtype=np.int64))
        seq = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
        self._max_seen_id = max([seq[0] if seq else 0, *faiss_ids, *row_ids, 0])
        self._faiss = index
        self._dangling = row_ids - faiss_ids
        self._load_keys()

    def _load_keys(self) -> None:
        """The analysis keys of the committed chunks: the fields a query is analysed for."""
        languages = [r[0] for r in self._db.execute("SELECT DISTINCT language FROM chunks")]
        self._keys_present = tuple(sorted({tantivy_key(lang) for lang in languages}))

    def _ensure_writer(self) -> Any:
        """Take the single-writer lock; reload dense state so it is not stale w.r.t. other writers."""
        if self._closed:
            raise RuntimeError(f"index {self.name!r} is closed")
        if self._writer is None:
            self._writer = self._tantivy.writer(heap_size=_WRITER_HEAP_BYTES, num_threads=1)
            self._tantivy.reload()
            self._load_dense()
        return self._writer

    # ----------------------------------------------------------------------------- writes

    def upsert_documents(
        self, doc_ids: Sequence[str], chunks: Sequence[Chunk], vectors: np.ndarray
    ) -> None:
        """Stage the replacement of everything stored for ``doc_ids`` by ``chunks``.

        Also removes any stored chunk with the same chunk id (even under another document), so
        the operation is idempotent. Visible to searches after :meth:`commit`.
        """
        vectors = np.asarray(vectors)
        if vectors.shape != (len(chunks), self.dim):
            raise ValueError(
                f"vectors must have shape ({len(chunks)}, {self.dim}), got {vectors.shape}"
            )
        wanted = set(doc_ids)
        strays = sorted({c.doc_id for c in chunks} - wanted)
        if strays:
            raise ValueError(f"chunks belong to documents not listed in doc_ids: {strays[:5]}")
        chunk_ids = [c.chunk_id for c in chunks]
        if len(set(chunk_ids)) != len(chunk_ids):
            raise ValueError("duplicate chunk ids in one upsert")
        rows = tuple((c.chunk_id, c.doc_id, c.index_text(), c.language) for c in chunks)
        with self._lock:
            writer = self._ensure_writer()
            for doc_id in dict.fromkeys(doc_ids):
                writer.delete_documents_by_term("doc_id", doc_id)
            for chunk_id in chunk_ids:
                writer.delete_documents_by_term("chunk_id", chunk_id)
            for row in rows:
                writer.add_document(_lexical_document(*row))
            self._staged.append(
                _StagedUpsert(tuple(dict.fromkeys(doc_ids)), rows, _normalise_rows(vectors))
            )

    def delete_documents(self, doc_ids: Sequence[str]) -> None:
        """Stage the removal of every chunk of ``doc_ids``; unknown ids are ignored."""
        if not doc_ids:
            return
        with self._lock:
            writer = self._ensure_writer()
            for doc_id in dict.fromkeys(doc_ids):
                writer.delete_documents_by_term("doc_id", doc_id)
            self._staged.append(_StagedDelete(tuple(dict.fromkeys(doc_ids))))

    def commit(self) -> None:
        """Make staged writes durable and searchable: tantivy, then id map, then faiss file."""
        with self._lock:
            if self._writer is None:
                return  # nothing was written through this handle
            self._commit_lexical()
            try:
                self._commit_ids()
                self._commit_vectors()
            except BaseException:
                self._staged.clear()
                self._load_dense()  # disk is the truth; the caller re-upserts after an error
                raise

    def _commit_lexical(self) -> None:
        """Step 1: commit the tantivy writer and reload the searcher."""
        self._writer.commit()
        self._tantivy.reload()

    def _commit_ids(self) -> None:
        """Step 2: apply staged dense ops to the id map (one transaction) and in-memory faiss.

        Faiss removals are batched into one ``remove_ids`` call (each call rewrites the flat
        storage); new ids never collide with removed ones, so adding first is equivalent.
        """
        db = self._db
        removed: list[int] = list(self._dangling)
        added_ids: list[np.ndarray] = []
        added_vectors: list[np.ndarray] = []
        db.execute("BEGIN IMMEDIATE")
        try:
            self._delete_rows(sorted(self._dangling))
            for op in self._staged:
                removed += self._remove_where("doc_id", op.doc_ids)
                if isinstance(op, _StagedUpsert):
                    removed += self._remove_where("chunk_id", [r[0] for r in op.rows])
                    added_ids.append(self._insert(op.rows))
                    added_vectors.append(op.vectors)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if added_ids:
            self._faiss.add_with_ids(np.concatenate(added_vectors), np.concatenate(added_ids))
        if removed:
            self._faiss.remove_ids(np.asarray(removed, dtype=np.int64))
        self._dangling.clear()
        self._staged.clear()
        self._load_keys()

    def _commit_vectors(self) -> None:
        """Step 3: write the faiss index to a temporary file, fsync, then atomically rename."""
        final = self.path / "vectors.faiss"
        tmp = self.path / f"vectors.faiss.tmp-{os.getpid()}"
        faiss.write_index(self._faiss, str(tmp))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        _fsync_dir(self.path)

    def _remove_where(self, column: str, values: Sequence[str]) -> list[int]:
        """Delete id-map rows whose ``column`` is in ``values``; return their int ids."""
        assert column in ("doc_id", "chunk_id")
        ids: list[int] = []
        for batch in _batches(list(values)):
            marks = ",".join("?" * len(batch))
            sql = f"SELECT int_id FROM chunks WHERE {column} IN ({marks})"
            ids.extend(r[0] for r in self._db.execute(sql, tuple(batch)))
        self._delete_rows(ids)
        return ids

    def _delete_rows(self, ids: Sequence[int]) -> None:
        for batch in _batches(list(ids)):
            marks = ",".join("?" * len(batch))
            self._db.execute(f"DELETE FROM chunks WHERE int_id IN ({marks})", tuple(batch))

    def _insert(self, rows: Sequence[tuple[str, str, str, str]]) -> np.ndarray:
        """Insert rows under fresh, never-reused int ids (AUTOINCREMENT semantics); return them."""
        start = self._max_seen_id + 1
        ids = np.arange(start, start + len(rows), dtype=np.int64)
        self._db.executemany(
            "INSERT INTO chunks (int_id, chunk_id, doc_id, text, language) VALUES (?, ?, ?, ?, ?)",
            [(int(i), *row) for i, row in zip(ids, rows, strict=True)],
        )
        if len(ids):
            self._max_seen_id = int(ids[-1])
        return ids

    # ----------------------------------------------------------------------------- reads

    def search_lexical(self, query: str, k: int) -> list[SearchHit]:
        """BM25 top-k over the analysed text; query syntax is never interpreted, so it never raises.

        The text is analysed once per analysis key the index holds, exactly like that key's field,
        and each term becomes a SHOULD clause on that field (on one field this scores identically
        to tantivy's parser on plain words; a chunk only ever matches in its own field).
        """
        if k <= 0:
            return []
        clauses = [
            (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, text_field(key), term))
            for key in self._keys_present
            for term in self._analyzers[key].analyze(query or "")
        ]
        if not clauses:
            return []
        searcher = self._tantivy.searcher()
        result = searcher.search(tantivy.Query.boolean_query(clauses), limit=k, count=False)
        hits = []
        for score, address in result.hits:
            doc = searcher.doc(address)
            hits.append(
                SearchHit(
                    chunk_id=doc.get_first("chunk_id"),
                    doc_id=doc.get_first("doc_id"),
                    score=float(score),
                    text=doc.get_first(text_field(doc.get_first("analysis"))) or "",
                )
            )
        return hits

    def search_dense(self, query_vector: np.ndarray, k: int) -> list[SearchHit]:
        """Exact cosine top-k (inner product of unit vectors)."""
        vec = np.asarray(query_vector, dtype=np.float32).reshape(1, -1)
        if vec.shape[1] != self.dim:
            raise ValueError(f"query vector has dim {vec.shape[1]}, index has {self.dim}")
        with self._lock:
            n = min(k, self._faiss.ntotal)
            if n <= 0:
                return []
            scores, ids = self._faiss.search(_normalise_rows(vec), n)
            pairs = [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]
            meta = self._rows_by_id([i for i, _ in pairs])
        return [
            SearchHit(chunk_id=meta[i][0], doc_id=meta[i][1], score=s, text=meta[i][2])
            for i, s in pairs
            if i in meta
        ]

    def _rows_by_id(self, ids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        out: dict[int, tuple[str, str, str]] = {}
        for batch in _batches(list(ids)):
            marks = ",".join("?" * len(batch))
            sql = f"SELECT int_id, chunk_id, doc_id, text FROM chunks WHERE int_id IN ({marks})"
            out.update({r[0]: (r[1], r[2], r[3]) for r in self._db.execute(sql, tuple(batch))})
        return out

    def _lexical_pairs(self) -> list[tuple[str, str]]:
        """(chunk_id, doc_id) of every committed lexical document."""
        searcher = self._tantivy.searcher()
        if searcher.num_docs == 0:
            return []
        result = searcher.search(tantivy.Query.all_query(), limit=searcher.num_docs, count=False)
        pairs = []
        for _, address in result.hits:
            doc = searcher.doc(address)
            pairs.append((doc.get_first("chunk_id"), doc.get_first("doc_id")))
        return pairs

    def _dense_pairs(self) -> list[tuple[str, str]]:
        """(chunk_id, doc_id) of every committed chunk that has a vector."""
        with self._lock:
            rows = self._db.execute("SELECT int_id, chunk_id, doc_id FROM chunks").fetchall()
            return [(c, d) for i, c, d in rows if i not in self._dangling]

    def document_ids(self) -> set[str]:
        """Documents present in either modality (a crash may leave one behind the other)."""
        return {d for _, d in self._lexical_pairs()} | {d for _, d in self._dense_pairs()}

    def count_chunks(self) -> int:
        """Number of searchable vectors; see :meth:`consistency_report` for both modalities."""
        with self._lock:
            return int(self._faiss.ntotal)

    def consistency_report(self) -> ConsistencyReport:
        """Compare the modalities chunk by chunk and name the documents that disagree."""
        lexical: dict[str, set[str]] = {}
        for chunk_id, doc_id in self._lexical_pairs():
            lexical.setdefault(doc_id, set()).add(chunk_id)
        dense: dict[str, set[str]] = {}
        dense_pairs = self._dense_pairs()
        for chunk_id, doc_id in dense_pairs:
            dense.setdefault(doc_id, set()).add(chunk_id)
        with self._lock:
            id_rows = self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
            dangling = len(self._dangling)
            dense_chunks = int(self._faiss.ntotal)
        return ConsistencyReport(
            lexical_chunks=sum(len(v) for v in lexical.values()),
            dense_chunks=dense_chunks,
            id_rows=int(id_rows),
            dangling_rows=dangling,
            docs_only_lexical=frozenset(lexical.keys() - dense.keys()),
            docs_only_dense=frozenset(dense.keys() - lexical.keys()),
            docs_mismatched=frozenset(
                d for d in lexical.keys() & dense.keys() if lexical[d] != dense[d]
            ),
        )

    # ----------------------------------------------------------------------------- lifecycle

    def begin_snapshot(self, snapshot_id: str, *, resume: bool = False) -> None:
        """No-op: the embedded index is updated in place (kept for parity with Elasticsearch)."""

    def docs_to_repair(self) -> frozenset[str]:
        return self.consistency_report().docs_to_repair

    def publish(self, keep: int | None = None) -> None:
        """No-op: :meth:`commit` already makes writes visible (parity with Elasticsearch)."""

    def reload(self) -> None:
        """Pick up commits made by another process (a reader that stays open for long)."""
        with self._lock:
            self._tantivy.reload()
            if self._writer is None:
                self._load_dense()

    def close(self) -> None:
        """Release the writer lock and files; writes not yet committed are discarded."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._writer.rollback()
                self._writer.wait_merging_threads()
                self._writer = None
            self._staged.clear()
            self._db.close()

    def drop(self) -> None:
        """Close the index and delete its directory."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> EmbeddedHybridIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
