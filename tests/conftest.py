"""Test-session setup shared by every suite.

Environment first (before anything imports Airflow or transformers): offline model hubs, and an
isolated Airflow home/database per session so no test touches a user's ~/airflow.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Local LLMs run in float32 under test on every runner: 'auto' is bf16 on CPUs with bf16
    # units only, and what a test expects must not depend on the machine (tests of 'auto' and
    # of bf16 ask for them).
    os.environ.setdefault("RAGTRAIL_GENERATION__LLM_DTYPE", "float32")
    from tests.dags._airflow_env import ensure_airflow_env

    ensure_airflow_env()
    if "RAGTRAIL_MODEL_CACHE_DIR" not in os.environ:
        # Converted and exported models (SmolLM2's safetensors copy, the embedder's ONNX export)
        # are made once per session and shared by every fresh home, in this process and in the
        # processes tests start, as one machine's model cache is shared by its users.
        models = tempfile.mkdtemp(prefix="ragtrail-models-")
        os.environ["RAGTRAIL_MODEL_CACHE_DIR"] = models
        config.add_cleanup(lambda: shutil.rmtree(models, ignore_errors=True))
    if "RAGTRAIL_EVIDENCE__SCORER" not in os.environ:
        # The evidence step's helpfulness scorer defaults to the bundled SmolLM2 (a 25-60 s
        # conversion per fresh home); every flow a test runs scores with one tiny random Llama,
        # built once here (its log-probabilities are real computations, their values meaningless).
        scorer_dir = tempfile.mkdtemp(prefix="ragtrail-scorer-")
        config.add_cleanup(lambda: shutil.rmtree(scorer_dir, ignore_errors=True))
        os.environ["RAGTRAIL_EVIDENCE__SCORER"] = f"hf:{_tiny_scorer(Path(scorer_dir))}"


def _tiny_scorer(folder: Path) -> Path:
    from ragtrail.paths import sample_corpus_dir
    from tests.tiny_models import build_tiny_llama

    texts = [p.read_text(encoding="utf-8") for p in sorted(sample_corpus_dir().rglob("*.md"))]
    return build_tiny_llama(folder / "tiny-scorer", texts, vocab_size=600, max_positions=4096)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    from ragtrail.paths import shared_dir as locate

    path = locate()
    if path is None:
        pytest.skip("../shared not present (set RAGTRAIL_SHARED_DIR to run data-backed tests)")
    return path


@pytest.fixture(scope="session")
def sample_corpus() -> Path:
    from ragtrail.paths import sample_corpus_dir

    path = sample_corpus_dir()
    if not path.is_dir():
        pytest.fail(f"the shipped sample corpus is missing: {path}")
    return path


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory):
    """The real bundled all-MiniLM-L6-v2, loaded once per session."""
    from ragtrail.config import load_settings
    from ragtrail.embed.loading import load_embedder

    return load_embedder(load_settings(home=tmp_path_factory.mktemp("embedder-home")))


@pytest.fixture
def make_runtime(tmp_path, embedder):
    """Build Runtimes on a fresh RAGTRAIL_HOME that reuse the session's embedding model."""
    from ragtrail.config import load_settings
    from ragtrail.runtime import Runtime

    made = []

    def factory(home: Path | None = None, **overrides) -> Runtime:
        rt = Runtime(load_settings(home=home or tmp_path / "home", **overrides))
        rt.__dict__["embedder"] = embedder
        made.append(rt)
        return rt

    yield factory
    for rt in made:
        rt.close()
