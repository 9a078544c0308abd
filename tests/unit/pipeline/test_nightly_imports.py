"""What an endpoint night imports before its two flows start: what the flows will use, no more."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from ragtrail.config import load_settings
from ragtrail.llm.score_cache import SqlScoreCache
from ragtrail.llm.scoring import scorer_model_id
from ragtrail.pipeline.nightly import STEP_MODULES, first_use_imports, scores_cached
from ragtrail.runtime import Runtime

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


def test_a_night_whose_scores_are_cached_does_not_import_torch(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home")
    assert TORCH not in first_use_imports(settings, scores_cached=True)
    assert set(SKLEARN) <= set(first_use_imports(settings, scores_cached=True))


def test_scores_count_as_cached_on_an_unchanged_corpus_once_this_scorer_has_stored_some(
    tmp_path: Path,
) -> None:
    rt = Runtime(load_settings(home=tmp_path / "home"))
    store = SqlScoreCache(rt.engine)
    assert not scores_cached(rt, corpus_changed=False)  # a first night: nothing stored
    store.put_many({"other": -2.0}, model_id="builtin:another-scorer")
    assert not scores_cached(rt, corpus_changed=False)
    this_scorer = scorer_model_id(rt.settings.evidence.scorer, rt.llm_dtype)
    store.put_many({"mine": -1.0}, model_id=this_scorer)
    assert scores_cached(rt, corpus_changed=False)
    assert not scores_cached(rt, corpus_changed=True)  # new documents: new evidence to score


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
