"""One worker process of the concurrency test: first use of a database, then writes to every store.

Kept apart from the test module so that ``multiprocessing``'s spawn start method imports only this
(and what it needs), not pytest. Each worker waits at a barrier so all of them migrate the fresh
database at the same moment, then writes its own rows and rows that every worker shares.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

import numpy as np

from ragtrail.records import QuarantineReason, QuarantineRecord
from ragtrail.storage.metadata_store import SqlMetadataStore
from ragtrail.testset.store import TestSetStore
from tests.unit.testset import CORPUS, make_candidate

DOCS_PER_WORKER = 4
CHUNKS_PER_DOC = 3
SHARED_DOCS = 2


def own_doc_id(worker: int, j: int) -> str:
    return f"w{worker}/doc{j}.md"


def shared_doc_id(j: int) -> str:
    return f"shared/doc{j}.md"


def _doc(doc_id: str, snapshot_id: str, content_hash: str) -> dict[str, Any]:
    return {
        "doc_id": doc_id,
        "uri": f"file:///src/{doc_id}",
        "format": "markdown",
        "title": doc_id,
        "content_hash": content_hash,
        "raw_hash": content_hash,
        "version": 1,
        "size_bytes": 100,
        "doc_metadata": {},
        "first_snapshot_id": snapshot_id,
        "last_changed_snapshot_id": snapshot_id,
    }


def _chunks(doc_id: str) -> list[dict[str, Any]]:
    return [
        {
            "chunk_id": f"{doc_id}#{i:04d}",
            "ordinal": i,
            "text": f"chunk {i} of {doc_id}",
            "headings": [],
            "kind": "text",
            "n_tokens": 4,
            "content_hash": f"{i:064d}",
        }
        for i in range(CHUNKS_PER_DOC)
    ]


def _write_everything(worker: int, url: str) -> None:
    store = SqlMetadataStore.from_url(url)  # first use: migrates, concurrently with the others
    testsets = TestSetStore.from_url(url)  # a second engine on the same file, as a DAG task has
    try:
        snapshot_id = f"snap-{worker}"
        store.start_snapshot(snapshot_id, CORPUS, "file:///src", None, "mini", "embedded", None)
        changes = []
        for j in range(DOCS_PER_WORKER):
            doc_id = own_doc_id(worker, j)
            store.upsert_document(CORPUS, _doc(doc_id, snapshot_id, "a" * 64), _chunks(doc_id))
            changes.append({"doc_id": doc_id, "change": "added", "content_hash": "a" * 64})
        for j in range(SHARED_DOCS):  # every worker rewrites the same documents
            doc_id = shared_doc_id(j)
            store.upsert_document(CORPUS, _doc(doc_id, snapshot_id, "b" * 64), _chunks(doc_id))
        store.record_snapshot_documents(snapshot_id, changes)
        store.record_quarantine(
            CORPUS,
            snapshot_id,
            [QuarantineRecord("u", "bad.bin", QuarantineReason.BINARY_CONTENT, "")],
        )
        shared_vectors = {f"{k:064x}": np.full(8, k, dtype=np.float32) for k in range(20)}
        store.put_cached_embeddings("mini", shared_vectors)

        doc = own_doc_id(worker, 0)
        candidates = [
            make_candidate(f"w{worker}-{k}", doc=doc, ordinal=k, snapshot=snapshot_id)
            for k in range(3)
        ]
        testsets.upsert_candidates(candidates, corpus=CORPUS, run_id=f"run-{worker}")
        # read-then-write transactions, racing the other workers' writes
        testsets.retire_stale_hashes(CORPUS, {doc: "changed"}, snapshot_id, retire_missing=False)
        store.delete_documents(CORPUS, [own_doc_id(worker, DOCS_PER_WORKER - 1)])
        store.finish_snapshot(
            snapshot_id, status="complete", counts={"added": 4}, manifest_uri=None
        )
    finally:
        store.engine.dispose()
        testsets.engine.dispose()


WAITING, DONE, FAILED = "waiting", "done", "failed"


class _ReportWalWait(logging.Handler):
    """Tells the parent, once, that this worker is waiting for the lock to switch to WAL."""

    def __init__(self, worker: int, reports: Any) -> None:
        super().__init__(logging.INFO)
        self.worker, self.reports, self.sent = worker, reports, False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.sent and "switch it to WAL" in record.getMessage():
            self.sent = True
            self.reports.put((WAITING, self.worker, None))


def run_worker(worker: int, url: str, barrier: Any, reports: Any) -> None:
    """Wait for every worker, then write. Reports ``(kind, worker, traceback or None)`` tuples:
    WAITING when it first waits to switch the file to WAL, then DONE or FAILED."""
    db_logger = logging.getLogger("ragtrail.storage.db")
    db_logger.setLevel(logging.INFO)
    db_logger.addHandler(_ReportWalWait(worker, reports))
    try:
        barrier.wait(timeout=120)
        _write_everything(worker, url)
    except BaseException:
        reports.put((FAILED, worker, traceback.format_exc()))
        return
    reports.put((DONE, worker, None))
