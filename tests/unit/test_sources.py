"""Source iteration tests: local folders (ordering, hidden files, symlinks) and S3 via moto."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from ragtrail.ingest.sources import SourceError, iter_source, split_s3_uri
from ragtrail.records import SourceFile


def build_tree(root: Path) -> None:
    files = {
        "b.md": "# B",
        "a.txt": "alpha",
        "sub/z.html": "<p>z</p>",
        "sub/deeper/c.md": "c",
        "sub-old/x.md": "x",
        ".hidden.md": "secret",
        ".git/config": "[core]",
        "sub/.cache/blob.txt": "cached",
        "A-upper.md": "upper",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_local_folder_sorted_recursive_and_hidden_skipped(tmp_path: Path) -> None:
    build_tree(tmp_path)
    files = list(iter_source(str(tmp_path)))
    assert [f.rel_path for f in files] == [
        "A-upper.md",
        "a.txt",
        "b.md",
        "sub-old/x.md",
        "sub/deeper/c.md",
        "sub/z.html",
    ]
    by_rel = {f.rel_path: f for f in files}
    assert by_rel["sub/deeper/c.md"].data == b"c"
    assert by_rel["sub/deeper/c.md"].uri == str(tmp_path / "sub" / "deeper" / "c.md")
    assert all(Path(f.uri).is_absolute() for f in files)
    assert by_rel["a.txt"].size == 5


def test_file_uri_and_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build_tree(tmp_path)
    expected = [f.rel_path for f in iter_source(str(tmp_path))]
    assert [f.rel_path for f in iter_source(tmp_path.as_uri())] == expected
    monkeypatch.chdir(tmp_path.parent)
    files = list(iter_source(tmp_path.name))
    assert [f.rel_path for f in files] == expected
    assert files[0].uri == str(tmp_path / expected[0])


def test_files_are_read_lazily(tmp_path: Path) -> None:
    build_tree(tmp_path)
    iterator = iter_source(str(tmp_path))
    first = next(iterator)
    assert first.rel_path == "A-upper.md"
    (tmp_path / "b.md").write_text("changed after listing", encoding="utf-8")
    (tmp_path / "a.txt").unlink()  # vanished between listing and reading: skipped
    rest = {f.rel_path: f.data for f in iterator}
    assert "a.txt" not in rest
    assert rest["b.md"] == b"changed after listing"


def test_missing_folder_raises_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        iter_source(str(tmp_path / "nope"))
    with pytest.raises(SourceError):
        iter_source((tmp_path / "nope").as_uri())


def test_single_file_source(tmp_path: Path) -> None:
    (tmp_path / "one.md").write_text("# One", encoding="utf-8")
    files = list(iter_source(str(tmp_path / "one.md")))
    assert [(f.rel_path, f.data) for f in files] == [("one.md", b"# One")]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinks_outside_root_skipped_inside_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    build_tree(root)
    outside.mkdir()
    (outside / "leak.md").write_text("must not be read", encoding="utf-8")
    (root / "leak.md").symlink_to(outside / "leak.md")
    (root / "leakdir").symlink_to(outside, target_is_directory=True)
    (root / "alias.txt").symlink_to(root / "a.txt")
    (root / "sub" / "loop").symlink_to(root / "sub", target_is_directory=True)
    (root / "dangling.md").symlink_to(root / "missing.md")
    fifo = root / "pipe.md"
    if hasattr(os, "mkfifo"):
        os.mkfifo(fifo)

    rel_paths = [f.rel_path for f in iter_source(str(root))]
    assert "leak.md" not in rel_paths
    assert not any(p.startswith("leakdir/") for p in rel_paths)
    assert "alias.txt" in rel_paths
    assert "dangling.md" not in rel_paths and "pipe.md" not in rel_paths
    assert not any(p.startswith("sub/loop/") for p in rel_paths)  # cycle not followed
    assert rel_paths == sorted(rel_paths)


def test_split_s3_uri() -> None:
    assert split_s3_uri("s3://bucket") == ("bucket", "")
    assert split_s3_uri("s3://bucket/") == ("bucket", "")
    assert split_s3_uri("s3://bucket/docs") == ("bucket", "docs/")
    assert split_s3_uri("s3://bucket/docs/hr/") == ("bucket", "docs/hr/")
    with pytest.raises(SourceError):
        split_s3_uri("s3:///nobucket")


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> str:
    endpoint = os.environ.get("RAGTRAIL_TEST_S3_ENDPOINT")
    if not endpoint:
        pytest.skip(
            "RAGTRAIL_TEST_S3_ENDPOINT not set; start `moto_server -H 127.0.0.1 -p 54330` and set "
            "RAGTRAIL_TEST_S3_ENDPOINT=http://127.0.0.1:54330 to run the S3 source test"
        )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    return endpoint


@pytest.mark.s3
def test_s3_prefix_listing_paginated_sorted_and_lazy(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    from ragtrail.ingest import sources

    monkeypatch.setattr(sources, "S3_PAGE_SIZE", 7)  # 26 keys -> several listing pages

    client = boto3.client("s3", endpoint_url=s3_endpoint)
    bucket = f"ragtrail-test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    keys = {f"docs/page-{i:04d}.md": f"# Page {i}" for i in range(25)}
    keys.update(
        {
            "docs/sub/b.txt": "b",
            "docs/.hidden/secret.md": "secret",
            "docs/folder/": "",  # folder marker object
            "docs-old/stale.md": "stale",  # shares the string prefix, not the folder
            "other/x.md": "x",
        }
    )
    for key, body in keys.items():
        client.put_object(Bucket=bucket, Key=key, Body=body.encode())

    files = iter_source(f"s3://{bucket}/docs", s3_endpoint_url=s3_endpoint)
    first: SourceFile = next(files)
    assert first.rel_path == "page-0000.md"
    assert first.uri == f"s3://{bucket}/docs/page-0000.md"
    assert first.data == b"# Page 0"
    client.delete_object(Bucket=bucket, Key="docs/page-0001.md")  # deleted after listing: skipped
    rest = list(files)
    rel_paths = [first.rel_path] + [f.rel_path for f in rest]
    assert len(rel_paths) == 25  # 25 pages - 1 deleted + sub/b.txt
    assert rel_paths == sorted(rel_paths)
    assert "page-0001.md" not in rel_paths
    assert rel_paths[-1] == "sub/b.txt"
    assert not any(p.startswith((".hidden", "folder")) or "stale" in p for p in rel_paths)

    whole = [f.rel_path for f in iter_source(f"s3://{bucket}", s3_endpoint_url=s3_endpoint)]
    assert "other/x.md" in whole and "docs-old/stale.md" in whole

    with pytest.raises(SourceError, match="does not exist"):
        iter_source(f"s3://{bucket}-missing/docs", s3_endpoint_url=s3_endpoint)
