"""The LLM spec registry: kinds registered from above, resolved lazily, never overwritten."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ragtrail.llm import factory
from ragtrail.llm.backends.base import GenerationRequest, GenerationResult
from ragtrail.llm.factory import (
    DuplicateBackendError,
    load_llm_backend,
    register_llm_backend,
    registered_llm_backends,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


class EchoBackend:
    """A real (trivial) backend: answers every request with the text of its last message."""

    name = "echo"

    def __init__(self, model: str, **options: Any) -> None:
        self.model, self.options = model, options
        self.model_id = f"echo:{model}"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        return [GenerationResult(text=r.messages[-1]["content"]) for r in requests]


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A private copy of the registry, restored after the test."""
    copy = dict(factory._LOADERS)
    monkeypatch.setattr(factory, "_LOADERS", copy)
    return copy


def test_registered_kind_loads_with_rest_and_kwargs(registry: dict[str, Any]) -> None:
    register_llm_backend("echo", EchoBackend)
    backend = load_llm_backend("echo:tiny/model", batch_size=3)
    assert isinstance(backend, EchoBackend)
    assert (backend.model, backend.options) == ("tiny/model", {"batch_size": 3})
    req = GenerationRequest(messages=({"role": "user", "content": "hello"},))
    assert [r.text for r in backend.generate([req])] == ["hello"]
    assert "echo" in registered_llm_backends()


def test_string_reference_is_imported_on_first_use(registry: dict[str, Any]) -> None:
    register_llm_backend("lazyecho", "tests.unit.llm.test_factory:EchoBackend")
    assert registry["lazyecho"] == "tests.unit.llm.test_factory:EchoBackend"  # not imported yet
    assert isinstance(load_llm_backend("lazyecho:m"), EchoBackend)


def test_kinds_are_never_silently_replaced(registry: dict[str, Any]) -> None:
    register_llm_backend("echo", EchoBackend)
    register_llm_backend("echo", EchoBackend)  # same loader again (module re-import): fine
    with pytest.raises(DuplicateBackendError):
        register_llm_backend("echo", "tests.unit.llm.test_factory:EchoBackend")
    with pytest.raises(DuplicateBackendError):
        register_llm_backend("hf", EchoBackend)
    for bad in ("", "builtin", "has space"):
        with pytest.raises(ValueError):
            register_llm_backend(bad, EchoBackend)
    with pytest.raises(ValueError, match=r"package\.module:attr"):
        register_llm_backend("other", "not a reference")


def test_training_registers_the_generator_kind() -> None:
    import ragtrail.train  # noqa: F401

    assert factory._LOADERS["generator"] == "ragtrail.train.backend:FineTunedGeneratorBackend"


def test_llm_layer_does_not_import_training_code() -> None:
    """In a fresh interpreter: ragtrail.llm loads no ragtrail.train module, and a generator:
    spec without the training package says how to get it."""
    code = (
        "import sys\n"
        "import ragtrail.llm\n"
        "from ragtrail.llm import load_llm_backend\n"
        "assert not [m for m in sys.modules if m.startswith('ragtrail.train')], 'train imported'\n"
        "try:\n"
        "    load_llm_backend('generator:/nowhere')\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    env_path = f"{REPO_ROOT / 'include'}:{REPO_ROOT}"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        check=True,
    ).stdout
    assert "unknown LLM backend kind 'generator'" in out
    assert "import ragtrail.train" in out
