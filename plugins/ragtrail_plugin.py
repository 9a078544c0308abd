"""Airflow UI plugin: links ragtrail's evaluation reports and GX Data Docs into the navigation.

Airflow 3 replaced the Flask-AppBuilder menu items of Airflow 2 with ``external_views``: plain
dictionaries the React UI renders. A view without ``url_route`` is an external link opened from
the navigation bar; ``category`` places it in one of the existing menus ("browse" here).

Where the links point is deployment configuration, read once when the plugin module loads:

- ``RAGTRAIL_REPORTS_URL``: the base URL under which the artifact store is browsable (the
  compose stack sets it to its MinIO console). The nav link opens ``<base>/runs/``; each run's
  own report is linked from its retrieval-metrics asset event and its ``publish`` task result
  (``report_url``, ``data_docs_url``: ``<base>/runs/<run id>/report/...``), which is where a
  user looking at a run in the Airflow UI finds it. Unset: no link, and the events say why.
- ``RAGTRAIL_DATA_DOCS_URL``: an extra nav link to a Great Expectations Data Docs site.

The plugin serves no files itself: an unauthenticated file server inside the API server would
expose document excerpts. Point the links at a store with its own access control.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin


def _link(name: str, href: str) -> dict[str, Any]:
    return {"name": name, "href": href, "destination": "nav", "category": "browse"}


def build_external_views(env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The navigation links for the given environment (``os.environ`` by default)."""
    env = os.environ if env is None else env
    views = []
    if reports := env.get("RAGTRAIL_REPORTS_URL"):
        views.append(_link("ragtrail reports", f"{reports.rstrip('/')}/runs/"))
    if data_docs := env.get("RAGTRAIL_DATA_DOCS_URL"):
        views.append(_link("ragtrail GX Data Docs", data_docs))
    return views


class RagtrailPlugin(AirflowPlugin):
    """Registers ragtrail's report links in the Airflow UI."""

    name = "ragtrail"
    external_views = build_external_views()
