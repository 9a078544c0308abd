"""Bundles in the artifact store, content-addressed and checked on the way back.

A registered bundle is uploaded under ``<prefix>/<digest>/`` with a ``MANIFEST.json`` listing
every file's size and SHA-256; the digest is the SHA-256 of that file list, so the same bundle
registered twice is stored once and a version's identity is its content. The manifest is written
last: a prefix without one is an interrupted upload and is uploaded again.

Downloads go into a per-version cache directory through a temporary sibling that is renamed
into place only after every file matched the manifest, so a cache directory is either complete
and verified or absent. A cached copy is checked again before it is handed out (adapters are a
few megabytes; hashing them costs milliseconds and catches a corrupted or edited cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from ragtrail.artifact_keys import bundle_key
from ragtrail.jsonsafe import JsonObject
from ragtrail.models.registry import BundleIntegrityError
from ragtrail.storage.artifacts import ArtifactStore, open_artifact_store

MANIFEST = "MANIFEST.json"
MANIFEST_FORMAT = "ragtrail-bundle-manifest/1"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def bundle_files(root: Path) -> dict[str, JsonObject]:
    """``{relative posix path: {"bytes", "sha256"}}`` of every file under ``root`` (sorted)."""
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == MANIFEST:
            continue
        files[rel] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
    if not files:
        raise BundleIntegrityError(f"{root}: no files to register")
    return files


def files_digest(files: dict[str, JsonObject]) -> str:
    """SHA-256 of the canonical JSON of a file list: the bundle's content identity."""
    canonical = json.dumps(files, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def upload_bundle(store: ArtifactStore, prefix: str, bundle_dir: Path) -> tuple[str, str]:
    """Upload ``bundle_dir`` under ``<prefix>/<digest>``; return ``(uri, digest)``.

    Skips the upload when a complete copy (its manifest) is already there."""
    files = bundle_files(bundle_dir)
    digest = files_digest(files)
    key = bundle_key(prefix, digest)
    if not store.exists(f"{key}/{MANIFEST}"):
        for rel in files:
            store.put_file(f"{key}/{rel}", bundle_dir / rel)
        manifest = {"format": MANIFEST_FORMAT, "digest": digest, "files": files}
        store.put_bytes(f"{key}/{MANIFEST}", json.dumps(manifest, indent=2).encode("utf-8"))
    return store.uri_for(key), digest


def verify_bundle_dir(root: Path, digest: str) -> list[str]:
    """Every way ``root`` differs from the manifest of ``digest`` (empty when it matches)."""
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        return [f"{MANIFEST} missing"]
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        expected: dict[str, JsonObject] = manifest["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return [f"{MANIFEST} unreadable ({exc})"]
    problems = []
    if files_digest(expected) != digest:
        problems.append(f"manifest digest {files_digest(expected)[:12]} != {digest[:12]}")
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    present.discard(MANIFEST)
    for rel in sorted(set(expected) - present):
        problems.append(f"{rel}: missing")
    for rel in sorted(present - set(expected)):
        problems.append(f"{rel}: not in the manifest")
    for rel in sorted(set(expected) & present):
        if file_sha256(root / rel) != expected[rel]["sha256"]:
            problems.append(f"{rel}: content differs from the registered bytes")
    return problems


def fetch_bundle(
    source_uri: str, dest: Path, digest: str, *, s3_endpoint_url: str | None = None
) -> Path:
    """A verified local copy of the bundle at ``source_uri`` in ``dest`` (reused when valid).

    Raises :class:`BundleIntegrityError` listing every mismatch when the stored bundle does not
    match ``digest``; a stale or damaged cache is replaced, never used."""
    if dest.is_dir():
        if not verify_bundle_dir(dest, digest):
            return dest
        shutil.rmtree(dest)
    store = open_artifact_store(source_uri, s3_endpoint_url=s3_endpoint_url)
    keys = store.list("")
    if MANIFEST not in keys:
        raise BundleIntegrityError(f"{source_uri}: no {MANIFEST}; the upload never completed")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        for key in keys:
            store.download_file(key, tmp / key)
        problems = verify_bundle_dir(tmp, digest)
        if problems:
            raise BundleIntegrityError(
                f"{source_uri} does not match its registered digest {digest[:12]}: "
                + "; ".join(problems)
            )
        with contextlib.suppress(FileExistsError, OSError):
            tmp.rename(dest)  # a concurrent download may have won; its copy is as good
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if verify_bundle_dir(dest, digest):
        raise BundleIntegrityError(f"{dest}: cached bundle does not match {digest[:12]}")
    return dest
