"""The model registry on MLflow (mlflow-skinny): SQLite by default, PostgreSQL in production.

What goes where, and why:

- **Bundles** are uploaded by ragtrail into its own artifact store (local directory or S3),
  content-addressed (:mod:`ragtrail.models.bundle_store`), and registered with
  ``create_model_version(name, source=<that URI>, run_id=...)``. MLflow never reads or writes
  the files: its S3 artifact repository would need its own endpoint configuration
  (``MLFLOW_S3_ENDPOINT_URL``) and ``register_model("runs:/...")`` expects a logged MLflow model;
  this way one set of S3 settings serves everything and every download is checked against the
  digest recorded at registration.
- **Lineage** is kept three ways: the full JSON in the artifact store
  (``<prefix>/<model>/versions/<n>/lineage.json``), flattened ``lineage.<path>`` tags on the
  version (searchable in the MLflow UI; long values point to the JSON), and an MLflow *run* per
  version whose params are the scalar lineage leaves and whose metrics are the numbers under
  ``training_metrics`` / ``evaluation_metrics``.
- **Aliases** are MLflow registered-model aliases. Every change is also an event tag
  (``ragtrail.alias_event.<ns timestamp>`` = JSON) on the registered model: the alias history.
- **Gate decisions** are JSON files under ``<prefix>/<model>/versions/<n>/gates/`` plus a
  summary in the version's ``ragtrail.gate.*`` tags and description.

Telemetry is switched off (``MLFLOW_DISABLE_TELEMETRY=true``) before MLflow is imported.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragtrail import jsonsafe
from ragtrail.artifact_keys import registry_key
from ragtrail.jsonsafe import JsonObject
from ragtrail.models.bundle import BundleError, read_bundle
from ragtrail.models.bundle_store import fetch_bundle, upload_bundle
from ragtrail.models.registry import (
    AliasEvent,
    ModelVersion,
    RegisteredModel,
    RegistryError,
    VersionStatus,
    check_alias,
    check_model_name,
    parse_version_ref,
)
from ragtrail.paths import safe_name
from ragtrail.redact import redact, redact_json
from ragtrail.storage.artifacts import ArtifactStore, open_artifact_store

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from ragtrail.config import Settings

EVENT_TAG = "ragtrail.alias_event."
KIND_TAG = "ragtrail.kind"
LINEAGE_TAG = "lineage."
MAX_TAG_VALUE = 5000  # MLflow's limit for registered-model / version tag values
MAX_PARAM_VALUE = 6000
_TRUNCATED = "(too long for a tag: see ragtrail.lineage_uri)"
_METRIC_SECTIONS = ("training_metrics", "evaluation_metrics")
HISTORY_SUFFIX = ".history"
"""Lineage lists under keys ending so are per-step logs, recorded as MLflow metric histories."""


def _disable_telemetry() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


class MlflowModelRegistry:
    """:class:`~ragtrail.models.registry.ModelRegistry` on an MLflow tracking/registry store.

    Args:
        tracking_uri: SQLAlchemy URL of MLflow's backend store (``sqlite:///...`` or
            ``postgresql+psycopg://...``); a SQLite file's directory is created.
        artifacts: the store bundles, lineage and gate decisions are written to.
        cache_dir: local copies of downloaded bundles, one directory per version and digest.
        prefix: key prefix of the registry inside ``artifacts``.
        s3_endpoint_url: endpoint for ``s3://`` bundle sources (moto, MinIO).
        experiment: the MLflow experiment holding one lineage run per registered version.
    """

    def __init__(
        self,
        tracking_uri: str,
        artifacts: ArtifactStore,
        *,
        cache_dir: str | Path,
        prefix: str = "registry",
        s3_endpoint_url: str | None = None,
        experiment: str = "ragtrail-model-lineage",
    ) -> None:
        if tracking_uri.startswith("sqlite:///"):
            Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.tracking_uri = tracking_uri
        self.artifacts = artifacts
        self.cache_dir = Path(cache_dir)
        self.prefix = prefix.strip("/")
        self.s3_endpoint_url = s3_endpoint_url
        self.experiment = experiment

    @cached_property
    def client(self) -> MlflowClient:
        """The MLflow client, made on first use (importing MLflow takes seconds)."""
        _disable_telemetry()
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)

    def _never_written(self) -> bool:
        """Whether this is a SQLite registry whose file does not exist yet: it holds no models,
        so a read answers without importing MLflow (which would create the file)."""
        path = self.tracking_uri.removeprefix("sqlite:///")
        return path != self.tracking_uri and not Path(path).exists()

    @classmethod
    def from_settings(cls, settings: Settings) -> MlflowModelRegistry:
        """The registry configured by ``settings.registry`` (see :class:`RegistrySettings`)."""
        artifacts = open_artifact_store(
            settings.resolved_registry_artifact_uri, s3_endpoint_url=settings.s3_endpoint_url
        )
        return cls(
            settings.resolved_registry_uri,
            artifacts,
            cache_dir=settings.resolved_registry_cache_dir,
            prefix=settings.registry.prefix,
            s3_endpoint_url=settings.s3_endpoint_url,
            experiment=settings.registry.experiment,
        )

    # ------------------------------------------------------------------ registering

    def register_bundle(
        self,
        name: str,
        bundle_dir: str | Path,
        *,
        lineage: Mapping[str, Any] | None = None,
        description: str = "",
    ) -> ModelVersion:
        check_model_name(name)
        try:
            bundle = read_bundle(bundle_dir)
        except BundleError as exc:
            raise RegistryError(f"cannot register {bundle_dir}: {exc}") from exc
        full_lineage = jsonsafe.check_finite(
            redact_json({**bundle.lineage, **dict(lineage or {})}), f"lineage of {name}"
        )
        source, digest = upload_bundle(self.artifacts, self._key(name, "bundles"), Path(bundle_dir))
        self._ensure_model(name, bundle.kind)
        run_id = self._lineage_run(name, digest, bundle.kind, full_lineage)
        tags = {
            KIND_TAG: bundle.kind,
            "ragtrail.digest": digest,
            "ragtrail.base_model": bundle.base_model,
            "ragtrail.adapters": ",".join(bundle.adapters),
            "ragtrail.status": "registered",
            **_flat_tags(full_lineage),
        }
        mv = self.client.create_model_version(
            name, source=source, run_id=run_id, tags=tags, description=redact(description) or None
        )
        version = int(mv.version)
        lineage_key = self._key(name, "versions", str(version), "lineage.json")
        uri = self.artifacts.put_bytes(
            lineage_key, jsonsafe.dumps(full_lineage, "lineage", indent=2).encode("utf-8")
        )
        self.client.set_model_version_tag(name, str(version), "ragtrail.lineage_uri", uri)
        return self.get_version(name, version)

    def _ensure_model(self, name: str, kind: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            model = self.client.get_registered_model(name)
        except MlflowException:
            self.client.create_registered_model(
                name, tags={KIND_TAG: kind}, description=f"ragtrail {kind} model"
            )
            return
        registered_kind = model.tags.get(KIND_TAG)
        if registered_kind and registered_kind != kind:
            raise RegistryError(
                f"{name} holds {registered_kind!r} models; this bundle is a {kind!r} model"
            )

    def _lineage_run(self, name: str, digest: str, kind: str, lineage: Mapping[str, Any]) -> str:
        """An MLflow run holding the lineage as params, its metric sections as metrics, and every
        ``...history`` list of per-step rows (a training stage's log) as metric histories: the
        row's numbers under ``<path>.<key>`` at the row's ``step``."""
        from mlflow.entities import Metric, Param

        experiment = self.client.get_experiment_by_name(self.experiment)
        if experiment is None:
            experiment_id = self.client.create_experiment(
                self.experiment, artifact_location=self.artifacts.uri_for(self._key("mlflow"))
            )
        else:
            experiment_id = experiment.experiment_id
        run = self.client.create_run(
            experiment_id,
            run_name=f"{name}-{digest[:12]}",
            tags={"ragtrail.model": name, KIND_TAG: kind, "ragtrail.digest": digest},
        )
        run_id: str = run.info.run_id
        now = int(time.time() * 1000)
        params, metrics = [], []
        for path, value in _leaves(lineage):
            if path.endswith(HISTORY_SUFFIX) and isinstance(value, list):
                metrics += _step_metrics(path.removesuffix(HISTORY_SUFFIX), value, now)
            elif path.split(".", 1)[0] in _METRIC_SECTIONS and _is_number(value):
                metrics.append(Metric(_mlflow_key(path), float(value), now, 0))
            elif not isinstance(value, list | dict):
                text = "null" if value is None else str(value)
                params.append(Param(_mlflow_key(path), text[:MAX_PARAM_VALUE]))
        for start in range(0, max(len(params), len(metrics)), 100):
            self.client.log_batch(
                run_id, metrics=metrics[start : start + 100], params=params[start : start + 100]
            )
        self.client.set_terminated(run_id)
        return run_id

    # ------------------------------------------------------------------ reading

    def list_models(self) -> list[RegisteredModel]:
        if self._never_written():
            return []
        out = []
        for model in self._paged(self.client.search_registered_models):
            versions = [int(v.version) for v in self._versions_raw(model.name)]
            out.append(
                RegisteredModel(
                    name=model.name,
                    kind=model.tags.get(KIND_TAG, ""),
                    description=model.description or "",
                    aliases={a: int(v) for a, v in sorted(model.aliases.items())},
                    latest_version=max(versions) if versions else None,
                    n_versions=len(versions),
                )
            )
        return sorted(out, key=lambda m: m.name)

    def list_versions(self, name: str) -> list[ModelVersion]:
        model = self._registered(name)
        aliases = _aliases_by_version(model.aliases)
        raw = sorted(self._versions_raw(name), key=lambda v: -int(v.version))
        return [_to_version(mv, aliases.get(int(mv.version), ())) for mv in raw]

    def get_version(self, name: str, ref: int | str) -> ModelVersion:
        from mlflow.exceptions import MlflowException

        model = self._registered(name)
        number = parse_version_ref(ref)
        if number is None:
            alias = check_alias(str(ref))
            if alias not in model.aliases:
                held = ", ".join(f"{a}=v{v}" for a, v in sorted(model.aliases.items())) or "none"
                raise RegistryError(f"{name} has no alias {alias!r} (aliases: {held})")
            number = int(model.aliases[alias])
        try:
            mv = self.client.get_model_version(name, str(number))
        except MlflowException as exc:
            raise RegistryError(f"{name} has no version {number}") from exc
        version = _to_version(mv, _aliases_by_version(model.aliases).get(number, ()))
        key = self._key(name, "versions", str(number), "lineage.json")
        lineage = json.loads(self.artifacts.get_bytes(key)) if self.artifacts.exists(key) else {}
        return replace(version, lineage=lineage)

    def _registered(self, name: str) -> Any:
        check_model_name(name)
        if self._never_written():
            raise RegistryError(f"no registered model {name!r} (known: none)")
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_registered_model(name)
        except MlflowException as exc:
            known = ", ".join(m.name for m in self._paged(self.client.search_registered_models))
            raise RegistryError(f"no registered model {name!r} (known: {known or 'none'})") from exc

    def _versions_raw(self, name: str) -> list[Any]:
        return list(
            self._paged(lambda **kw: self.client.search_model_versions(f"name='{name}'", **kw))
        )

    @staticmethod
    def _paged(search: Any) -> Iterator[Any]:
        token = None
        while True:
            page = search(max_results=200, page_token=token)
            yield from page
            token = page.token
            if not token:
                return

    # ------------------------------------------------------------------ aliases

    def set_alias(
        self, name: str, alias: str, version: int, *, actor: str, reason: str, action: str = "set"
    ) -> AliasEvent:
        check_alias(alias)
        model = self._registered(name)
        self.get_version(name, version)
        previous = model.aliases.get(alias)
        self.client.set_registered_model_alias(name, alias, str(version))
        return self._record_event(
            name, alias, action, version, None if previous is None else int(previous), actor, reason
        )

    def delete_alias(self, name: str, alias: str, *, actor: str, reason: str) -> AliasEvent:
        check_alias(alias)
        model = self._registered(name)
        if alias not in model.aliases:
            raise RegistryError(f"{name} has no alias {alias!r} to delete")
        self.client.delete_registered_model_alias(name, alias)
        return self._record_event(
            name, alias, "delete", None, int(model.aliases[alias]), actor, reason
        )

    def _record_event(
        self,
        name: str,
        alias: str,
        action: str,
        version: int | None,
        previous: int | None,
        actor: str,
        reason: str,
    ) -> AliasEvent:
        event = AliasEvent(
            at=datetime.now(UTC),
            name=name,
            alias=alias,
            action=action,
            version=version,
            previous=previous,
            actor=actor,
            reason=reason[:2000],
        )
        key = f"{EVENT_TAG}{time.time_ns():020d}"
        self.client.set_registered_model_tag(name, key, json.dumps(event.as_dict()))
        return event

    def alias_history(self, name: str) -> list[AliasEvent]:
        model = self._registered(name)
        events = sorted((k, v) for k, v in model.tags.items() if k.startswith(EVENT_TAG))
        return [AliasEvent.from_dict(json.loads(v)) for _, v in events]

    # ------------------------------------------------------------------ tags, status, gates

    def set_version_tags(self, name: str, version: int, tags: Mapping[str, str]) -> None:
        for key, value in tags.items():
            text = redact(str(value))[:MAX_TAG_VALUE]
            self.client.set_model_version_tag(name, str(version), key, text)

    def set_status(self, name: str, version: int, status: VersionStatus) -> None:
        self.set_version_tags(name, version, {"ragtrail.status": status})

    def record_gate_decision(
        self, name: str, version: int, decision: Mapping[str, Any], *, promote: bool, reason: str
    ) -> None:
        current = self.get_version(name, version)
        at = datetime.now(UTC)
        reason = redact(reason)
        record = {
            "at": at.isoformat(),
            "promote": promote,
            "reason": reason,
            "decision": redact_json(dict(decision)),
        }
        key = self._key(name, "versions", str(version), "gates", f"{time.time_ns():020d}.json")
        uri = self.artifacts.put_bytes(
            key, jsonsafe.dumps(record, "gate decision", indent=2).encode("utf-8")
        )
        verdict = "promote" if promote else "reject"
        self.set_version_tags(
            name,
            version,
            {
                "ragtrail.gate.decision": verdict,
                "ragtrail.gate.reason": reason,
                "ragtrail.gate.at": at.isoformat(),
                "ragtrail.gate.uri": uri,
            },
        )
        line = f"[gate {at:%Y-%m-%d %H:%M:%S}Z] {verdict}: {reason}"
        description = f"{current.description}\n{line}" if current.description else line
        self.client.update_model_version(name, str(version), description=description[-5000:])

    def gate_decisions(self, name: str, version: int) -> list[JsonObject]:
        prefix = self._key(name, "versions", str(version), "gates")
        return [json.loads(self.artifacts.get_bytes(k)) for k in self.artifacts.list(prefix)]

    # ------------------------------------------------------------------ bundles

    def download_bundle(self, name: str, ref: int | str) -> tuple[ModelVersion, Path]:
        version = self.get_version(name, ref)
        dest = self.cache_dir / safe_name(name) / f"v{version.version}-{version.digest[:16]}"
        path = fetch_bundle(
            version.source, dest, version.digest, s3_endpoint_url=self.s3_endpoint_url
        )
        return version, path

    def _key(self, model: str, *parts: str) -> str:
        return registry_key(self.prefix, model, *parts)


def _to_version(mv: Any, aliases: tuple[str, ...]) -> ModelVersion:
    tags = dict(mv.tags or {})
    return ModelVersion(
        name=mv.name,
        version=int(mv.version),
        kind=tags.get(KIND_TAG, ""),
        source=mv.source,
        digest=tags.get("ragtrail.digest", ""),
        aliases=aliases,
        status=tags.get("ragtrail.status", "registered"),
        description=mv.description or "",
        created_at=datetime.fromtimestamp(mv.creation_timestamp / 1000, tz=UTC),
        tags=tags,
        run_id=mv.run_id or None,
    )


def _aliases_by_version(aliases: Mapping[str, Any]) -> dict[int, tuple[str, ...]]:
    out: dict[int, list[str]] = {}
    for alias, version in sorted(aliases.items()):
        out.setdefault(int(version), []).append(alias)
    return {v: tuple(a) for v, a in out.items()}


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted path, leaf)`` of a JSON value; lists are leaves (kept whole)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    else:
        yield path, value


def _flat_tags(lineage: Mapping[str, Any]) -> dict[str, str]:
    """``lineage.<path>`` tags; values longer than MLflow allows point to the lineage JSON."""
    tags = {}
    for path, value in _leaves(lineage):
        text = value if isinstance(value, str) else json.dumps(value)
        tags[_mlflow_key(LINEAGE_TAG + path)] = text if len(text) <= MAX_TAG_VALUE else _TRUNCATED
    return tags


def _mlflow_key(path: str) -> str:
    """A key MLflow accepts (letters, digits, ``_ - . / space``; at most 250 characters)."""
    cleaned = "".join(c if c.isalnum() or c in "_-./ " else "_" for c in path)
    return cleaned[:250]


def _step_metrics(prefix: str, rows: list[Any], timestamp: int) -> list[Any]:
    """MLflow metrics of a per-step log: each row's numbers (but ``step``) at its ``step``."""
    from mlflow.entities import Metric

    out = []
    for row in rows:
        if not isinstance(row, Mapping) or not _is_number(row.get("step")):
            continue
        step = int(row["step"])
        for key, value in row.items():
            if key != "step" and _is_number(value):
                out.append(Metric(_mlflow_key(f"{prefix}.{key}"), float(value), timestamp, step))
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
