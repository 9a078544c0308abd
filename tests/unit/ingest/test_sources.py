"""Source iteration tests: local folders (ordering, hidden files, symlinks, entries that cannot
be read) and S3 via moto."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from pathlib import Path

import pytest

from ragtrail.ingest.sources import SourceError, iter_source, read_source_file, split_s3_uri
from ragtrail.records import QuarantineReason, QuarantineRecord, SourceFile


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


# -- entries that cannot or must not be read (issue 22) ---------------------------------------


def _listing(root: Path) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """(rel paths listed and read, {skipped rel path: (reason, detail)})."""
    skipped: list[QuarantineRecord] = []
    files = [f.rel_path for f in iter_source(str(root), on_skip=skipped.append)]
    return files, {r.rel_path: (str(r.reason), r.detail) for r in skipped}


def _without_hanging(func, timeout: float = 30.0):
    """Run ``func`` in a thread; fail (instead of hanging the suite) if it blocks."""
    result: dict[str, object] = {}

    def target() -> None:
        try:
            result["value"] = func()
        except BaseException as exc:  # re-raised in the test's thread
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "reading the source blocked"
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["value"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs symlinks and FIFOs")
def test_unfollowable_and_special_entries_are_skipped_with_a_reason(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    build_tree(root)
    outside.mkdir()
    (outside / "leak.md").write_text("must not be read", encoding="utf-8")
    (root / "loop-a.md").symlink_to(root / "loop-b.md")
    (root / "loop-b.md").symlink_to(root / "loop-a.md")
    (root / "self.md").symlink_to(root / "self.md")
    (root / "sub" / "deeper" / "dangling.md").symlink_to(root / "gone.md")
    (root / "leak.md").symlink_to(outside / "leak.md")
    (root / "leakdir").symlink_to(outside, target_is_directory=True)
    (root / "sub" / "up").symlink_to(root, target_is_directory=True)
    os.mkfifo(root / "pipe.md")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "sock.md"))
        files, skipped = _without_hanging(lambda: _listing(root))
    assert files == ["A-upper.md", "a.txt", "b.md", "sub-old/x.md", "sub/deeper/c.md", "sub/z.html"]
    reasons = {rel: reason for rel, (reason, _) in skipped.items()}
    assert reasons == {
        "loop-a.md": "link_loop",
        "loop-b.md": "link_loop",
        "self.md": "link_loop",
        "sub/deeper/dangling.md": "broken_link",
        "leak.md": "link_outside_root",
        "leakdir": "link_outside_root",
        "sub/up/": "link_loop",
        "pipe.md": "special_file",
        "sock.md": "special_file",
    }
    assert "FIFO" in skipped["pipe.md"][1] and "socket" in skipped["sock.md"][1]
    assert "gone.md" in skipped["sub/deeper/dangling.md"][1]
    assert "outside" in skipped["leakdir"][1]
    # Without a handler the same entries are skipped (and logged): the listing never raises.
    assert [f.rel_path for f in iter_source(str(root))] == files


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_file_swapped_for_a_fifo_after_listing_never_blocks(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("a", encoding="utf-8")
    (tmp_path / "b.md").write_text("b", encoding="utf-8")
    skipped: list[QuarantineRecord] = []
    files = iter_source(str(tmp_path), on_skip=skipped.append)  # listed, not read yet
    (tmp_path / "b.md").unlink()
    os.mkfifo(tmp_path / "b.md")  # no writer: opening it blocking would hang forever
    read = _without_hanging(lambda: [f.rel_path for f in files])
    assert read == ["a.md"]
    assert [(r.rel_path, r.reason) for r in skipped] == [("b.md", QuarantineReason.SPECIAL_FILE)]


@pytest.mark.skipif(os.name != "posix", reason="needs POSIX permissions")
def test_unreadable_file_and_folder_are_skipped_with_a_reason(tmp_path: Path) -> None:
    build_tree(tmp_path)
    (tmp_path / "a.txt").chmod(0)
    if os.access(tmp_path / "a.txt", os.R_OK):
        (tmp_path / "a.txt").chmod(0o644)
        pytest.skip("this user reads files without permission (root with CAP_DAC_OVERRIDE)")
    (tmp_path / "sub").chmod(0)
    try:
        files, skipped = _listing(tmp_path)
    finally:
        (tmp_path / "a.txt").chmod(0o644)
        (tmp_path / "sub").chmod(0o755)
    assert files == ["A-upper.md", "b.md", "sub-old/x.md"]
    assert skipped["a.txt"][0] == "unreadable"
    assert skipped["sub/"][0] == "unreadable" and "folder" in skipped["sub/"][1]


def test_permission_denied_is_skipped_even_for_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same as above, with the refusals simulated (tests may run as root)."""
    from ragtrail.ingest import sources

    build_tree(tmp_path)
    real_scandir, real_read = os.scandir, sources._read_file

    def scandir(path):  # type: ignore[no-untyped-def]
        if Path(path) == tmp_path / "sub":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    def read_file(path: Path) -> bytes:
        if path.name == "a.txt":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path)

    monkeypatch.setattr(sources.os, "scandir", scandir)
    monkeypatch.setattr(sources, "_read_file", read_file)
    files, skipped = _listing(tmp_path)
    assert files == ["A-upper.md", "b.md", "sub-old/x.md"]
    assert skipped == {
        "a.txt": ("unreadable", "Permission denied"),
        "sub/": ("unreadable", "folder cannot be listed: Permission denied"),
    }
    single: list[QuarantineRecord] = []
    assert read_source_file(str(tmp_path), "a.txt", on_skip=single.append) is None
    assert [(r.rel_path, r.reason) for r in single] == [("a.txt", QuarantineReason.UNREADABLE)]


def test_unlistable_or_looping_root_is_a_source_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragtrail.ingest import sources

    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(SourceError, match="does not exist"):
        iter_source(str(tmp_path / "loop"))
    root = tmp_path / "root"
    root.mkdir()

    def scandir(path):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(sources.os, "scandir", scandir)
    with pytest.raises(SourceError, match="cannot list source folder"):
        iter_source(str(root))


def test_s3_object_access_denied_is_skipped_with_a_reason() -> None:
    from botocore.exceptions import ClientError

    from ragtrail.ingest import sources

    class Body:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def read(self) -> bytes:
            return self.data

    class Client:
        def get_object(self, Bucket: str, Key: str) -> dict[str, object]:
            if Key.endswith("secret.md"):
                raise ClientError({"Error": {"Code": "AccessDenied"}}, "GetObject")
            return {"Body": Body(b"# ok")}

    skipped: list[QuarantineRecord] = []
    keys = ["docs/ok.md", "docs/secret.md"]
    read = list(sources._read_s3(Client(), "b", "docs/", keys, skipped.append))
    assert [f.rel_path for f in read] == ["ok.md"]
    assert [(r.rel_path, r.reason, r.uri) for r in skipped] == [
        ("secret.md", QuarantineReason.UNREADABLE, "s3://b/docs/secret.md")
    ]
