"""Environment for tests that import Airflow (stdlib only; safe to import before Airflow).

Airflow reads its configuration when ``airflow`` is first imported, so the variables below must
be in ``os.environ`` before that import, and they cannot change afterwards within the process.
``tests/conftest.py`` calls :func:`ensure_airflow_env` from ``pytest_configure``; the Airflow
test modules call it again at import time, which is a no-op once configured and makes them
runnable on their own.

Each pytest session gets one throw-away ``AIRFLOW_HOME`` (SQLite metadata DB, logs) in a temp
dir, removed at exit; the DAGs and plugins folders are this repository's.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DAGS_DIR = REPO_ROOT / "dags"
PLUGINS_DIR = REPO_ROOT / "plugins"
SETTINGS_FILE = REPO_ROOT / "airflow_settings.yaml"
BOOTSTRAP_SCRIPT = REPO_ROOT / "scripts" / "airflow_bootstrap.py"

# Marks a process whose environment this module configured (value: the temp root).
MARKER = "RAGTRAIL_AIRFLOW_TEST_ROOT"


def airflow_env(tmp_dir: Path) -> dict[str, str]:
    """The Airflow variables for a throw-away installation rooted at ``tmp_dir``."""
    home = Path(tmp_dir) / "airflow"
    return {
        MARKER: str(tmp_dir),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_DIR),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_DIR),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        # A fixed secret keeps Airflow from generating and persisting one (test-only value).
        "AIRFLOW__API_AUTH__JWT_SECRET": "ragtrail-tests-only-not-a-secret",
        # unit_test_mode is deliberately NOT set: it loads Airflow's own test config
        # (example DAGs, Airflow's test dags folder) underneath these values.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def ensure_airflow_env(tmp_dir: Path | None = None) -> dict[str, str]:
    """Put :func:`airflow_env` into ``os.environ`` once per process and return it.

    Without ``tmp_dir`` a fresh temp dir is created and removed at interpreter exit. Raises if
    Airflow was imported before the environment was configured (its config would be stale).
    """
    if root := os.environ.get(MARKER):
        return airflow_env(Path(root))
    if "airflow" in sys.modules:
        raise RuntimeError(
            "airflow was imported before the test environment was configured; call "
            "ensure_airflow_env() from pytest_configure in tests/conftest.py"
        )
    if tmp_dir is None:
        tmp_dir = Path(tempfile.mkdtemp(prefix="ragtrail-airflow-"))
        atexit.register(shutil.rmtree, tmp_dir, ignore_errors=True)
    env = airflow_env(tmp_dir)
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    os.environ.update(env)
    return env


def airflow_cli() -> list[str]:
    """The ``airflow`` console script of the running interpreter's environment."""
    script = Path(sys.executable).with_name("airflow")
    return [str(script)] if script.exists() else [sys.executable, "-m", "airflow"]


def migrate_db(timeout: float = 600) -> None:
    """Create or upgrade the throw-away metadata DB (``airflow db migrate``)."""
    subprocess.run([*airflow_cli(), "db", "migrate"], check=True, timeout=timeout, env=os.environ)


def create_pools(timeout: float = 300) -> None:
    """Create the pools of airflow_settings.yaml with scripts/airflow_bootstrap.py."""
    subprocess.run(
        [sys.executable, str(BOOTSTRAP_SCRIPT), "--settings", str(SETTINGS_FILE), "--pools-only"],
        check=True,
        timeout=timeout,
        env=os.environ,
    )
