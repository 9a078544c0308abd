"""Where the project's shipped files live. Pure path arithmetic: safe at DAG-parse time."""

from __future__ import annotations

import os
import re
from pathlib import Path

_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]


def sample_corpus_dir() -> Path:
    """The fictional handbook shipped with the project (the nightly job's default input)."""
    return REPO_ROOT / "sample" / "corpus"


def sample_qa_set() -> Path:
    """The hand-written QA set over the sample corpus."""
    return REPO_ROOT / "sample" / "qa" / "handbook_qa.jsonl"


def shared_dir() -> Path | None:
    """The ``../shared`` data folder beside the repo (or ``RAGTRAIL_SHARED_DIR``), if present."""
    explicit = os.environ.get("RAGTRAIL_SHARED_DIR")
    candidate = Path(explicit) if explicit else REPO_ROOT.parent / "shared"
    return candidate if candidate.is_dir() else None


def safe_name(text: str) -> str:
    """``text`` usable as a path segment or key: runs of other characters than letters, digits,
    ``_ . -`` become one ``_``, and outer ``_`` are dropped (may be empty)."""
    return _UNSAFE_CHARS.sub("_", text).strip("_")
