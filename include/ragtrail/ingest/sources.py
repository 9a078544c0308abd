"""Iterate the files of a document source: a local folder (or ``file://`` URI) or an S3 prefix.

Both kinds yield :class:`SourceFile` records in the same order — sorted by POSIX path relative
to the root — so a local mirror and its S3 copy ingest identically. Listing happens when
:func:`iter_source` is called (so a missing folder or bucket fails immediately with
:class:`SourceError`); file contents are read lazily, one file at a time, as the iterator advances.
Hidden files and directories (any path part starting with ".") are skipped.

An entry of the source that cannot or must not be read never stops the run: it is reported to
the caller's ``on_skip`` as a :class:`QuarantineRecord` (and logged) and the listing goes on.
Local folders report unreadable files and folders (``unreadable``), FIFOs, sockets and devices
(``special_file``, never opened: reading a FIFO would block), dangling links (``broken_link``),
links that loop or point at one of their own ancestor folders (``link_loop``) and links leaving
the source folder (``link_outside_root``, never followed: they could publish files the source's
owner never meant to share). A folder's record has a ``rel_path`` ending in "/".
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote, urlparse

from ragtrail.records import QuarantineReason, QuarantineRecord, SourceFile
from ragtrail.redact import redact
from ragtrail.storage.s3uri import is_s3_uri, parse_s3_uri

__all__ = ["SkipHandler", "SourceError", "iter_source", "read_source_file", "split_s3_uri"]

log = logging.getLogger(__name__)

S3_PAGE_SIZE = 1000
"""Keys per list_objects_v2 call (the S3 maximum); tests lower it to exercise pagination."""

SkipHandler = Callable[[QuarantineRecord], None]
"""Receives every entry of a source that is skipped with a reason (see the module docstring)."""


class SourceError(Exception):
    """The source itself cannot be listed (missing folder/bucket, access denied, bad URI)."""


def _ignore(_record: QuarantineRecord) -> None:
    """The default skip handler: the entry is only logged."""


def iter_source(
    uri: str, *, s3_endpoint_url: str | None = None, on_skip: SkipHandler | None = None
) -> Iterator[SourceFile]:
    """Files of ``uri`` in sorted relative-path order, read lazily.

    ``uri`` is a local path, a ``file://`` URI or ``s3://bucket[/prefix]``. ``s3_endpoint_url``
    is passed to the boto3 client (MinIO, moto_server). Raises :class:`SourceError` right away
    when the source cannot be listed. Entries that cannot be read (see the module docstring) go
    to ``on_skip`` and are logged; a file that disappears between listing and reading is
    skipped with a warning only.
    """
    skip = on_skip or _ignore
    if is_s3_uri(uri):
        bucket, prefix = split_s3_uri(uri)
        client = _s3_client(s3_endpoint_url)
        keys = _list_s3_keys(client, bucket, prefix)
        return _read_s3(client, bucket, prefix, keys, skip)
    root = _local_root(uri)
    if root.is_file():
        return _read_local(root.parent, [root.name], skip)
    return _read_local(root, _list_local(root, skip), skip)


def read_source_file(
    uri: str,
    rel_path: str,
    *,
    s3_endpoint_url: str | None = None,
    on_skip: SkipHandler | None = None,
) -> SourceFile | None:
    """One file of the source by its relative path (a mapped shard reads only its own files).

    Returns None when the file vanished since it was listed, or became unreadable (then it goes
    to ``on_skip`` too); rejects paths escaping the root.
    """
    parts = rel_path.split("/")
    if rel_path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise SourceError(f"invalid relative path in source {uri}: {rel_path!r}")
    skip = on_skip or _ignore
    if is_s3_uri(uri):
        bucket, prefix = split_s3_uri(uri)
        reader = _read_s3(_s3_client(s3_endpoint_url), bucket, prefix, [prefix + rel_path], skip)
    else:
        root = _local_root(uri)
        reader = _read_local(root.parent if root.is_file() else root, [rel_path], skip)
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


def _skipped(
    skip: SkipHandler, path: Path, rel: str, reason: QuarantineReason, detail: str
) -> None:
    """Log a skipped entry and hand it to the caller."""
    log.warning("skipping %s (%s): %s", path, reason, detail)
    skip(QuarantineRecord(uri=str(path), rel_path=rel, reason=reason, detail=detail))


def _os_reason(exc: OSError) -> str:
    """An OSError as a short phrase without the path (the record names the entry)."""
    return exc.strerror or str(exc)


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def _list_local(root: Path, skip: SkipHandler) -> list[str]:
    """Sorted POSIX relative paths of regular files under ``root``; every other entry that is
    not hidden goes to ``skip`` with its reason.

    Symlinks are followed only when their target lies inside the root; a directory link to one
    of its own ancestors (a cycle) is not followed. A link to another folder of the root lists
    its files twice under both paths; the caller's content de-duplication quarantines the copies.
    Nothing but directories is opened here, so a FIFO can never block the listing.
    """
    real_root = root.resolve()
    found: list[str] = []
    pending: list[tuple[Path, tuple[str, ...], frozenset[Path]]] = [
        (root, (), frozenset({real_root}))
    ]
    while pending:
        directory, parts, ancestors = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            if not parts:
                raise SourceError(f"cannot list source folder {root}: {exc}") from exc
            rel_dir = "/".join(parts) + "/"
            detail = f"folder cannot be listed: {_os_reason(exc)}"
            _skipped(skip, directory, rel_dir, QuarantineReason.UNREADABLE, detail)
            continue
        for entry in entries:
            if _is_hidden(entry.name):
                continue
            rel = (*parts, entry.name)
            rel_path = "/".join(rel)
            path = Path(entry.path)
            resolved = _resolve_entry(entry, path, real_root)
            if isinstance(resolved, _Skip):
                _skipped(skip, path, rel_path, resolved.reason, resolved.detail)
                continue
            if resolved is None:  # vanished since the folder was listed
                continue
            mode, real = resolved
            if stat.S_ISDIR(mode):
                if real in ancestors:
                    ancestor = real.relative_to(real_root).as_posix() or "."
                    detail = f"links to its own ancestor folder {ancestor!r}; not followed"
                    _skipped(skip, path, rel_path + "/", QuarantineReason.LINK_LOOP, detail)
                else:
                    pending.append((path, rel, ancestors | {real}))
            elif stat.S_ISREG(mode):
                found.append(rel_path)
            else:
                detail = f"{_special_kind(mode)}: never read"
                _skipped(skip, path, rel_path, QuarantineReason.SPECIAL_FILE, detail)
    return sorted(found)


class _Skip(NamedTuple):
    """Why a listed entry is not read."""

    reason: QuarantineReason
    detail: str


def _resolve_entry(
    entry: os.DirEntry[str], path: Path, real_root: Path
) -> tuple[int, Path] | _Skip | None:
    """(mode, real path) of a listed entry, following a link; a :class:`_Skip` when it must be
    skipped; None when it vanished since the folder was listed."""
    target: str | None = None
    try:
        if not entry.is_symlink():
            mode = entry.stat(follow_symlinks=False).st_mode
            return mode, (path.resolve() if stat.S_ISDIR(mode) else path)
        target = os.readlink(path)
        mode = os.stat(path).st_mode  # follows the link: ELOOP, ENOENT, EACCES surface here
        real = path.resolve(strict=True)
    except RuntimeError:  # Path.resolve on a symlink loop
        return _Skip(QuarantineReason.LINK_LOOP, "symbolic link loop; not followed")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return _Skip(QuarantineReason.LINK_LOOP, "symbolic link loop; not followed")
        if exc.errno == errno.ENOENT:
            if target is not None and os.path.lexists(path):
                return _Skip(QuarantineReason.BROKEN_LINK, f"link target {target!r} does not exist")
            log.warning("%s vanished while the source was listed; skipped", path)
            return None
        return _Skip(QuarantineReason.UNREADABLE, _os_reason(exc))
    if not real.is_relative_to(real_root):
        detail = f"link target {target!r} lies outside the source; not followed"
        return _Skip(QuarantineReason.LINK_OUTSIDE_ROOT, detail)
    return mode, real


def _read_file(path: Path) -> bytes:
    """The bytes of a regular file. Opened non-blocking, so a FIFO swapped in since the listing
    cannot block; anything but a regular file raises :class:`_NotRegularFile`."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise _NotRegularFile(_special_kind(mode))
        return handle.read()


class _NotRegularFile(Exception):
    """A listed path turned out not to be a regular file when it was opened."""


def _read_local(root: Path, rel_paths: list[str], skip: SkipHandler) -> Iterator[SourceFile]:
    """Read the listed files lazily; vanished files are skipped with a warning, unreadable ones
    and special files go to ``skip``."""
    for rel in rel_paths:
        path = root.joinpath(*rel.split("/"))
        try:
            data = _read_file(path)
        except _NotRegularFile as exc:
            _skipped(skip, path, rel, QuarantineReason.SPECIAL_FILE, f"{exc}: never read")
            continue
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                log.warning("skipping %s: vanished since it was listed", path)
                continue
            if exc.errno == errno.ELOOP:
                _skipped(skip, path, rel, QuarantineReason.LINK_LOOP, "symbolic link loop")
                continue
            _skipped(skip, path, rel, QuarantineReason.UNREADABLE, _os_reason(exc))
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


def _shown(exc: Exception) -> str:
    """A botocore error for a message: it names the endpoint's URL, whose credentials are
    redacted."""
    return redact(str(exc))


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
        raise SourceError(f"cannot list s3://{bucket}/{prefix}: {code or _shown(exc)}") from exc
    except BotoCoreError as exc:
        raise SourceError(f"cannot list s3://{bucket}/{prefix}: {_shown(exc)}") from exc
    return sorted(keys)


def _read_s3(
    client: Any, bucket: str, prefix: str, keys: list[str], skip: SkipHandler
) -> Iterator[SourceFile]:
    """Download the listed objects lazily; objects deleted since listing are skipped, objects
    the credentials may not read go to ``skip``."""
    from botocore.exceptions import BotoCoreError, ClientError

    for key in keys:
        rel, uri = key[len(prefix) :], f"s3://{bucket}/{key}"
        try:
            response = client.get_object(Bucket=bucket, Key=key)
            data = response["Body"].read()
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404"):
                log.warning("skipping %s: deleted since listing", uri)
                continue
            if code in ("AccessDenied", "403"):
                log.warning("skipping %s (unreadable): access denied", uri)
                skip(QuarantineRecord(uri, rel, QuarantineReason.UNREADABLE, "access denied"))
                continue
            raise SourceError(f"cannot read {uri}: {code or _shown(exc)}") from exc
        except BotoCoreError as exc:  # network or credentials failure mid-run
            raise SourceError(f"cannot read {uri}: {_shown(exc)}") from exc
        yield SourceFile(rel_path=rel, uri=uri, data=data)
