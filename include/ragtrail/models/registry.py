"""The model registry protocol: versioned model bundles, ``champion``/``challenger`` aliases,
gate decisions and the alias history that makes a rollback possible.

A registered model (``ragtrail-citation``, ``ragtrail-generator``) has numbered versions; each
version is one model bundle (:mod:`ragtrail.models.bundle`) with its lineage. Two aliases matter:
``champion`` is what production answers with (``registry:<name>@champion``), ``challenger`` is a
candidate waiting for (or refused by) the promotion gate. Every alias change is an
:class:`AliasEvent` kept with the model, so ``rollback`` knows who held ``champion`` before.

:func:`promote` and :func:`rollback` are written against the protocol, once, so every backend
moves aliases with the same rules. The MLflow implementation is
:class:`ragtrail.models.mlflow_registry.MlflowModelRegistry`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ragtrail.jsonsafe import JsonObject

CHAMPION = "champion"
CHALLENGER = "challenger"

VersionStatus = Literal[
    "registered", "challenger", "champion", "rejected", "retired", "rolled_back"
]
"""A version's place in the lifecycle, as the registry last left it."""

AliasAction = Literal["set", "delete", "promote", "rollback"]

_ALIAS = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,62}$")
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class RegistryError(ValueError):
    """A registry request that cannot be honoured (unknown model, version or alias, bad input)."""


class BundleIntegrityError(RegistryError):
    """A downloaded bundle does not match the content digest recorded at registration."""


@dataclass(frozen=True)
class ModelVersion:
    """One registered version of a model.

    Attributes:
        source: where the bundle lives (a local path or ``s3://`` URI in the artifact store).
        digest: SHA-256 over the bundle's file manifest; the content identity of the version.
        lineage: the full lineage (base model, data version and split, config, seeds, metrics)
            when it was read (:meth:`ModelRegistry.get_version`); None when only listed.
        status: see :data:`VersionStatus`.
    """

    name: str
    version: int
    kind: str
    source: str
    digest: str
    aliases: tuple[str, ...]
    status: str
    description: str
    created_at: datetime
    tags: dict[str, str] = field(default_factory=dict)
    lineage: JsonObject | None = None
    run_id: str | None = None

    @property
    def base_model(self) -> str:
        return self.tags.get("ragtrail.base_model", "")

    def as_dict(self) -> JsonObject:
        """Plain-JSON view (dates as ISO strings)."""
        out = asdict(self)
        out["aliases"] = list(self.aliases)
        out["created_at"] = self.created_at.isoformat()
        return out


@dataclass(frozen=True)
class RegisteredModel:
    """A model name with its aliases (alias -> version) and version count."""

    name: str
    kind: str
    description: str
    aliases: dict[str, int]
    latest_version: int | None
    n_versions: int

    def as_dict(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True)
class AliasEvent:
    """One change of an alias: ``alias`` moved from ``previous`` to ``version`` (None = unset)."""

    at: datetime
    name: str
    alias: str
    action: str
    version: int | None
    previous: int | None
    actor: str
    reason: str

    def as_dict(self) -> JsonObject:
        out = asdict(self)
        out["at"] = self.at.isoformat()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AliasEvent:
        return cls(
            at=datetime.fromisoformat(str(data["at"])),
            name=str(data["name"]),
            alias=str(data["alias"]),
            action=str(data["action"]),
            version=None if data.get("version") is None else int(data["version"]),
            previous=None if data.get("previous") is None else int(data["previous"]),
            actor=str(data.get("actor", "")),
            reason=str(data.get("reason", "")),
        )


@runtime_checkable
class ModelRegistry(Protocol):
    """Versioned model bundles with aliases, lineage, gate decisions and alias history."""

    def register_bundle(
        self,
        name: str,
        bundle_dir: str | Path,
        *,
        lineage: Mapping[str, Any] | None = None,
        description: str = "",
    ) -> ModelVersion:
        """Store the bundle and add it as the next version of ``name`` (created if new).

        ``lineage`` is merged over the bundle's own lineage (keys given here win)."""
        ...

    def list_models(self) -> list[RegisteredModel]: ...

    def list_versions(self, name: str) -> list[ModelVersion]:
        """Versions of ``name``, newest first (lineage not loaded)."""
        ...

    def get_version(self, name: str, ref: int | str) -> ModelVersion:
        """A version by number (``3``, ``"3"``, ``"v3"``) or alias (``"champion"``), with lineage."""
        ...

    def set_alias(
        self, name: str, alias: str, version: int, *, actor: str, reason: str, action: str = "set"
    ) -> AliasEvent: ...

    def delete_alias(self, name: str, alias: str, *, actor: str, reason: str) -> AliasEvent: ...

    def alias_history(self, name: str) -> list[AliasEvent]:
        """Every alias change of ``name``, oldest first."""
        ...

    def set_version_tags(self, name: str, version: int, tags: Mapping[str, str]) -> None: ...

    def set_status(self, name: str, version: int, status: VersionStatus) -> None: ...

    def download_bundle(self, name: str, ref: int | str) -> tuple[ModelVersion, Path]:
        """The version and a local, content-checked copy of its bundle (cached per version)."""
        ...

    def record_gate_decision(
        self, name: str, version: int, decision: Mapping[str, Any], *, promote: bool, reason: str
    ) -> None:
        """Keep a gate decision (strict JSON) with the version and summarise it in its tags."""
        ...

    def gate_decisions(self, name: str, version: int) -> list[JsonObject]:
        """The version's gate decisions, oldest first."""
        ...


def check_model_name(name: str) -> str:
    """``name`` if it is a usable registered-model name (letters, digits, ``_ . -``)."""
    if not isinstance(name, str) or not _MODEL_NAME.match(name):
        raise RegistryError(
            f"model name {name!r} must start with a letter or digit and use only letters, "
            "digits, '_', '.', '-' (at most 128 characters)"
        )
    return name


def check_alias(alias: str) -> str:
    """``alias`` if it is a valid alias (not a version number: ``v3`` and ``3`` are refs)."""
    if not isinstance(alias, str) or not _ALIAS.match(alias) or parse_version_ref(alias):
        raise RegistryError(
            f"alias {alias!r} must start with a letter and use letters, digits, '_', '-'; "
            "it may not look like a version ('3', 'v3')"
        )
    return alias


def parse_version_ref(ref: int | str) -> int | None:
    """The version number named by ``ref`` (``3``, ``"3"``, ``"v3"``), or None for an alias."""
    if isinstance(ref, int):
        if ref < 1:
            raise RegistryError(f"version numbers start at 1, got {ref}")
        return ref
    text = ref.strip()
    digits = text[1:] if text[:1] in ("v", "V") else text
    if digits.isdigit():
        number = int(digits)
        if number < 1:
            raise RegistryError(f"version numbers start at 1, got {ref!r}")
        return number
    return None


def parse_model_ref(text: str) -> tuple[str, int | str]:
    """``"<name>@<alias or version>"`` -> ``(name, ref)``; a bare name means ``@champion``."""
    name, sep, ref = text.strip().partition("@")
    if sep and not ref:
        raise RegistryError(f"{text!r}: nothing after '@' (use <name>@champion or <name>@3)")
    check_model_name(name)
    if not sep:
        return name, CHAMPION
    number = parse_version_ref(ref)
    return (name, number) if number is not None else (name, check_alias(ref))


def current_version(registry: ModelRegistry, name: str, alias: str) -> int | None:
    """The version ``alias`` points at, or None when it is unset."""
    for model in registry.list_models():
        if model.name == name:
            return model.aliases.get(alias)
    raise RegistryError(f"no registered model {name!r}")


def promote(
    registry: ModelRegistry, name: str, version: int, *, actor: str, reason: str
) -> AliasEvent:
    """Make ``version`` the champion; the previous champion is remembered for :func:`rollback`.

    The promoted version loses a ``challenger`` alias it held; the old champion is ``retired``.
    Promoting the current champion again is refused (nothing would change).
    """
    registry.get_version(name, version)  # exists?
    previous = current_version(registry, name, CHAMPION)
    if previous == version:
        raise RegistryError(f"{name} v{version} is already the champion")
    if previous is not None:
        registry.set_version_tags(name, version, {"ragtrail.previous_champion": str(previous)})
        registry.set_status(name, previous, "retired")
    event = registry.set_alias(
        name, CHAMPION, version, actor=actor, reason=reason, action="promote"
    )
    if current_version(registry, name, CHALLENGER) == version:
        registry.delete_alias(
            name, CHALLENGER, actor=actor, reason=f"v{version} promoted to champion"
        )
    registry.set_status(name, version, "champion")
    return event


def rollback(registry: ModelRegistry, name: str, *, actor: str, reason: str) -> AliasEvent:
    """Move ``champion`` back to the version that held it before the current one.

    The previous holder is the ``ragtrail.previous_champion`` tag the current champion got when
    it was promoted; a rollback does not overwrite tags, so rolling back twice walks further back.
    Raises :class:`RegistryError` when there is no champion or no earlier one.
    """
    current = current_version(registry, name, CHAMPION)
    if current is None:
        raise RegistryError(f"{name} has no champion to roll back")
    holder = registry.get_version(name, current)
    previous = holder.tags.get("ragtrail.previous_champion")
    if not previous:
        raise RegistryError(
            f"{name} v{current} is the first champion: there is no earlier one to roll back to"
        )
    target = int(previous)
    registry.get_version(name, target)
    event = registry.set_alias(
        name, CHAMPION, target, actor=actor, reason=reason, action="rollback"
    )
    registry.set_status(name, current, "rolled_back")
    registry.set_status(name, target, "champion")
    return event


def settle_challenger(
    registry: ModelRegistry,
    name: str,
    version: int,
    *,
    promote_it: bool,
    reason: str,
    decision: Mapping[str, Any],
    actor: str = "promotion-gate",
) -> AliasEvent:
    """Apply a gate verdict to a freshly evaluated version: record the decision (strict JSON,
    e.g. :meth:`ragtrail.evaluate.comparison.promotion.GateDecision.as_json`), then make the version champion
    when promoted, else point ``challenger`` at it, where it stays with the reason recorded (a
    challenger it replaces becomes ``rejected``)."""
    registry.record_gate_decision(name, version, decision, promote=promote_it, reason=reason)
    if promote_it:
        return promote(registry, name, version, actor=actor, reason=reason)
    replaced = current_version(registry, name, CHALLENGER)
    event = registry.set_alias(name, CHALLENGER, version, actor=actor, reason=reason)
    if replaced is not None and replaced != version:
        registry.set_status(name, replaced, "rejected")  # superseded without being promoted
    registry.set_status(name, version, "challenger")
    return event
