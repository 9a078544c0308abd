"""Which model serves a role now: the registered champion, else the configured model.

The citation answerer and the evidence extractor are both retrained and promoted through the
model registry; the nightly evaluation, the retraining flow and the gate all ask here which
version is in service, and what it was trained on.
"""

from __future__ import annotations

from ragtrail.config import ModelRole
from ragtrail.models.registry import CHAMPION, RegistryError, current_version, parse_model_ref
from ragtrail.records import ModelKind, ModelSpec
from ragtrail.redact import redact
from ragtrail.runtime import Runtime

RUN_TAG = "lineage.retrain_run"
"""Lineage key of the flow run that trained a version (finds it again on a retry)."""


def serving_spec(rt: Runtime, model_name: str, role: ModelRole) -> tuple[str, str]:
    """The spec of the model in service and what it is: ``registry:<name>@<v>`` of the champion
    (``"champion v<v>"``), else the role's configured model."""
    try:
        champion = current_version(rt.registry, model_name, CHAMPION)
    except RegistryError:
        champion = None
    if champion is not None:
        spec = str(ModelSpec(ModelKind.REGISTRY, f"{model_name}@{champion}"))
        return spec, f"champion v{champion}"
    return rt.settings.model_for(role), f"configured {role.value} (no champion yet)"


def base_model_of(rt: Runtime, spec: str, *, role: ModelRole) -> str:
    """The base model a new version is trained on: a registered version's recorded base, else
    the configured model itself (it must be a local model: ``builtin:``, ``hf:`` or a path)."""
    match ModelSpec.try_parse(spec):
        case ModelSpec(kind=ModelKind.REGISTRY, model=reference):
            name, ref = parse_model_ref(reference)
            return rt.registry.get_version(name, ref).base_model  # recorded at registration
        case ModelSpec(kind=ModelKind.HF, model=model):
            return model
        case ModelSpec(kind=ModelKind.BUILTIN) as builtin:
            return str(builtin)
    raise ValueError(
        f"cannot fine-tune the {role.value} {redact(spec)!r}: retraining needs a local model "
        "(builtin:..., hf:<id or path>) or a registered champion; set flow param base_model"
    )


def version_of_run(rt: Runtime, model_name: str, run_id: str) -> int | None:
    """The version of ``model_name`` that the retraining run ``run_id`` registered (a retried
    task finds it instead of training again), or None."""
    try:
        versions = rt.registry.list_versions(model_name)
    except RegistryError:
        return None
    # listed without lineage; its flattened tags carry the run
    return next((v.version for v in versions if v.tags.get(RUN_TAG) == run_id), None)
