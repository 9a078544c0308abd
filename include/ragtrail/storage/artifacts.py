"""Artifact storage: manifests, reports, Data Docs and index files, on local disk or S3.

Keys are POSIX relative paths ("reports/2024-06-01/index.html"); keys that are absolute or contain
".." are refused with ValueError. A prefix names a directory: ``list("reports")`` returns keys
under "reports/". The ``put_*`` methods return the stored object's URI (a local path or s3://...).
S3 credentials come only from the standard AWS chain (environment, config files, instance role).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from ragtrail.redact import redact
from ragtrail.storage.s3uri import is_s3_uri, parse_s3_uri

DEFAULT_MULTIPART_THRESHOLD = 8 * 1024 * 1024
S3_MIN_PART_SIZE = 5 * 1024 * 1024
_TMP_PREFIX = ".ragtrail-tmp-"


@runtime_checkable
class ArtifactStore(Protocol):
    """A flat key -> bytes store rooted at :attr:`uri`."""

    uri: str

    def uri_for(self, key: str) -> str: ...

    def put_bytes(self, key: str, data: bytes) -> str: ...

    def put_file(self, key: str, path: str | os.PathLike[str]) -> str: ...

    def put_tree(self, prefix: str, local_dir: str | os.PathLike[str]) -> str: ...

    def get_bytes(self, key: str) -> bytes: ...

    def download_file(self, key: str, path: str | os.PathLike[str]) -> None: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str = "") -> list[str]: ...

    def delete_prefix(self, prefix: str) -> int: ...


def normalize_key(key: str) -> str:
    """Validate a key and return its canonical form ("a//b/./c" -> "a/b/c")."""
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"artifact key must be a non-empty string, got {key!r}")
    if "\\" in key or "\x00" in key:
        raise ValueError(f"artifact key must be a POSIX path: {key!r}")
    path = PurePosixPath(key)
    if path.is_absolute():
        raise ValueError(f"artifact key must be relative: {key!r}")
    if ".." in path.parts:
        raise ValueError(f"artifact key must not contain '..': {key!r}")
    if not path.parts:
        raise ValueError(f"artifact key is empty: {key!r}")
    return path.as_posix()


def normalize_prefix(prefix: str) -> str:
    """Like :func:`normalize_key`, but "" (the whole store) is allowed."""
    return "" if prefix in ("", ".", "./") else normalize_key(prefix)


def _join(prefix: str, rel: str) -> str:
    """Join two normalised POSIX fragments, either of which may be empty."""
    return f"{prefix}/{rel}" if prefix and rel else prefix or rel


def _tree_files(local_dir: Path) -> Iterator[tuple[str, Path]]:
    """(relative POSIX path, file) for every regular file under ``local_dir``, sorted."""
    if not local_dir.is_dir():
        raise NotADirectoryError(f"not a directory: {local_dir}")
    for path in sorted(local_dir.rglob("*")):
        if path.is_file():
            yield path.relative_to(local_dir).as_posix(), path


class LocalArtifactStore:
    """Artifacts as files under ``root``; every write is atomic (temp file + os.replace)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.uri = str(self.root)

    def path_for(self, key: str) -> Path:
        """The local file that holds ``key``."""
        return self.root / normalize_key(key)

    def uri_for(self, key: str) -> str:
        return str(self.path_for(key))

    def put_bytes(self, key: str, data: bytes) -> str:
        target = self.path_for(key)
        _atomic_write(target, lambda f: f.write(data))
        return str(target)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> str:
        target = self.path_for(key)
        with open(path, "rb") as src:
            _atomic_write(target, lambda f: shutil.copyfileobj(src, f, 1024 * 1024))
        return str(target)

    def put_tree(self, prefix: str, local_dir: str | os.PathLike[str]) -> str:
        """Copy every file under ``local_dir`` to ``prefix/<relative path>`` (files are added or
        overwritten; other keys under the prefix stay)."""
        prefix = normalize_prefix(prefix)
        for rel, path in _tree_files(Path(local_dir)):
            self.put_file(_join(prefix, rel), path)
        return str(self.root / prefix) if prefix else self.uri

    def get_bytes(self, key: str) -> bytes:
        return self.path_for(key).read_bytes()

    def download_file(self, key: str, path: str | os.PathLike[str]) -> None:
        with open(self.path_for(key), "rb") as src:
            _atomic_write(Path(path), lambda f: shutil.copyfileobj(src, f, 1024 * 1024))

    def exists(self, key: str) -> bool:
        return self.path_for(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix`` (a directory), sorted; in-progress temp files are skipped."""
        base = self.root / normalize_prefix(prefix)
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(_TMP_PREFIX)
        )

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix`` (not "" — refuse to wipe the store); returns count."""
        base = self.root / normalize_key(prefix)
        if base.is_file():
            base.unlink()
            return 1
        if not base.is_dir():
            return 0
        count = sum(1 for p in base.rglob("*") if p.is_file())
        shutil.rmtree(base)
        return count


def _atomic_write(target: Path, write: Any) -> None:
    """Write ``target`` through a temp file in the same directory, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


class S3ArtifactStore:
    """Artifacts as objects under ``s3://bucket/prefix``; big files use multipart uploads."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        client: Any = None,
    ) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        if not bucket:
            raise ValueError("S3 bucket name is empty")
        self.bucket = bucket
        self.prefix = normalize_prefix(prefix.strip("/"))
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        if client is None:
            # Custom endpoints (moto, MinIO, ...) generally need path-style addressing.
            config = Config(s3={"addressing_style": "path"}) if endpoint_url else None
            client = boto3.client("s3", endpoint_url=endpoint_url, config=config)
        self.client = client
        self.transfer_config = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=max(multipart_threshold, S3_MIN_PART_SIZE),
        )

    def object_key(self, key: str) -> str:
        """The full S3 object key for store key ``key``."""
        return _join(self.prefix, normalize_key(key))

    def uri_for(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.object_key(key)}"

    def put_bytes(self, key: str, data: bytes) -> str:
        self.client.put_object(Bucket=self.bucket, Key=self.object_key(key), Body=data)
        return self.uri_for(key)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> str:
        """Upload a file; above ``multipart_threshold`` bytes it goes up in parts."""
        self.client.upload_file(
            os.fspath(path), self.bucket, self.object_key(key), Config=self.transfer_config
        )
        return self.uri_for(key)

    def put_tree(self, prefix: str, local_dir: str | os.PathLike[str]) -> str:
        """Upload every file under ``local_dir`` to ``prefix/<relative path>``."""
        prefix = normalize_prefix(prefix)
        for rel, path in _tree_files(Path(local_dir)):
            self.put_file(_join(prefix, rel), path)
        full = _join(self.prefix, prefix)
        return f"s3://{self.bucket}/{full}" if full else f"s3://{self.bucket}"

    def get_bytes(self, key: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.object_key(key))
        except self.client.exceptions.NoSuchKey as exc:
            raise FileNotFoundError(self.uri_for(key)) from exc
        body: IO[bytes] = response["Body"]
        return body.read()

    def download_file(self, key: str, path: str | os.PathLike[str]) -> None:
        from botocore.exceptions import ClientError

        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.client.download_file(
                self.bucket, self.object_key(key), str(target), Config=self.transfer_config
            )
        except ClientError as exc:
            if _is_not_found(exc):
                raise FileNotFoundError(self.uri_for(key)) from exc
            raise

    def exists(self, key: str) -> bool:
        return self._object_exists(self.object_key(key))

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix`` (a directory), relative to the store, sorted."""
        return sorted(self._iter_object_keys(prefix, relative=True))

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (not "" — refuse to wipe the store)."""
        normalize_key(prefix)
        keys = list(self._iter_object_keys(prefix, relative=False))
        exact = self.object_key(prefix)
        if self._object_exists(exact):
            keys.append(exact)
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            response = self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
            )
            if response.get("Errors"):
                raise OSError(f"S3 delete failed: {response['Errors'][:5]}")
        return len(keys)

    def _iter_object_keys(self, prefix: str, *, relative: bool) -> Iterator[str]:
        rel_prefix = normalize_prefix(prefix)
        full = _join(self.prefix, rel_prefix)
        s3_prefix = f"{full}/" if full else ""
        strip = len(f"{self.prefix}/") if self.prefix else 0
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=s3_prefix):
            for obj in page.get("Contents", []):
                yield obj["Key"][strip:] if relative else obj["Key"]

    def _object_exists(self, object_key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=object_key)
        except ClientError as exc:
            if _is_not_found(exc):
                return False
            raise
        return True


def _is_not_found(exc: Any) -> bool:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    return code in {"404", "NoSuchKey", "NotFound"}


def open_artifact_store(uri: str, *, s3_endpoint_url: str | None = None) -> ArtifactStore:
    """The artifact store for ``uri``: ``s3://bucket/prefix``, ``file:///path`` or a local path."""
    if is_s3_uri(uri):
        bucket, prefix = parse_s3_uri(uri)
        return S3ArtifactStore(bucket, prefix, endpoint_url=s3_endpoint_url)
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return LocalArtifactStore(unquote(parsed.path))
    if parsed.scheme and len(parsed.scheme) > 1:  # one letter: a Windows drive, i.e. a path
        raise ValueError(f"unsupported artifact store URI scheme {parsed.scheme!r}: {redact(uri)}")
    return LocalArtifactStore(uri)
