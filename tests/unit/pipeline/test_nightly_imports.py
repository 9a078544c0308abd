"""What an endpoint night imports before its two flows start: what the flows will use, no more."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from ragtrail.config import load_settings
from ragtrail.pipeline.nightly import STEP_MODULES, first_use_imports

TORCH = "torch"
SKLEARN = ("sklearn.linear_model", "sklearn.model_selection")


def _imports(tmp_path: Path, **overrides: Any) -> tuple[str, ...]:
    return first_use_imports(load_settings(home=tmp_path / "home", **overrides))


def test_the_default_night_imports_the_steps_torch_and_the_policy_estimators(
    tmp_path: Path,
) -> None:
    modules = _imports(tmp_path)
    assert modules[: len(STEP_MODULES)] == STEP_MODULES
    assert TORCH in modules
    assert set(SKLEARN) <= set(modules)


def test_a_night_without_the_evidence_step_does_not_import_torch(tmp_path: Path) -> None:
    modules = _imports(tmp_path, evidence={"enabled": False})
    assert TORCH not in modules
    assert set(SKLEARN) <= set(modules)


@pytest.mark.parametrize("off", ["sufficiency", "selective"])
def test_a_night_that_fits_no_selective_policy_does_not_import_its_estimators(
    tmp_path: Path, off: str
) -> None:
    modules = _imports(tmp_path, **{off: {"enabled": False}})
    assert not set(SKLEARN) & set(modules)
    assert TORCH in modules


def test_every_module_named_exists(tmp_path: Path) -> None:
    for module in _imports(tmp_path):
        assert importlib.util.find_spec(module) is not None, module
