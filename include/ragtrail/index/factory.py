"""Choose and open the configured index backend for one corpus."""

from __future__ import annotations

import re

from ragtrail.config import Settings
from ragtrail.index.base import HybridIndex

_CORPUS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def validate_corpus_name(corpus: str) -> str:
    """Corpus names become directory and index names: letters, digits, ``._-``, no leading dot."""
    if not _CORPUS_NAME.fullmatch(corpus):
        raise ValueError(
            f"invalid corpus name {corpus!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return corpus


def open_index(settings: Settings, corpus: str, dim: int) -> HybridIndex:
    """Open (creating if needed) the corpus index on the backend named by ``index_backend``.

    embedded: ``EmbeddedHybridIndex(settings.index_dir / corpus)``; elasticsearch: alias
    ``ragtrail-<corpus>`` on ``settings.es_url`` (call ``begin_snapshot`` before writing).
    """
    validate_corpus_name(corpus)
    if settings.index_backend == "embedded":
        from ragtrail.index.embedded import EmbeddedHybridIndex

        return EmbeddedHybridIndex(settings.index_dir / corpus, dim=dim, name=corpus)
    if settings.index_backend == "elasticsearch":
        from ragtrail.index.elasticsearch import ElasticsearchHybridIndex, make_client

        return ElasticsearchHybridIndex(
            make_client(settings), corpus, dim, chunk_size=settings.es_bulk_chunk_size
        )
    raise ValueError(f"unknown index_backend {settings.index_backend!r}")
