"""Registering golden QA sets as a pipeline step: validate, gate on data quality, store, record.

``ragtrail qaset add``, ``ragtrail nightly --golden`` and the nightly's registration of the shipped
sample set all go through :func:`register_golden_set`: the file is loaded and checked against the
corpus (:mod:`ragtrail.testset.golden`), validated with the golden-set GX suite before anything is
stored (a failed fail-severity expectation refuses the set), and the validation result is kept as
an artifact beside the version (``golden/<corpus>/<name>/<version>/quality.json``). Adding the same
content again reuses that stored result instead of validating again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ragtrail.artifact_keys import golden_quality_key
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import QAItem
from ragtrail.runtime import Runtime
from ragtrail.summaries.qa_sets import GoldenRegistration
from ragtrail.summaries.quality_summary import ValidationResult
from ragtrail.testset.golden import (
    GoldenSetError,
    GoldenSetStore,
    add_golden_set,
    item_record,
    version_for,
)


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
