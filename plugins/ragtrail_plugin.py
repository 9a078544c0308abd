"""Airflow UI plugin: the "ragtrail reports" view, served by the API server itself.

Airflow 3 plugins extend the UI with ``external_views`` (dictionaries the React UI renders; with a
``url_route`` the view opens inside the UI, in an iframe at ``/plugin/<url_route>``) and the API
server with ``fastapi_apps`` (``{"app", "url_prefix", "name"}``: mounted under the prefix). This
plugin does both: it mounts ``plugins/ragtrail_reports_app.py`` under ``/ragtrail`` and puts
"ragtrail reports" under *Browse*. The view lists the corpora, per corpus its nights with the
headline metric's history, and serves each night's report and Data Docs and each snapshot's
corpus checks from the artifact store of the API server's ``RAGTRAIL_*`` settings (local folder
or S3), so every installation has a working view without a separate file server. Every route
requires the Airflow user's session (or a bearer token) and read access to the DAG that
published what it serves (see that module).

``RAGTRAIL_DATA_DOCS_URL`` still adds a link to another Great Expectations Data Docs site. The
old ``RAGTRAIL_REPORTS_URL`` navigation link is gone (the view serves the same files, with the
user's access checked); the setting still gives the runs' ``report_url`` / ``data_docs_url``
in their events and task results.

Loading the plugin stays cheap (the API server loads it at start, task processes too): the
reports app is imported and built on its first request.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/ragtrail"
VIEW_NAME = "ragtrail reports"
VIEW_ROUTE = "ragtrail-reports"


class BuiltOnFirstRequest:
    """An ASGI app that builds ``factory()`` when the first request arrives, in a thread (off
    the event loop), and hands every request to it."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._app: Any = None
        self._lock = threading.Lock()

    def build(self) -> Any:
        with self._lock:
            if self._app is None:
                self._app = self._factory()
            return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        app = self._app or await asyncio.to_thread(self.build)
        await app(scope, receive, send)


def _reports_app() -> Any:
    from ragtrail_reports_app import create_app

    return create_app()


def view_href(base_url: str | None) -> str:
    """Where the UI's iframe opens the view: the prefix under the API server's base path."""
    base_path = urlsplit(base_url or "").path.rstrip("/")
    return f"{base_path}{URL_PREFIX}/"


def _api_base_url() -> str | None:
    from airflow.sdk.configuration import conf

    return conf.get("api", "base_url", fallback=None)


def build_external_views(
    env: Mapping[str, str] | None = None, base_url: str | None = None
) -> list[dict[str, Any]]:
    """The navigation entries: the served view, plus ``RAGTRAIL_DATA_DOCS_URL`` when set in
    ``env`` (``os.environ`` by default)."""
    env = os.environ if env is None else env
    views: list[dict[str, Any]] = [
        {
            "name": VIEW_NAME,
            "href": view_href(base_url),
            "url_route": VIEW_ROUTE,
            "destination": "nav",
            "category": "browse",
        }
    ]
    if data_docs := env.get("RAGTRAIL_DATA_DOCS_URL"):
        views.append(
            {
                "name": "ragtrail GX Data Docs",
                "href": data_docs,
                "destination": "nav",
                "category": "browse",
            }
        )
    return views


class RagtrailPlugin(AirflowPlugin):
    """Mounts the ragtrail reports view and links it into the Airflow UI."""

    name = "ragtrail"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": BuiltOnFirstRequest(_reports_app), "url_prefix": URL_PREFIX, "name": VIEW_NAME}
    ]
    external_views: ClassVar[list[dict[str, Any]]] = build_external_views(base_url=_api_base_url())
