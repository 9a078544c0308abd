"""The one local cache of model files, for every model kind (embedders, LLMs, adapters, judges).

One cache root (:func:`default_model_cache`, i.e. ``settings.resolved_model_cache_dir``), one way
to mirror an ``s3://`` prefix into it (:func:`mirror_s3_prefix`) and one error type
(:class:`ModelFetchError`). Loaders that build a cached copy some other way (e.g. the GGUF
conversion of the builtin SmolLM2) use the same lock / publish / marker helpers, so that:

- two processes starting at once neither corrupt a copy nor both pay for it: the work runs under
  a file lock beside the target, the second process waits and then finds the finished copy;
- a copy is published with an atomic rename and is complete only once its marker file
  (:data:`COMPLETE_MARKER`, written last) exists; a directory without it is never used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from filelock import FileLock

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import sha256_text
from ragtrail.redact import redact
from ragtrail.storage.s3uri import parse_s3_uri

log = logging.getLogger(__name__)

COMPLETE_MARKER = "ragtrail_complete.json"
"""Written last inside a finished copy; a directory without it is never used."""
S3_SUBDIR = "s3"
"""Mirrors of ``s3://bucket/prefix`` live under ``<cache>/s3/<bucket>/<prefix>-<hash>``."""


class ModelFetchError(RuntimeError):
    """A model could not be fetched or loaded; the message says what to provide instead."""


class MirroredPrefix(NamedTuple):
    """A complete local copy of an S3 prefix and the digest of the listing it was made from."""

    path: Path
    digest: str


def default_model_cache() -> Path:
    """The configured model cache (``settings.resolved_model_cache_dir``): ``model_cache_dir``
    (``RAGTRAIL_MODEL_CACHE_DIR`` or the YAML file), else ``$RAGTRAIL_HOME/models``."""
    from ragtrail.config import Settings

    return Settings().resolved_model_cache_dir


def cache_root(cache_dir: Path | str | None) -> Path:
    """``cache_dir`` as a Path, or the configured default when it is None."""
    return Path(cache_dir) if cache_dir is not None else default_model_cache()


def read_marker(directory: Path) -> JsonObject | None:
    """The marker of a complete copy, or None when ``directory`` is absent or unfinished."""
    marker = directory / COMPLETE_MARKER
    if not marker.is_file():
        return None
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_marker(directory: Path, info: JsonObject) -> None:
    """Mark ``directory`` complete; call it last, inside :func:`publishing`."""
    (directory / COMPLETE_MARKER).write_text(json.dumps(info, indent=2), encoding="utf-8")


def target_lock(target: Path) -> FileLock:
    """The inter-process lock that guards building ``target`` (a file beside it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(target.parent / f".{target.name}.lock"))


@contextmanager
def publishing(target: Path) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``target``; on success it replaces ``target``.

    The caller must hold :func:`target_lock`, so any older temporary directory of the same target
    is debris from a crashed process and is removed first. A failure leaves ``target`` untouched
    and removes the temporary directory.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f".{target.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- s3://


def s3_mirror_dir(uri: str, cache_dir: Path | str | None = None) -> Path:
    """Where the mirror of ``uri`` lives: readable bucket and prefix, plus a hash of the URI."""
    bucket, prefix = parse_s3_uri(uri)
    name = f"{(prefix or 'root').replace('/', '__')}-{sha256_text(uri)[:16]}"
    return cache_root(cache_dir) / S3_SUBDIR / bucket / name


def mirror_s3_prefix(
    uri: str, cache_dir: Path | str | None = None, *, endpoint_url: str | None = None
) -> MirroredPrefix:
    """Mirror every object under ``s3://bucket/prefix`` into the model cache.

    The digest hashes the listing (keys, sizes, ETags): an unchanged prefix is not downloaded
    again, a changed one is re-fetched as a whole. If S3 cannot be listed but a complete copy
    exists, that copy is used (with a warning), so a cached model survives an object-store
    outage. Keys that would land outside the copy (``..``), collide with the marker or name
    nothing are refused. Every failure is a :class:`ModelFetchError`.
    """
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        bucket, prefix = parse_s3_uri(uri)
    except ValueError as exc:
        raise ModelFetchError(str(exc)) from exc
    target = s3_mirror_dir(uri, cache_dir)
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    client = boto3.client("s3", endpoint_url=endpoint)
    try:
        listing = _list_objects(client, bucket, prefix)
    except (BotoCoreError, ClientError) as exc:
        marker = read_marker(target)
        if marker is not None and "digest" in marker:
            shown = redact(str(exc))  # a botocore error names the endpoint's URL
            log.warning("cannot list %s (%s); using the cached copy in %s", uri, shown, target)
            return MirroredPrefix(target, str(marker["digest"]))
        raise ModelFetchError(
            f"cannot list {uri} (endpoint {redact(endpoint or 'AWS default')}) and no complete "
            f"copy is cached in {target}: {redact(str(exc))}"
        ) from exc
    if not listing:
        raise ModelFetchError(f"no objects under {uri}; upload the model directory's files there")
    digest = sha256_text(json.dumps(listing, sort_keys=True))
    files = _relative_paths(uri, prefix, [key for key, _size, _etag in listing])
    if _is_current(target, digest):
        return MirroredPrefix(target, digest)
    with target_lock(target):
        if _is_current(target, digest):  # another process finished while we waited
            return MirroredPrefix(target, digest)
        with publishing(target) as tmp:
            for (key, _size, _etag), rel in zip(listing, files, strict=True):
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    _download(client, bucket, key, dest)
                except (BotoCoreError, ClientError) as exc:
                    raise ModelFetchError(
                        f"download of s3://{bucket}/{key} failed: {redact(str(exc))}"
                    ) from exc
            manifest = {
                rel: [etag, size] for (_key, size, etag), rel in zip(listing, files, strict=True)
            }
            write_marker(
                tmp, {"uri": uri, "digest": digest, "objects": len(listing), "manifest": manifest}
            )
        log.info("mirrored %s (%d objects) to %s", uri, len(listing), target)
    return MirroredPrefix(target, digest)


def _is_current(target: Path, digest: str) -> bool:
    marker = read_marker(target)
    return marker is not None and marker.get("digest") == digest


def _relative_paths(uri: str, prefix: str, keys: list[str]) -> list[str]:
    """Each key's path inside the copy; refuses keys that could escape it or clobber the marker."""
    key_prefix = f"{prefix}/" if prefix else ""
    out = []
    for key in keys:
        rel = key[len(key_prefix) :]
        parts = rel.split("/")
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ModelFetchError(f"refusing unsafe object key under {uri}: {key!r}")
        if rel == COMPLETE_MARKER or "\\" in rel or "\x00" in rel:
            raise ModelFetchError(f"refusing unsafe object key under {uri}: {key!r}")
        out.append(rel)
    return out


def _download(client: Any, bucket: str, key: str, dest: Path) -> None:
    """Fetch one object to a local file (a seam for tests that count downloads)."""
    client.download_file(bucket, key, str(dest))


def _list_objects(client: Any, bucket: str, prefix: str) -> list[tuple[str, int, str]]:
    """Sorted (key, size, ETag) of every object under the prefix; folder placeholders skipped."""
    kwargs: dict[str, str] = {"Bucket": bucket}
    if prefix:
        kwargs["Prefix"] = prefix + "/"
    out: list[tuple[str, int, str]] = []
    for page in client.get_paginator("list_objects_v2").paginate(**kwargs):
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith("/"):
                out.append((obj["Key"], int(obj.get("Size", 0)), str(obj.get("ETag", ""))))
    return sorted(out)


def directory_digest(path: Path | str) -> str:
    """SHA-256 over the relative names and bytes of every file under ``path`` (sorted)."""
    root = Path(path)
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(root)).encode("utf-8") + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off (``HF_HUB_OFFLINE``): load local files only."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
