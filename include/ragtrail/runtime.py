"""Builds the configured backends once per process, lazily.

Every pipeline step takes a :class:`Runtime` instead of constructing engines, stores and models
itself, so the choice between embedded and production backends lives in exactly one place.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from ragtrail.config import Settings, load_settings

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from ragtrail.embed.embedder import CachedEmbedder, Embedder
    from ragtrail.index.base import HybridIndex
    from ragtrail.llm import LLMClient
    from ragtrail.storage.artifacts import ArtifactStore
    from ragtrail.storage.metadata_store import SqlMetadataStore


class Runtime:
    """Lazily constructed engine, stores, embedder and indices for one settings object."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or load_settings()
        self._indices: dict[str, HybridIndex] = {}

    @cached_property
    def engine(self) -> Engine:
        from ragtrail.storage.db import make_engine, upgrade

        engine = make_engine(self.settings.resolved_database_url)
        upgrade(engine)
        return engine

    @cached_property
    def store(self) -> SqlMetadataStore:
        from ragtrail.storage.metadata_store import SqlMetadataStore

        return SqlMetadataStore(self.engine)

    @cached_property
    def artifacts(self) -> ArtifactStore:
        from ragtrail.storage.artifacts import open_artifact_store

        return open_artifact_store(
            self.settings.resolved_artifact_uri, s3_endpoint_url=self.settings.s3_endpoint_url
        )

    def limit_torch_threads(self) -> None:
        """Apply ``settings.torch_threads`` (before any model runs; no-op when unset)."""
        if self.settings.torch_threads is not None:
            import torch

            torch.set_num_threads(self.settings.torch_threads)

    @cached_property
    def embedder(self) -> Embedder:
        from ragtrail.embed.embedder import load_embedder

        self.limit_torch_threads()
        return load_embedder(self.settings)

    @cached_property
    def cached_embedder(self) -> CachedEmbedder:
        from ragtrail.embed.embedder import CachedEmbedder

        return CachedEmbedder(self.embedder, self.store)

    @cached_property
    def llm_client(self) -> LLMClient:
        """The generation/judging LLM with the shared content-addressed cache and usage meter."""
        import ragtrail.train  # noqa: F401  (registers the ``generator:`` LLM spec kind)
        from ragtrail.llm import LLMClient, SqlLLMCache, UsageMeter, load_llm_backend

        self.limit_torch_threads()
        gen = self.settings.generation
        kwargs: dict[str, object] = {}
        if gen.llm.startswith(("builtin:", "hf:")):
            kwargs = {
                "batch_size": gen.llm_batch_size,
                "cache_dir": self.settings.resolved_model_cache_dir,
                "s3_endpoint_url": self.settings.s3_endpoint_url,
            }
        backend = load_llm_backend(gen.llm, **kwargs)
        return LLMClient(
            backend,
            SqlLLMCache(self.engine),
            max_attempts=gen.max_attempts,
            usage=UsageMeter(prices=gen.price_per_1k_tokens),
        )

    def index(self, corpus: str) -> HybridIndex:
        """The hybrid index of ``corpus``, opened once per process."""
        if corpus not in self._indices:
            from ragtrail.index.factory import open_index

            self._indices[corpus] = open_index(self.settings, corpus, self.embedder.dim)
        return self._indices[corpus]

    def backends(self) -> dict[str, str]:
        """What produced a result: written into every report and metrics row."""
        s = self.settings
        return {
            "index backend": s.index_backend,
            "embedding model": s.embedding_model,
            "metadata database": self.engine.dialect.name,
            "artifact store": "s3" if s.resolved_artifact_uri.startswith("s3://") else "local",
            "llm": s.generation.llm,
        }

    def close(self) -> None:
        for index in self._indices.values():
            index.close()
        self._indices.clear()
        if "engine" in self.__dict__:
            self.engine.dispose()
