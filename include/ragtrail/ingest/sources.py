"""Iterate the files of a document source: a local folder (or ``file://`` URI) or an S3 prefix.

Both kinds yield :class:`SourceFile` records in the same order — sorted by POSIX path relative
to the root — so a local mirror and its S3 copy ingest identically. Listing happens when
:func:`iter_source` is called (so a missing folder or bucket fails immediately with
:class:`SourceError`); file contents are read lazily, one file at a time, as the iterator advances.
Hidden files and directories (any path part starting with ".") are skipped.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ragtrail.records import SourceFile
from ragtrail.storage.s3uri import is_s3_uri, parse_s3_uri

__all__ = ["SourceError", "iter_source", "read_source_file", "split_s3_uri"]

log = logging.getLogger(__name__)

S3_PAGE_SIZE = 1000
"""Keys per list_objects_v2 call (the S3 maximum); tests lower it to exercise pagination."""


class SourceError(Exception):
    """The source itself cannot be listed (missing folder/bucket, access denied, bad URI)."""


def iter_source(uri: str, *, s3_endpoint_url: str | None = None) -> Iterator[SourceFile]:
    """Files of ``uri`` in sorted relative-path order, read lazily.

    ``uri`` is a local path, a ``file://`` URI or ``s3://bucket[/prefix]``. ``s3_endpoint_url``
    is passed to the boto3 client (MinIO, moto_server). Raises :class:`SourceError` right away
    when the source cannot be listed. A file that disappears or becomes unreadable between
    listing and reading is skipped with a warning rather than aborting the run.
    """
    if is_s3_uri(uri):
        bucket, prefix = split_s3_uri(uri)
        client = _s3_client(s3_endpoint_url)
        keys = _list_s3_keys(client, bucket, prefix)
        return _read_s3(client, bucket, prefix, keys)
    root = _local_root(uri)
    if root.is_file():
        return _read_local(root.parent, [root.name])
    return _read_local(root, _list_local(root))


def read_source_file(
    uri: str, rel_path: str, *, s3_endpoint_url: str | None = None
) -> SourceFile | None:
    """One file of the source by its relative path (a mapped shard reads only its own files).

    Returns None when the file vanished since it was listed; rejects paths escaping the root.
    """
    parts = rel_path.split("/")
    if rel_path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise SourceError(f"invalid relative path in source {uri}: {rel_path!r}")
    if is_s3_uri(uri):
        bucket, prefix = split_s3_uri(uri)
        reader = _read_s3(_s3_client(s3_endpoint_url), bucket, prefix, [prefix + rel_path])
    else:
        root = _local_root(uri)
        reader = _read_local(root.parent if root.is_file() else root, [rel_path])
    return next(reader, None)


# --------------------------------------------------------------------------------------------
# Local folders
# --------------------------------------------------------------------------------------------


def _local_root(uri: str) -> Path:
    """Absolute path of a local source; ``file://`` URIs are percent-decoded."""
    if uri.startswith("file://"):
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost"):
            raise SourceError(f"file URI with a remote host is not supported: {uri}")
        uri = unquote(parsed.path)
    root = Path(uri).expanduser().absolute()
    if not root.exists():
        raise SourceError(f"source folder does not exist: {root}")
    if not (root.is_dir() or root.is_file()):
        raise SourceError(f"source is neither a folder nor a file: {root}")
    return root


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _list_local(root: Path) -> list[str]:
    """Sorted POSIX relative paths of regular files under ``root``.

    Symlinks are followed only when their target lies inside the root (anything else could leak
    files the source owner never meant to publish); a directory link back to one of its own
    ancestors (a cycle) is not followed. A link to another folder of the root lists its files
    twice under both paths; the caller's content de-duplication quarantines the copies. Special
    files (FIFOs, sockets, devices) are skipped: reading a FIFO would block the run.
    """
    real_root = root.resolve()
    found: list[str] = []
    pending: list[tuple[Path, tuple[str, ...], frozenset[Path]]] = [
        (root, (), frozenset({real_root}))
    ]
    while pending:
        directory, parts, ancestors = pending.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            if not parts:
                raise SourceError(f"cannot list source folder {root}: {exc}") from exc
            log.warning("skipping unreadable folder %s: %s", directory, exc)
            continue
        for entry in entries:
            if _is_hidden(entry.name):
                continue
            rel = (*parts, entry.name)
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    target = path.resolve()
                    if not target.is_relative_to(real_root):
                        log.info("skipping symlink leaving the source root: %s", path)
                        continue
                    mode = target.stat().st_mode
                else:
                    target = path
                    mode = entry.stat(follow_symlinks=False).st_mode
            except OSError as exc:  # dangling link, permission, race
                log.warning("skipping %s: %s", path, exc)
                continue
            if stat.S_ISDIR(mode):
                real = target.resolve()
                if real not in ancestors:
                    pending.append((path, rel, ancestors | {real}))
            elif stat.S_ISREG(mode):
                found.append("/".join(rel))
    return sorted(found)


def _read_local(root: Path, rel_paths: list[str]) -> Iterator[SourceFile]:
    """Read the listed files lazily; vanished or unreadable files are skipped with a warning."""
    for rel in rel_paths:
        path = root.joinpath(*rel.split("/"))
        try:
            data = path.read_bytes()
        except OSError as exc:
            log.warning("skipping unreadable file %s: %s", path, exc)
            continue
        yield SourceFile(rel_path=rel, uri=str(path), data=data)


# --------------------------------------------------------------------------------------------
# S3
# --------------------------------------------------------------------------------------------


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ("bucket", "some/prefix/"); the prefix is "" or ends in "/"
    so that ``s3://b/docs`` does not also match ``docs-old/``."""
    try:
        parsed = parse_s3_uri(uri)
    except ValueError as exc:
        raise SourceError(f"not an s3://bucket[/prefix] URI: {uri}") from exc
    return parsed.bucket, parsed.key_prefix


def _s3_client(endpoint_url: str | None) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url)


def _list_s3_keys(client: Any, bucket: str, prefix: str) -> list[str]:
    """All object keys under ``prefix`` (paginated), sorted; folder markers and hidden parts
    skipped. Listing errors (no such bucket, access denied, unreachable endpoint) -> SourceError."""
    from botocore.exceptions import BotoCoreError, ClientError

    keys: list[str] = []
    try:
        paginator = client.get_paginator("list_objects_v2")
        pages = paginator.paginate(
            Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": S3_PAGE_SIZE}
        )
        for page in pages:
            for obj in page.get("Contents", ()):
                key = obj["Key"]
                rel = key[len(prefix) :]
                if not rel or key.endswith("/"):
                    continue
                if any(_is_hidden(part) for part in rel.split("/")):
                    continue
                keys.append(key)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "NoSuchBucket":
            raise SourceError(f"S3 bucket does not exist: s3://{bucket}") from exc
        raise SourceError(f"cannot list s3://{bucket}/{prefix}: {code or exc}") from exc
    except BotoCoreError as exc:
        raise SourceError(f"cannot list s3://{bucket}/{prefix}: {exc}") from exc
    return sorted(keys)


def _read_s3(client: Any, bucket: str, prefix: str, keys: list[str]) -> Iterator[SourceFile]:
    """Download the listed objects lazily; objects deleted since listing are skipped."""
    from botocore.exceptions import BotoCoreError, ClientError

    for key in keys:
        try:
            response = client.get_object(Bucket=bucket, Key=key)
            data = response["Body"].read()
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404"):
                log.warning("skipping s3://%s/%s: deleted since listing", bucket, key)
                continue
            raise SourceError(f"cannot read s3://{bucket}/{key}: {code or exc}") from exc
        except BotoCoreError as exc:  # network or credentials failure mid-run
            raise SourceError(f"cannot read s3://{bucket}/{key}: {exc}") from exc
        yield SourceFile(rel_path=key[len(prefix) :], uri=f"s3://{bucket}/{key}", data=data)
