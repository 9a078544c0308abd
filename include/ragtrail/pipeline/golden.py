"""Registering golden QA sets as a pipeline step: validate, gate on data quality, store, record.

``ragtrail qaset add`` and the ingest's ``golden`` step (:func:`register_corpus_golden_sets`: the
configured ``golden_sets`` of the corpus, the step's own files, and the shipped sample set on the
shipped sample corpus) all go through :func:`register_golden_set`: the file is loaded and checked against the
corpus (:mod:`ragtrail.testset.golden`), validated with the golden-set GX suite before anything is
stored (a failed fail-severity expectation refuses the set), and the validation result is kept as
an artifact beside the version (``golden/<corpus>/<name>/<version>/quality.json``). Adding the same
content again reuses that stored result instead of validating again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ragtrail.artifact_keys import golden_quality_key
from ragtrail.jsonsafe import JsonObject
from ragtrail.paths import sample_corpus_dir, sample_qa_set
from ragtrail.records import QAItem
from ragtrail.runtime import Runtime
from ragtrail.summaries.qa_sets import GoldenRegistration
from ragtrail.summaries.quality_summary import ValidationResult
from ragtrail.testset.golden import (
    DuplicateContentError,
    GoldenSetError,
    GoldenSetStore,
    add_golden_set,
    item_record,
    version_for,
)

SAMPLE_GOLDEN_SET = "handbook-sample"
"""The golden-set name the shipped sample QA set gets on the shipped sample corpus."""
GOLDEN_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".parquet")
"""The QA-set formats a folder of golden sets is searched for."""


def golden_name_for(path: str | Path) -> str:
    """A set name from a file name: its stem as a lowercase slug (``Team QA.csv`` -> ``team-qa``;
    ``qa-set`` when nothing is left). Not validated: :func:`check_name` does that on add."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", Path(path).stem.lower()).strip("-._")[:64]
    return slug or "qa-set"


def validate_golden_items(rt: Runtime, items: Sequence[QAItem], name: str) -> ValidationResult:
    """Run the golden-set suite on ``items``."""
    from ragtrail.quality.runner import QualityRunner
    from ragtrail.quality.suites import golden_set_suite, prepare_golden_set

    frame = pd.DataFrame([item_record(item) for item in items])
    runner = QualityRunner(rt.settings.home / "reports" / "golden")
    result = runner.validate(f"golden_set.{name}", prepare_golden_set(frame), golden_set_suite())
    return ValidationResult.from_json(result.as_dict())


def register_golden_set(
    rt: Runtime, path: str | Path, *, corpus: str, name: str
) -> GoldenRegistration:
    """Add the file at ``path`` as golden set ``name`` of ``corpus`` (idempotent); the version
    with whether this call created it and its GX result. Raises :class:`GoldenSetError` listing
    every problem."""
    store = GoldenSetStore(rt.engine)
    gate: JsonObject = {}

    def quality_gate(items: list[QAItem]) -> None:
        key = golden_quality_key(corpus, name, version_for(items))
        stored = rt.artifacts.exists(key)  # this content was added under this name before
        if stored:
            quality = ValidationResult.from_json(rt.artifacts.get_bytes(key))
        else:
            quality = validate_golden_items(rt, items, name)
        if not quality.success:
            raise GoldenSetError(
                f"{path}: the golden-set data-quality checks failed: " + "; ".join(quality.failures)
            )
        gate.update(key=key, quality=quality, stored=stored)

    added = add_golden_set(store, rt.store, path, corpus=corpus, name=name, check=quality_gate)
    if gate["stored"]:
        uri = rt.artifacts.uri_for(gate["key"])
    else:
        uri = rt.artifacts.put_bytes(gate["key"], gate["quality"].dumps(indent=1).encode())
    return GoldenRegistration(
        **added.version.as_dict(), created=added.created, quality=gate["quality"], quality_uri=uri
    )


@dataclass
class CorpusGoldenSets:
    """What one ``golden`` step registered, notes on what it left alone, and the files it
    refused with the reason (``{"path", "error"}``)."""

    registered: list[GoldenRegistration] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {
            "golden": [g.to_json() for g in self.registered],
            "notes": list(self.notes),
            "refused": list(self.refused),
        }


def golden_files(paths: Sequence[str | Path]) -> tuple[list[Path], list[dict[str, str]]]:
    """``paths`` with each folder replaced by its QA-set files (sorted, recursively), and the
    refusals (``{"path", "error"}``): a missing path, a folder with no QA-set file, a file whose
    set name an earlier file already has."""
    files: list[Path] = []
    refused: list[dict[str, str]] = []
    names: dict[str, Path] = {}
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in GOLDEN_SUFFIXES
            )
            if not found:
                error = f"{path}: a golden-set folder with no {'/'.join(GOLDEN_SUFFIXES)} file"
                refused.append({"path": str(path), "error": error})
        elif path.is_file():
            found = [path]
        else:
            found = []
            refused.append({"path": str(path), "error": f"{path}: no such file or folder"})
        for file in found:
            name = golden_name_for(file)
            other = names.setdefault(name, file)
            if other == file:
                files.append(file)
            else:
                error = (
                    f"{file}: golden set {name!r} is already {other} (a set's name is its file "
                    "stem): rename one"
                )
                refused.append({"path": str(file), "error": error})
    return files, refused


def register_corpus_golden_sets(
    rt: Runtime, corpus: str, source: str, extra: Sequence[str | Path] = ()
) -> CorpusGoldenSets:
    """Register the golden sets of ``corpus`` (idempotent): the shipped sample set when
    ``source`` is the shipped sample corpus, the configured ``golden_sets[corpus]`` and
    ``extra`` files or folders. An unchanged file keeps its version; a changed one becomes a
    new version of its name. The sample set is left alone when its content is already
    registered under another name (a note says so).

    A file that cannot be registered (missing, bad rows, unknown ground documents, failed
    data-quality checks, a name another file has) is refused with its reason and the others go
    on, as a bad document is quarantined and the ingest goes on: the corpus is still announced
    and the set's earlier versions are still evaluated."""
    out = CorpusGoldenSets()
    if is_sample_corpus(source):
        try:
            out.registered.append(
                register_golden_set(rt, sample_qa_set(), corpus=corpus, name=SAMPLE_GOLDEN_SET)
            )
        except DuplicateContentError as exc:
            out.notes.append(
                f"golden set {SAMPLE_GOLDEN_SET}: the sample set is registered as {exc.existing}"
            )
    files, out.refused = golden_files([*rt.settings.golden_sets.get(corpus, []), *extra])
    for path in files:
        try:
            out.registered.append(
                register_golden_set(rt, path, corpus=corpus, name=golden_name_for(path))
            )
        except GoldenSetError as exc:
            out.refused.append({"path": str(path), "error": str(exc)})
    return out


def is_sample_corpus(source: str) -> bool:
    """Whether ``source`` is the shipped sample corpus folder."""
    return "://" not in source and Path(source).resolve() == sample_corpus_dir().resolve()
