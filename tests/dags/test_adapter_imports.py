"""The layer above the package: dags/ and plugins/ are thin Airflow adapters.

They import the standard library, Airflow's public SDK, each other (plugins/ is on Airflow's
sys.path) and, of ragtrail, only its DAG-facing surface: ``ragtrail.pipeline`` (the one
definition of the night), ``ragtrail.paths`` and ``ragtrail.records``; the reports view's web app
(``plugins/ragtrail_reports_app.py``) also FastAPI, the API server's authentication and the core's
reports catalog (``WEB_APP_SURFACE``). Inside the package the
layering is enforced by import-linter (``[tool.importlinter]`` in pyproject.toml, `make lint`).
Pure syntax: needs no Airflow.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DAG_FILES = sorted((REPO_ROOT / "dags").glob("*.py"))
PLUGIN_FILES = sorted((REPO_ROOT / "plugins").rglob("*.py"))
LOCAL_PLUGIN_MODULES = frozenset(p.stem for p in PLUGIN_FILES)
RAGTRAIL_SURFACE = ("ragtrail.pipeline", "ragtrail.paths", "ragtrail.records")
AIRFLOW_SDK = ("airflow.sdk",)
AIRFLOW_PLUGIN_API = ("airflow.plugins_manager",)
"""Only an AirflowPlugin needs this; everything else Airflow offers goes through airflow.sdk."""
WEB_APP_SURFACE = {
    "ragtrail_reports_app.py": (
        "fastapi",
        "airflow.api_fastapi.app",
        "airflow.api_fastapi.auth.managers.models",
        "airflow.api_fastapi.core_api.security",
        "ragtrail.report.catalog",
        "ragtrail.report.catalog_pages",
        "ragtrail.runtime",
    )
}
"""The one plugin module that is a web app (built in the API server on its first request): it
also needs FastAPI, the API server's authentication and auth manager, and the core's reports
catalog with the Runtime that opens the stores."""


def _within(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == root or module.startswith(f"{root}.") for root in roots)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, module-level or nested; relative imports
    are reported as ``.``-prefixed names."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def disallowed_module(module: str, *, plugin_api: bool, also: tuple[str, ...] = ()) -> bool:
    """Whether one imported module name breaks the adapter rules (``also``: a file's extra
    allowed modules)."""
    airflow_ok = AIRFLOW_SDK + (AIRFLOW_PLUGIN_API if plugin_api else ())
    top = module.split(".")[0]
    return not (
        module == "__future__"
        or (top in sys.stdlib_module_names and top not in {"airflow", "ragtrail"})
        or top in LOCAL_PLUGIN_MODULES
        or (top == "airflow" and _within(module, airflow_ok))
        or (top == "ragtrail" and _within(module, RAGTRAIL_SURFACE))
        or _within(module, also)
    )


def disallowed(path: Path, *, plugin_api: bool) -> list[str]:
    """The imports of ``path`` that break the adapter rules, as ``line module``."""
    also = WEB_APP_SURFACE.get(path.name, ()) if plugin_api else ()
    return [
        f"{line} {module}"
        for line, module in imported_modules(path)
        if disallowed_module(module, plugin_api=plugin_api, also=also)
    ]


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_dag_files_import_only_the_sdk_and_the_pipeline_surface(path: Path) -> None:
    assert disallowed(path, plugin_api=False) == []


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: p.name)
def test_plugin_files_import_only_the_sdk_and_the_pipeline_surface(path: Path) -> None:
    assert disallowed(path, plugin_api=True) == []


def test_the_rules_catch_deep_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from airflow.sdk import dag\n"
        "from airflow.models import Variable\n"
        "import pandas, json\n"
        "from assets import CORPUS_ASSET\n"
        "def t():\n"
        "    from ragtrail.llm import LLMClient\n"
        "    from ragtrail.pipeline import tasks\n",
        encoding="utf-8",
    )
    assert disallowed(probe, plugin_api=False) == ["2 airflow.models", "3 pandas", "6 ragtrail.llm"]
    assert disallowed_module("airflow.plugins_manager", plugin_api=False)
    assert not disallowed_module("airflow.plugins_manager", plugin_api=True)
    web = WEB_APP_SURFACE["ragtrail_reports_app.py"]
    assert not disallowed_module("airflow.api_fastapi.core_api.security", plugin_api=True, also=web)
    assert disallowed_module("airflow.api_fastapi.core_api.security", plugin_api=True)
    assert disallowed_module("ragtrail.storage.artifacts", plugin_api=True, also=web)
    assert disallowed_module("airflow.models", plugin_api=True, also=web)
