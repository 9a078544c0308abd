"""The one parser of ``s3://bucket/prefix`` URIs (artifact store, document sources, model cache).

Everything after ``s3://bucket/`` is taken literally as the key prefix: S3 keys may contain
``?`` and ``#``, so the URI is not split into query and fragment the way URLs are.
"""

from __future__ import annotations

from typing import NamedTuple

SCHEME = "s3://"


class S3Uri(NamedTuple):
    """A parsed ``s3://`` URI: the bucket and the key prefix without outer slashes."""

    bucket: str
    prefix: str

    @property
    def key_prefix(self) -> str:
        """The prefix as a directory: ``""`` or ending in ``"/"``, so ``s3://b/docs`` lists
        ``docs/...`` and not ``docs-old/...``."""
        return f"{self.prefix}/" if self.prefix else ""

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"


def is_s3_uri(uri: str) -> bool:
    """Whether ``uri`` names an S3 location (scheme compared case-insensitively)."""
    return uri[: len(SCHEME)].lower() == SCHEME


def parse_s3_uri(uri: str) -> S3Uri:
    """Split ``s3://bucket/some/prefix/`` into ``S3Uri("bucket", "some/prefix")``.

    Raises ValueError when ``uri`` is not an ``s3://`` URI or names no bucket.
    """
    if not is_s3_uri(uri):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, prefix = uri[len(SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {uri!r}")
    return S3Uri(bucket, prefix.strip("/"))
