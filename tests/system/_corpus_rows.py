"""What a stack's ragtrail installation holds for one corpus, as JSON on stdout.

Run inside the stack's environment (``RAGTRAIL_*`` of the workers: the metadata DB, the artifact
store, the index), so it reads exactly what the tasks wrote::

    python -m tests.system._corpus_rows CORPUS SNAPSHOT_ID

The system tests compare it with the ingest's manifest: every document once, every chunk once,
the index holding exactly the stored chunks (a retried shard must replace what its killed try
indexed, not add to it).
"""

from __future__ import annotations

import json
import sys


def corpus_rows(corpus: str, snapshot_id: str) -> dict[str, object]:
    """Documents, chunk ids and quarantined files in the metadata DB; documents and chunk count
    in the index; where the metadata DB is (its dialect)."""
    from ragtrail.runtime import Runtime

    rt = Runtime()
    try:
        index = rt.index(corpus)
        return {
            "dialect": rt.engine.dialect.name,
            "documents": sorted(rt.store.get_documents(corpus)),
            "chunk_ids": [c.chunk_id for c in rt.store.get_chunks(corpus)],
            "quarantined": sorted(
                q.rel_path for q in rt.store.list_quarantine(corpus, snapshot_id)
            ),
            "index_documents": sorted(index.document_ids()),
            "index_chunks": index.count_chunks(),
        }
    finally:
        rt.close()


if __name__ == "__main__":
    print(json.dumps(corpus_rows(sys.argv[1], sys.argv[2])))
