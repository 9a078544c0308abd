"""Artifact stores: local disk always, S3 against moto_server when RAGTRAIL_TEST_S3_ENDPOINT is set."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragtrail.storage.artifacts import (
    ArtifactStore,
    LocalArtifactStore,
    S3ArtifactStore,
    normalize_key,
    open_artifact_store,
)

S3_SKIP = "moto_server not configured: set RAGTRAIL_TEST_S3_ENDPOINT (make test starts one)"
MIB = 1024 * 1024
BAD_KEYS = ["", "/etc/passwd", "../escape", "a/../../b", "a/..", "a\\b"]


def _make_tree(root: Path) -> Path:
    """A small Data-Docs-like directory."""
    (root / "static" / "css").mkdir(parents=True)
    (root / "index.html").write_text("<html>docs</html>")
    (root / "static" / "css" / "style.css").write_text("body {}")
    (root / "validations.json").write_bytes(b"{}")
    return root


# -- keys and the factory --------------------------------------------------------------------


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_rejected(key: str) -> None:
    with pytest.raises(ValueError):
        normalize_key(key)


def test_keys_are_normalised() -> None:
    assert normalize_key("a//b/./c.json") == "a/b/c.json"
    assert normalize_key("./x") == "x"


def test_open_artifact_store_picks_the_backend(tmp_path: Path) -> None:
    local = open_artifact_store(str(tmp_path / "art"))
    assert isinstance(local, LocalArtifactStore) and local.uri == str(tmp_path / "art")
    from_file_uri = open_artifact_store(f"file://{tmp_path}/art2")
    assert isinstance(from_file_uri, LocalArtifactStore)
    assert from_file_uri.uri == str(tmp_path / "art2")
    s3 = open_artifact_store("s3://bucket/some/prefix/", s3_endpoint_url="http://127.0.0.1:1")
    assert isinstance(s3, S3ArtifactStore)
    assert (s3.bucket, s3.prefix, s3.uri) == ("bucket", "some/prefix", "s3://bucket/some/prefix")
    assert s3.uri_for("x/y.json") == "s3://bucket/some/prefix/x/y.json"
    with pytest.raises(ValueError, match="scheme"):
        open_artifact_store("gs://bucket/x")


# -- local store -----------------------------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


def test_local_round_trip(local: LocalArtifactStore, tmp_path: Path) -> None:
    assert isinstance(local, ArtifactStore)
    uri = local.put_bytes("runs/r1/manifest.json", b'{"a": 1}')
    assert uri == str(tmp_path / "artifacts" / "runs" / "r1" / "manifest.json")
    assert local.get_bytes("runs/r1/manifest.json") == b'{"a": 1}'
    assert local.exists("runs/r1/manifest.json") and not local.exists("runs/r1/other")
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(3 * MIB))
    local.put_file("idx/big.bin", src)
    dest = tmp_path / "out" / "big.bin"
    local.download_file("idx/big.bin", dest)
    assert dest.read_bytes() == src.read_bytes()
    with pytest.raises(FileNotFoundError):
        local.get_bytes("missing")


def test_local_write_is_atomic(
    local: LocalArtifactStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local.put_bytes("m.json", b"old")

    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk on fire"):
        local.put_bytes("m.json", b"new")
    monkeypatch.undo()
    assert local.get_bytes("m.json") == b"old"
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == ["m.json"]
    local.put_bytes("m.json", b"new")
    assert local.get_bytes("m.json") == b"new"
    assert local.list() == ["m.json"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_local_rejects_traversal(local: LocalArtifactStore, key: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        local.put_bytes(key, b"x")
    with pytest.raises(ValueError):
        local.get_bytes(key)
    assert not (tmp_path / "escape").exists()


def test_local_tree_list_delete(local: LocalArtifactStore, tmp_path: Path) -> None:
    docs = _make_tree(tmp_path / "data_docs")
    uri = local.put_tree("reports/r1/gx", docs)
    assert uri == str(tmp_path / "artifacts" / "reports" / "r1" / "gx")
    local.put_bytes("reports/r10/x.txt", b"x")
    local.put_bytes("top.txt", b"t")
    assert local.list("reports/r1") == [
        "reports/r1/gx/index.html",
        "reports/r1/gx/static/css/style.css",
        "reports/r1/gx/validations.json",
    ]
    assert local.exists("reports/r1/gx/static/css/style.css")
    assert local.list("nothing/here") == []
    assert len(local.list()) == 5
    assert local.delete_prefix("reports/r1") == 3
    assert local.list() == ["reports/r10/x.txt", "top.txt"]
    assert local.delete_prefix("top.txt") == 1 and local.delete_prefix("gone") == 0
    with pytest.raises(ValueError):
        local.delete_prefix("")
    with pytest.raises(NotADirectoryError):
        local.put_tree("p", tmp_path / "missing")


# -- S3 store against moto_server ------------------------------------------------------------


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> str:
    endpoint = os.environ.get("RAGTRAIL_TEST_S3_ENDPOINT")
    if not endpoint:
        pytest.skip(S3_SKIP)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return endpoint


@pytest.fixture
def s3(s3_endpoint: str) -> Iterator[S3ArtifactStore]:
    """A store under a prefix of a fresh bucket; the bucket is emptied and removed afterwards."""
    bucket = f"rt-test-{uuid.uuid4().hex[:12]}"
    store = S3ArtifactStore(
        bucket, "team/ragtrail", endpoint_url=s3_endpoint, multipart_threshold=5 * MIB
    )
    store.client.create_bucket(Bucket=bucket)
    yield store
    for page in store.client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            store.client.delete_object(Bucket=bucket, Key=obj["Key"])
    store.client.delete_bucket(Bucket=bucket)


@pytest.mark.s3
def test_s3_round_trip_bytes(s3: S3ArtifactStore, tmp_path: Path) -> None:
    assert isinstance(s3, ArtifactStore)
    uri = s3.put_bytes("runs/r1/manifest.json", b'{"a": 1}')
    assert uri == f"s3://{s3.bucket}/team/ragtrail/runs/r1/manifest.json"
    assert s3.get_bytes("runs/r1/manifest.json") == b'{"a": 1}'
    assert s3.exists("runs/r1/manifest.json") and not s3.exists("runs/r1/nope")
    with pytest.raises(FileNotFoundError):
        s3.get_bytes("missing")
    with pytest.raises(FileNotFoundError):
        s3.download_file("missing", tmp_path / "x")
    with pytest.raises(ValueError):
        s3.put_bytes("../escape", b"x")


@pytest.mark.s3
def test_s3_multipart_upload(s3: S3ArtifactStore, tmp_path: Path) -> None:
    src = tmp_path / "index.faiss"
    src.write_bytes(os.urandom(12 * MIB))
    uri = s3.put_file("indices/s1/index.faiss", src)
    assert uri == s3.uri_for("indices/s1/index.faiss")
    head = s3.client.head_object(Bucket=s3.bucket, Key=s3.object_key("indices/s1/index.faiss"))
    assert head["ContentLength"] == 12 * MIB
    etag = head["ETag"].strip('"')
    assert "-" in etag and int(etag.rsplit("-", 1)[1]) >= 2, etag  # multipart: "<md5>-<parts>"
    dest = tmp_path / "down" / "index.faiss"
    s3.download_file("indices/s1/index.faiss", dest)
    assert dest.read_bytes() == src.read_bytes()

    small = tmp_path / "small.json"
    small.write_bytes(b"{}")
    s3.put_file("small.json", small)
    small_etag = s3.client.head_object(Bucket=s3.bucket, Key=s3.object_key("small.json"))["ETag"]
    assert "-" not in small_etag


@pytest.mark.s3
def test_s3_tree_list_delete(s3: S3ArtifactStore, tmp_path: Path) -> None:
    docs = _make_tree(tmp_path / "data_docs")
    assert s3.put_tree("reports/r1/gx", docs) == f"s3://{s3.bucket}/team/ragtrail/reports/r1/gx"
    s3.put_bytes("reports/r10/x.txt", b"x")
    s3.put_bytes("top.txt", b"t")
    s3.client.put_object(Bucket=s3.bucket, Key="outside/store.txt", Body=b"o")
    assert s3.list("reports/r1") == [
        "reports/r1/gx/index.html",
        "reports/r1/gx/static/css/style.css",
        "reports/r1/gx/validations.json",
    ]
    assert s3.get_bytes("reports/r1/gx/static/css/style.css") == b"body {}"
    assert len(s3.list()) == 5
    assert s3.delete_prefix("reports/r1") == 3
    assert s3.list() == ["reports/r10/x.txt", "top.txt"]
    assert s3.delete_prefix("top.txt") == 1 and s3.delete_prefix("gone") == 0
    whole = S3ArtifactStore(s3.bucket, endpoint_url=s3.client.meta.endpoint_url)
    assert whole.uri == f"s3://{s3.bucket}"
    assert whole.list() == ["outside/store.txt", "team/ragtrail/reports/r10/x.txt"]
    assert whole.put_tree("", docs) == f"s3://{s3.bucket}"
    assert whole.exists("static/css/style.css")
    with pytest.raises(ValueError):
        s3.delete_prefix("")
    s3.client.head_object(Bucket=s3.bucket, Key="outside/store.txt")  # untouched
