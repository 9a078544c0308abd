"""The configured embedder and its identity, from the settings (torch or an exported backend)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragtrail.embed.embedder import Embedder, SentenceTransformerEmbedder
from ragtrail.embed.exported import ExportedEmbedder, backend_key, resolve_precision

if TYPE_CHECKING:
    from ragtrail.config import Settings


def load_embedder(settings: Settings) -> Embedder:
    """Build the configured embedder (torch, or an exported onnx/openvino one); downloaded (S3)
    models and exports go to the model cache directory."""
    if settings.embedding_backend != "torch":
        return ExportedEmbedder(
            settings.embedding_model,
            backend=settings.embedding_backend,
            precision=resolve_precision(settings.embedding_backend, settings.embedding_precision),
            batch_size=settings.embedding_batch_size,
            cache_dir=settings.resolved_model_cache_dir,
            s3_endpoint_url=settings.s3_endpoint_url,
            threads=settings.torch_threads,
        )
    if settings.embedding_precision == "bf16":
        raise ValueError("embedding precision bf16 is supported by the openvino backend only")
    return SentenceTransformerEmbedder(
        settings.embedding_model,
        device=settings.device,
        batch_size=settings.embedding_batch_size,
        cache_dir=settings.resolved_model_cache_dir,
        s3_endpoint_url=settings.s3_endpoint_url,
    )


def embedder_identity(settings: Settings) -> str:
    """What index snapshots, metrics and judges record as the embedder: the model reference,
    plus ``@<backend>-<precision>`` for anything but torch at float32 (so indices built before
    backends existed keep their identity)."""
    backend = settings.embedding_backend
    if backend == "torch":
        return settings.embedding_model
    precision = resolve_precision(backend, settings.embedding_precision)
    return f"{settings.embedding_model}@{backend_key(backend, precision)}"
