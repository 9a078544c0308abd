"""The settings of one citation-model training run, as one typed, immutable value.

:class:`CitationTrainingConfig` is the nightly's ``settings.citation_training``
(:class:`ragtrail.config.CitationTrainingSettings`, whose fields and descriptions it shares)
frozen, so a DAG or the CLI builds and validates it without loading torch, and it is recorded
whole in the trained model's lineage.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from ragtrail.config import CitationTrainingSettings, Settings
from ragtrail.jsonsafe import JsonObject
from ragtrail.redact import redact


class CitationTrainingConfig(CitationTrainingSettings):
    """One run's settings (see :class:`ragtrail.config.CitationTrainingSettings`); frozen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> CitationTrainingConfig:
        """The configured values (``settings.citation_training``), with ``overrides`` applied."""
        return cls(**{**settings.citation_training.model_dump(), **overrides})

    def as_dict(self) -> JsonObject:
        """The settings as recorded in lineage: the teacher's spec redacted (no credentials of
        its URL; :func:`ragtrail.redact.redact`)."""
        data = self.model_dump(mode="json")
        if isinstance(data.get("teacher"), str):
            data["teacher"] = redact(data["teacher"])
        return data
