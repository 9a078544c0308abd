"""Airflow adapter: the "ragtrail reports" view, a FastAPI app the API server mounts.

The pages and files come from the core (``ragtrail.report.catalog``: what is published, and
the files confined to a report's or a snapshot's Data Docs prefix; ``catalog_pages``: the index
pages and their URL layout). This module only maps routes onto them and guards every route:

- **Authentication** is Airflow's own: :func:`airflow.api_fastapi.core_api.security.get_user`
  accepts the UI's session cookie (``_token``, sent by the browser to the same origin, so the
  view works inside the UI's iframe) or an ``Authorization: Bearer <JWT>`` header, and answers
  401 without one, 403 for an invalid one.
- **Authorization** goes through the installation's auth manager: a report may be read by whoever
  may read the runs of the DAG that published it (``evaluate_retrieval`` for reports and the index
  pages, ``ingest_corpus`` for a snapshot's corpus checks); else 403.

The artifact store and database are those of the ``RAGTRAIL_*`` settings of the API server's
process (with the ``ragtrail_*`` Airflow connections applied as in the workers), built once, on
the first request. Responses carry a Content-Security-Policy: the index pages run no script, and
a published file may not open connections or submit forms (defence in depth: Data Docs show
document excerpts and run their own scripts on this origin).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Annotated

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, Response
from ragtrail_connections import airflow_lookup, apply_connections

from ragtrail.pipeline.night import EVALUATE, INGEST
from ragtrail.report.catalog import (
    DEFAULT_NIGHTS,
    CatalogError,
    RefusedPath,
    ReportCatalog,
    ServedFile,
    Stores,
)
from ragtrail.report.catalog_pages import (
    CHECKS_FILE_ROUTE,
    CORPUS_ROUTE,
    INDEX_ROUTE,
    REPORT_FILE_ROUTE,
    render_corpus,
    render_index,
    render_problem,
)

log = logging.getLogger(__name__)

PAGE_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
)
"""The index pages: no script, inline styles and SVG only, framed by the Airflow UI only."""
FILE_POLICY = (
    "default-src 'self' https: data: 'unsafe-inline'; connect-src 'none'; form-action 'none'; "
    "object-src 'none'; base-uri 'self'; frame-ancestors 'self'"
)
"""Published files: their own styles, images and scripts (Data Docs load theirs from CDNs), but
no request a script could send as the signed-in user (fetch, XHR, forms)."""
MAX_NIGHTS = 500


def _may_read(dag_id: str) -> Callable[[BaseUser], None]:
    """A dependency: the signed-in user may read the runs of ``dag_id``, else 403."""

    def check(user: Annotated[BaseUser, Depends(get_user)]) -> None:
        allowed = get_auth_manager().is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag_id),
            user=user,
        )
        if not allowed:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"no read access to {dag_id} runs")

    return check


def default_stores() -> Stores:
    """The Runtime of this process's ragtrail settings, after the ``ragtrail_*`` connections."""
    from ragtrail.runtime import Runtime

    try:
        apply_connections(airflow_lookup)
    except Exception:  # no connection store reachable: the environment alone configures
        log.warning("ragtrail connections not applied to the reports view", exc_info=True)
    return Runtime()


class _Catalog:
    """The catalog, built on first use and kept (engine pool, S3 client); a build that fails
    (bad settings) is retried on the next request."""

    def __init__(self, stores: Callable[[], Stores]) -> None:
        self._stores = stores
        self._catalog: ReportCatalog | None = None
        self._lock = threading.Lock()

    def __call__(self) -> ReportCatalog:
        with self._lock:
            if self._catalog is None:
                try:
                    self._catalog = ReportCatalog(self._stores())
                except Exception as exc:  # its message may name a setting's value: logged only
                    log.exception("ragtrail reports view: the API server's ragtrail settings")
                    raise HTTPException(
                        status.HTTP_503_SERVICE_UNAVAILABLE,
                        "the API server's ragtrail settings are unusable (see its log)",
                    ) from exc
            return self._catalog


def _html(body: str, code: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=code, headers=_headers(PAGE_POLICY))


def _headers(policy: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, no-cache",
    }


def _file(served: ServedFile) -> Response:
    return Response(served.data, media_type=served.media_type, headers=_headers(FILE_POLICY))


def _root_of(request: Request) -> str:
    """The relative link from the requested page back to the view's root."""
    mounted = request.scope.get("root_path", "")
    inside = request.url.path[len(mounted) :] if request.url.path.startswith(mounted) else ""
    return "../" * max(inside.count("/") - 1, 0)


def create_app(stores: Callable[[], Stores] = default_stores) -> FastAPI:
    """The view's app; ``stores`` builds the artifact store and database (tests pass theirs)."""
    catalog = _Catalog(stores)
    reports = [Depends(_may_read(EVALUATE.dag_id))]
    app = FastAPI(
        title="ragtrail reports",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.exception_handler(CatalogError)
    async def _problem(request: Request, exc: CatalogError) -> HTMLResponse:
        code = 400 if isinstance(exc, RefusedPath) else 404
        title = "Refused" if isinstance(exc, RefusedPath) else "Not found"
        return _html(render_problem(title, str(exc), root=_root_of(request)), code)

    @app.get(INDEX_ROUTE, dependencies=reports, response_class=HTMLResponse)
    def index() -> HTMLResponse:
        """Every corpus with published reports."""
        found = catalog()
        return _html(render_index(found.corpora(), source=found.source))

    @app.get(CORPUS_ROUTE, dependencies=reports, response_class=HTMLResponse)
    def corpus(
        corpus: str, limit: Annotated[int, Query(ge=1, le=MAX_NIGHTS)] = DEFAULT_NIGHTS
    ) -> HTMLResponse:
        """A corpus's nights, newest first, with the headline history and links."""
        found = catalog()
        return _html(render_corpus(found.nights(corpus, limit), source=found.source))

    @app.get(REPORT_FILE_ROUTE, dependencies=reports)
    def report_file(report_id: str, path: str) -> Response:
        """A file of a published report: its HTML, plots, metrics.json, Data Docs."""
        return _file(catalog().report_file(report_id, path))

    @app.get(CHECKS_FILE_ROUTE, dependencies=[Depends(_may_read(INGEST.dag_id))])
    def corpus_checks_file(corpus: str, snapshot_id: str, path: str) -> Response:
        """A file of the Data Docs of a snapshot's corpus checks."""
        return _file(catalog().corpus_checks_file(corpus, snapshot_id, path))

    return app
