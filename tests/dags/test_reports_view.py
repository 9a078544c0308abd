"""The "ragtrail reports" view as the API server serves it: mounted by the plugin's
``fastapi_apps`` under /ragtrail in Airflow's own API app, linked by its ``external_views``,
every route refused without an Airflow session (401), with an invalid token (403) or without
read access (403), and served with a SimpleAuthManager token (header or the UI's cookie):
the corpus index, the nights with their links, a report, its Data Docs, the corpus checks;
refused traversal (400) and a missing run (404). Loading the plugin imports no report stack."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

from tests.dags import _airflow_env as ENV

ENV.ensure_airflow_env()  # before anything imports airflow (no-op after tests/conftest.py)

pytestmark = pytest.mark.airflow

if str(ENV.PLUGINS_DIR) not in sys.path:
    sys.path.insert(0, str(ENV.PLUGINS_DIR))  # as Airflow does for the plugins folder


@pytest.fixture(scope="module")
def ragtrail_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A ragtrail home with two published nights of handbook and the snapshot's checks."""
    from ragtrail.config import load_settings
    from ragtrail.runtime import Runtime
    from tests.unit.report._published import publish_corpus_checks, publish_night

    home = tmp_path_factory.mktemp("view") / "home"
    rt = Runtime(load_settings(home=home))
    publish_night(rt, "retrieval-n1", {"handbook-sample": 0.5, "generated": 0.3})
    publish_night(rt, "retrieval-n2", {"handbook-sample": 0.6, "generated": 0.4})
    publish_corpus_checks(rt)
    rt.close()
    yield home


@pytest.fixture(scope="module")
def api(ragtrail_home: Path) -> Iterator[Any]:
    """Airflow's API app (core) with this repository's plugins; the view's Runtime reads
    RAGTRAIL_HOME when its first request builds it."""
    from fastapi.testclient import TestClient

    ENV.migrate_db()  # the auth manager checks tokens against the revoked-token table
    patch = pytest.MonkeyPatch()
    patch.setenv("RAGTRAIL_HOME", str(ragtrail_home))
    from airflow.api_fastapi.app import create_app, purge_cached_app

    try:
        with TestClient(create_app(apps="core")) as client:
            yield client
    finally:
        purge_cached_app()
        patch.undo()


def _token(role: str | None) -> str:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="u", role=role))


def _get(api: Any, path: str, role: str | None = "viewer", **kwargs: Any) -> Any:
    return api.get(path, headers={"Authorization": f"Bearer {_token(role)}"}, **kwargs)


ROUTES = [
    "/ragtrail/",
    "/ragtrail/corpora/handbook",
    "/ragtrail/runs/retrieval-n2/report.html",
    "/ragtrail/runs/retrieval-n2/data_docs/index.html",
    "/ragtrail/corpora/handbook/snapshots/snap-1/data_docs/index.html",
]


@pytest.mark.parametrize("path", ROUTES)
def test_every_route_needs_an_airflow_user_with_read_access(api: Any, path: str) -> None:
    anonymous = api.get(path)
    assert anonymous.status_code == 401, anonymous.text
    forged = api.get(path, headers={"Authorization": "Bearer not-a-jwt"})
    assert forged.status_code == 403
    no_role = _get(api, path, role=None)
    assert no_role.status_code == 403 and "no read access" in no_role.text
    viewer = _get(api, path)
    assert viewer.status_code == 200, viewer.text


def test_the_ui_session_cookie_is_enough(api: Any) -> None:
    api.cookies.set("_token", _token("viewer"))
    try:
        assert api.get("/ragtrail/corpora/handbook").status_code == 200
    finally:
        api.cookies.clear()


def _links(html: str) -> list[str]:
    return re.findall(r'href="([^"]+)"', html)


def test_the_index_lists_the_corpus_and_its_nights_link_to_their_files(api: Any) -> None:
    index = _get(api, "/ragtrail/")
    assert index.headers["content-type"].startswith("text/html")
    assert "script-src" not in index.headers["content-security-policy"]  # no script at all
    assert "default-src 'none'" in index.headers["content-security-policy"]
    (corpus_link,) = [link for link in _links(index.text) if "corpora/" in link]
    corpus_url = urljoin("http://testserver/ragtrail/", corpus_link)
    corpus = _get(api, corpus_url)
    assert corpus.status_code == 200
    assert "retrieval-n2" in corpus.text and "retrieval-n1" in corpus.text
    assert "<svg" in corpus.text and "0.600" in corpus.text
    served = {}
    for link in _links(corpus.text):
        url = urljoin(corpus_url, link)
        response = _get(api, url)
        assert response.status_code == 200, (url, response.text)
        served[url.removeprefix("http://testserver")] = response
    report = served["/ragtrail/runs/retrieval-n2/report.html"]
    assert report.text == "<html>report retrieval-n2</html>"
    assert "connect-src 'none'" in report.headers["content-security-policy"]
    assert served["/ragtrail/runs/retrieval-n1/data_docs/index.html"].text == (
        "<html>data docs</html>"
    )
    checks = served["/ragtrail/corpora/handbook/snapshots/snap-1/data_docs/index.html"]
    assert checks.text == "<html>corpus checks</html>"
    assert "/ragtrail/" in served  # the way back


def test_a_plot_and_the_metrics_document_keep_their_types(api: Any) -> None:
    plot = _get(api, "/ragtrail/runs/retrieval-n2/recall_at_5_vs_text_weight.png")
    assert plot.headers["content-type"] == "image/png" and plot.content == b"\x89PNG fake"
    document = _get(api, "/ragtrail/runs/retrieval-n2/metrics.json")
    assert json.loads(document.content)["run_id"] == "retrieval-n2"


@pytest.mark.parametrize(
    "path",
    [
        "/ragtrail/runs/retrieval-n2/%2E%2E/metrics.json",
        "/ragtrail/runs/retrieval-n2/data_docs/%2e%2e/%2e%2e/%2e%2e/corpora/handbook/x",
        "/ragtrail/runs/%2E%2E/report.html",
        "/ragtrail/runs/retrieval-n2/..%5Cmetrics.json",
        "/ragtrail/corpora/handbook/snapshots/snap-1/data_docs/%2E%2E/validations.json",
    ],
)
def test_traversal_is_refused(api: Any, path: str) -> None:
    response = _get(api, path)
    assert response.status_code == 400, (path, response.status_code, response.text)
    assert "Refused" in response.text


def test_a_missing_run_file_or_corpus_is_404(api: Any) -> None:
    for path in (
        "/ragtrail/runs/retrieval-n9/report.html",
        "/ragtrail/runs/retrieval-n2/data_docs/absent.html",
        "/ragtrail/corpora/nope",
    ):
        response = _get(api, path)
        assert response.status_code == 404, (path, response.text)
        assert "Not found" in response.text
    # the problem page links back to the view's root from where it was asked
    deep = _get(api, "/ragtrail/runs/retrieval-n9/data_docs/a/b.html")
    (home,) = _links(deep.text)
    assert urljoin("http://testserver/ragtrail/runs/retrieval-n9/data_docs/a/b.html", home) == (
        "http://testserver/ragtrail/"
    )


def test_the_plugin_mounts_and_links_the_view() -> None:
    from airflow import plugins_manager

    apps = {a["name"]: a for a in plugins_manager.get_fastapi_plugins()[0]}
    assert apps["ragtrail reports"]["url_prefix"] == "/ragtrail"
    (info,) = [p for p in plugins_manager.get_plugin_info() if p["name"] == "ragtrail"]
    (view,) = [v for v in info["external_views"] if v["name"] == "ragtrail reports"]
    assert view["href"] == "/ragtrail/" and view["url_route"] == "ragtrail-reports"
    assert view["destination"] == "nav" and view["category"] == "browse"

    import ragtrail_plugin

    assert ragtrail_plugin.view_href("http://host:8080/airflow/") == "/airflow/ragtrail/"
    assert ragtrail_plugin.view_href(None) == "/ragtrail/"
    extra = ragtrail_plugin.build_external_views({"RAGTRAIL_DATA_DOCS_URL": "https://dd"})
    assert [v["href"] for v in extra] == ["/ragtrail/", "https://dd"]


_LOAD_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import airflow.plugins_manager
before = set(sys.modules)
import ragtrail_plugin
print(json.dumps(sorted(set(sys.modules) - before)))
"""
HEAVY = ("fastapi", "ragtrail", "pandas", "matplotlib", "torch", "sqlalchemy", "boto3")


def test_loading_the_plugin_imports_no_report_stack() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_PROBE, str(ENV.PLUGINS_DIR)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    new = json.loads(done.stdout.strip().splitlines()[-1])
    assert "ragtrail_plugin" in new
    assert [m for m in new if m.split(".")[0] in HEAVY] == []


def test_unusable_settings_are_a_503_that_names_no_value(api: Any) -> None:
    from fastapi.testclient import TestClient
    from ragtrail_reports_app import create_app

    def broken() -> Any:
        raise ValueError("RAGTRAIL_DATABASE_URL=postgresql://u:hunter2@db/x is unreachable")

    with TestClient(create_app(stores=broken)) as client:
        response = _get(client, "/")
    assert response.status_code == 503 and "see its log" in response.text
    assert "hunter2" not in response.text
