"""The trained judges a night uses: each kind's champion in the model registry.

``entailment.trained``, ``sufficiency.trained`` and ``labeller.trained`` are built from the
version holding the ``champion`` alias of ``ragtrail-judge-<kind>`` (trained and promoted by
``ragtrail judge train KIND``). The registrations that name them live beside the calibrators of
their role (:mod:`ragtrail.pipeline.judges`, :mod:`ragtrail.pipeline.sufficiency.raters`); this
module only loads. A loaded judge is kept per bundle, so the steps of one process that use it
load the weights once.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ragtrail.judges.contract import Judge
from ragtrail.judges.trained import TrainedCrossEncoderJudge, load_trained_judge, trained_kind
from ragtrail.models.registry import CHAMPION, RegistryError
from ragtrail.runtime import Runtime


class NoTrainedJudgeError(ValueError):
    """No version of a trained judge holds the alias asked for (none trained or promoted yet)."""


def kind_of(name: str) -> str:
    """``"entailment"`` for ``entailment.trained``."""
    kind, _, suffix = name.partition(".")
    if suffix != "trained":
        raise ValueError(f"{name!r} is not a trained judge's name (<kind>.trained)")
    return trained_kind(kind).kind


def trained_judge(rt: Runtime, name: str, alias: str | int = CHAMPION) -> TrainedCrossEncoderJudge:
    """The trained judge ``name`` (``<kind>.trained``) at ``alias`` (a version number or alias).

    :class:`NoTrainedJudgeError` (a ValueError, so a night reports the judge as unavailable)
    says how to train one when the registry has none."""
    kind = trained_kind(kind_of(name))
    model = kind.registered_model
    try:
        version, path = rt.registry.download_bundle(model, alias)
    except RegistryError as exc:
        raise NoTrainedJudgeError(
            f"{name}: no version of {model} is {alias!r} ({exc}); train one with "
            f"`ragtrail judge train {kind.kind} --reference FILE`"
        ) from None
    return _load(str(path), f"registry:{model}@{version.version}", rt.settings.device)


def build_trained(rt: Runtime, name: str) -> Judge:
    """The registrations' factory: the champion of ``name``."""
    return trained_judge(rt, name)


@lru_cache(maxsize=8)
def _load(path: str, model_ref: str, device: str) -> TrainedCrossEncoderJudge:
    """A loaded judge per verified bundle directory (its path names version and digest)."""
    return load_trained_judge(Path(path), model_ref=model_ref, device=device)


__all__ = ["NoTrainedJudgeError", "build_trained", "kind_of", "trained_judge"]
