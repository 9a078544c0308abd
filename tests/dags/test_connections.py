"""Airflow connections become ragtrail settings at task run time (plugins/ragtrail_connections.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.dags import _airflow_env as ENV

ENV.ensure_airflow_env()

pytestmark = pytest.mark.airflow


def _conn(**fields: Any) -> SimpleNamespace:
    base = {"host": None, "port": None, "schema": None, "login": None, "password": None}
    extra = fields.pop("extra", {})
    return SimpleNamespace(**{**base, **fields}, extra_dejson=extra)


@pytest.fixture(scope="module")
def connections() -> Any:
    import sys

    sys.path.insert(0, str(ENV.PLUGINS_DIR))
    import ragtrail_connections

    return ragtrail_connections


def test_each_connection_maps_to_its_settings(connections: Any) -> None:
    es = _conn(
        host="es", port=9200, schema="https", login="u", password="p", extra={"api_key": "k"}
    )
    assert connections.env_from_connection("ragtrail_es", es) == {
        "RAGTRAIL_ES_URL": "https://es:9200",
        "RAGTRAIL_ES_USERNAME": "u",
        "RAGTRAIL_ES_PASSWORD": "p",
        "RAGTRAIL_ES_API_KEY": "k",
    }
    llm = _conn(host="vllm", port=8000, password="sk", extra={"api_base_path": "/v1"})
    assert connections.env_from_connection("ragtrail_llm", llm) == {
        "RAGTRAIL_LLM_BASE_URL": "http://vllm:8000/v1",
        "RAGTRAIL_LLM_API_KEY": "sk",
    }
    s3 = _conn(extra={"endpoint_url": "http://minio:9000", "region_name": "eu-west-1"})
    assert connections.env_from_connection("ragtrail_s3", s3) == {
        "RAGTRAIL_S3_ENDPOINT_URL": "http://minio:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }


def test_explicit_environment_wins_and_missing_connections_set_nothing(connections: Any) -> None:
    found = {"ragtrail_llm": _conn(host="vllm", port=8000, password="from-conn")}
    environ = {"RAGTRAIL_LLM_API_KEY": "from-env"}
    applied = connections.apply_connections(found.get, environ)
    assert applied == {"RAGTRAIL_LLM_BASE_URL": "http://vllm:8000"}
    assert environ == {
        "RAGTRAIL_LLM_API_KEY": "from-env",
        "RAGTRAIL_LLM_BASE_URL": "http://vllm:8000",
    }
