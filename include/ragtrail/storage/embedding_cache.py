"""The embedding cache: vectors by (model id, content hash), stored as little-endian float32."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
from sqlalchemy import select

from ragtrail.storage import tables as t
from ragtrail.storage.db import write_transaction
from ragtrail.storage.sql import BATCH_SIZE, SqlStore, batches, upsert


class SqlEmbeddingCache(SqlStore):
    """The ``embedding_cache`` table; vectors come back as exact float32 copies."""

    def get_cached_embeddings(
        self, model_id: str, content_hashes: Iterable[str]
    ) -> dict[str, np.ndarray]:
        """content_hash -> float32 vector for the cached hashes; misses are absent."""
        ec = t.embedding_cache
        out: dict[str, np.ndarray] = {}
        with self.engine.connect() as conn:
            for batch in batches(list(dict.fromkeys(content_hashes)), BATCH_SIZE):
                query = select(ec.c.content_hash, ec.c.dim, ec.c.vector).where(
                    ec.c.model_id == model_id, ec.c.content_hash.in_(batch)
                )
                for r in conn.execute(query):
                    out[r.content_hash] = _decode_vector(r.vector, r.dim, r.content_hash)
        return out

    def put_cached_embeddings(self, model_id: str, mapping: Mapping[str, np.ndarray]) -> None:
        """Cache vectors as little-endian float32; hashes already cached are left untouched."""
        rows = []
        for content_hash, vector in mapping.items():
            arr = np.ascontiguousarray(vector, dtype="<f4")
            if arr.ndim != 1:
                raise ValueError(f"embedding for {content_hash} must be 1-D, got {arr.shape}")
            rows.append(
                {
                    "model_id": model_id,
                    "content_hash": content_hash,
                    "dim": int(arr.size),
                    "vector": arr.tobytes(),
                }
            )
        with write_transaction(self.engine) as conn:
            upsert(conn, t.embedding_cache, rows, ["model_id", "content_hash"], [])


def _decode_vector(blob: bytes, dim: int, content_hash: str) -> np.ndarray:
    vector = np.frombuffer(blob, dtype="<f4")
    if vector.size != dim:
        raise ValueError(
            f"cached embedding {content_hash} has {vector.size} values, expected {dim}"
        )
    return vector.astype(np.float32)
