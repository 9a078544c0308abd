"""One Great Expectations validation as the report and the CLI read it: its name, whether every
fail-severity expectation held, the failed and warned expectations, and the counts."""

from __future__ import annotations

from ragtrail.summaries.base import Record


class ValidationResult(Record):
    """The ragtrail gate's reading of one suite run (``QualityResult.as_dict`` in
    :mod:`ragtrail.quality.runner`; stored beside snapshots, test sets and golden sets)."""

    name: str
    success: bool
    failures: list[str]
    warnings: list[str]
    statistics: dict[str, int]
    suite_name: str
    validation_name: str

    @property
    def verdict(self) -> str:
        """``passed``, ``passed with warnings`` or ``FAILED``."""
        if not self.success:
            return "FAILED"
        return "passed with warnings" if self.warnings else "passed"

    @property
    def met(self) -> int:
        return self.statistics.get("successful", 0)

    @property
    def evaluated(self) -> int:
        return self.statistics.get("evaluated", 0)


class CorpusQuality(Record):
    """A snapshot's Great Expectations checks (documents, chunks, quarantine): whether every
    fail-severity expectation held, where the Data Docs are (local path, uploaded URI) and each
    validation."""

    success: bool
    data_docs_path: str
    data_docs_uri: str
    validations: list[ValidationResult]
