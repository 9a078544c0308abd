"""The shared model cache: the one s3:// URI parser and the one S3 mirror for every model kind.

S3 runs in-process (moto's mock_aws); the outage is a real refused connection to a closed port.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragtrail.ingest.sources import SourceError, split_s3_uri
from ragtrail.models import store
from ragtrail.models.store import COMPLETE_MARKER, ModelFetchError, mirror_s3_prefix
from ragtrail.storage.artifacts import S3ArtifactStore, open_artifact_store
from ragtrail.storage.s3uri import S3Uri, is_s3_uri, parse_s3_uri

moto = pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")

FILES = {"config.json": b'{"dim": 4}', "weights/model.bin": b"\x00\x01\x02", "vocab.txt": b"a\nb"}


def test_parse_s3_uri() -> None:
    assert parse_s3_uri("s3://models/minilm/v1/") == S3Uri("models", "minilm/v1")
    assert parse_s3_uri("s3://models") == ("models", "")
    assert parse_s3_uri("S3://models/a?b#c") == ("models", "a?b#c")  # keys are taken literally
    assert parse_s3_uri("s3://m/x").key_prefix == "x/"
    assert parse_s3_uri("s3://m").key_prefix == ""
    assert str(parse_s3_uri("s3://m/x/y/")) == "s3://m/x/y"
    assert is_s3_uri("s3://b") and not is_s3_uri("/data/s3://b") and not is_s3_uri("file:///x")
    for bad in ("https://example.com/x", "s3:///nobucket", "s3://", "models/x"):
        with pytest.raises(ValueError):
            parse_s3_uri(bad)


@pytest.mark.parametrize("uri", ["s3://b", "s3://b/", "s3://b/docs", "s3://b/docs/hr/"])
def test_every_s3_reader_splits_uris_alike(uri: str) -> None:
    """Artifact store, document source and model cache agree on bucket and prefix."""
    parsed = parse_s3_uri(uri)
    assert split_s3_uri(uri) == (parsed.bucket, parsed.key_prefix)
    artifacts = open_artifact_store(uri, s3_endpoint_url="http://127.0.0.1:1")
    assert isinstance(artifacts, S3ArtifactStore)
    assert (artifacts.bucket, artifacts.prefix) == parsed
    assert store.s3_mirror_dir(uri, Path("/c")).parent == Path("/c/s3") / parsed.bucket
    with pytest.raises(SourceError):
        split_s3_uri("s3:///nobucket")


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A mocked bucket "models" holding FILES under "emb/v1/"."""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="models")
        for rel, data in FILES.items():
            s3.put_object(Bucket="models", Key=f"emb/v1/{rel}", Body=data)
        s3.put_object(Bucket="models", Key="emb/v1-old/stale.txt", Body=b"not mine")
        yield s3


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name != COMPLETE_MARKER
    }


def test_mirror_copies_prefix_and_reuses_unchanged_copy(bucket: Any, tmp_path: Path) -> None:
    first = mirror_s3_prefix("s3://models/emb/v1", tmp_path)
    assert first.path.parent == tmp_path / "s3" / "models"
    assert _tree(first.path) == FILES  # the sibling prefix "v1-old" is not included
    marker = json.loads((first.path / COMPLETE_MARKER).read_text())
    assert marker["digest"] == first.digest and marker["objects"] == 3
    assert sorted(marker["manifest"]) == sorted(FILES)
    stamp = (first.path / COMPLETE_MARKER).stat().st_mtime_ns
    assert mirror_s3_prefix("s3://models/emb/v1/", tmp_path).digest == first.digest
    assert (first.path / COMPLETE_MARKER).stat().st_mtime_ns == stamp  # nothing re-fetched

    bucket.put_object(Bucket="models", Key="emb/v1/config.json", Body=b'{"dim": 8}')
    changed = mirror_s3_prefix("s3://models/emb/v1", tmp_path)
    assert changed.path == first.path and changed.digest != first.digest
    assert (changed.path / "config.json").read_bytes() == b'{"dim": 8}'


def test_second_fetch_during_outage_uses_the_cached_copy(
    bucket: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = "s3://models/emb/v1"
    fetched = mirror_s3_prefix(uri, tmp_path)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    down = "http://127.0.0.1:9"  # nothing listens there: the listing fails for real
    assert mirror_s3_prefix(uri, tmp_path, endpoint_url=down) == fetched
    with pytest.raises(ModelFetchError, match="no complete copy is cached"):
        mirror_s3_prefix(uri, tmp_path / "empty", endpoint_url=down)


def test_empty_prefix_and_bad_uri_are_fetch_errors(bucket: Any, tmp_path: Path) -> None:
    with pytest.raises(ModelFetchError, match="no objects"):
        mirror_s3_prefix("s3://models/missing", tmp_path)
    with pytest.raises(ModelFetchError, match="no bucket"):
        mirror_s3_prefix("s3:///x", tmp_path)


@pytest.mark.parametrize(
    "key", ["emb/v1/../escape.txt", "emb/v1/a//b", f"emb/v1/{COMPLETE_MARKER}"]
)
def test_unsafe_object_key_is_refused(bucket: Any, tmp_path: Path, key: str) -> None:
    bucket.put_object(Bucket="models", Key=key, Body=b"x")
    with pytest.raises(ModelFetchError, match="unsafe object key"):
        mirror_s3_prefix("s3://models/emb/v1", tmp_path)
    assert not (tmp_path / "escape.txt").exists()
    assert not list((tmp_path / "s3" / "models").glob("emb__v1-*"))  # nothing published


def test_concurrent_fetches_download_once_under_the_lock(
    bucket: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    downloads: list[str] = []
    real_download = store._download

    def slow_download(client: Any, bucket_name: str, key: str, dest: Path) -> None:
        downloads.append(key)
        time.sleep(0.1)  # keep the first fetch inside the lock while the second arrives
        real_download(client, bucket_name, key, dest)

    monkeypatch.setattr(store, "_download", slow_download)
    start = threading.Barrier(3)
    results: list[store.MirroredPrefix] = []
    errors: list[BaseException] = []

    def fetch() -> None:
        start.wait()
        try:
            results.append(mirror_s3_prefix("s3://models/emb/v1", tmp_path))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 3 and len(set(results)) == 1
    assert sorted(downloads) == sorted(f"emb/v1/{rel}" for rel in FILES)  # each object once
    assert _tree(results[0].path) == FILES
    leftovers = [p.name for p in results[0].path.parent.iterdir() if ".tmp-" in p.name]
    assert leftovers == []


def test_default_cache_root_is_the_settings_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGTRAIL_MODEL_CACHE_DIR", raising=False)
    monkeypatch.setenv("RAGTRAIL_HOME", str(tmp_path / "home"))
    assert store.default_model_cache() == tmp_path / "home" / "models"
    monkeypatch.setenv("RAGTRAIL_MODEL_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert store.default_model_cache() == tmp_path / "elsewhere"
    assert store.s3_mirror_dir("s3://b/x").is_relative_to(tmp_path / "elsewhere" / "s3")
