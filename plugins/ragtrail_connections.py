"""Airflow connections -> ragtrail settings, read by each task at run time (never at parse time).

ragtrail reads its settings from ``RAGTRAIL_*`` variables. On Airflow, credentials usually live in
connections (UI, secrets backend, ``AIRFLOW_CONN_*``), so before a step runs the worker maps the
three connections ``airflow_settings.yaml`` declares onto those variables:

| connection | becomes |
|---|---|
| ``ragtrail_es`` | ``RAGTRAIL_ES_URL`` (schema://host:port), ``RAGTRAIL_ES_USERNAME`` / ``_PASSWORD``, ``RAGTRAIL_ES_API_KEY`` (extra ``api_key``) |
| ``ragtrail_llm`` | ``RAGTRAIL_LLM_BASE_URL`` (schema://host:port + extra ``api_base_path``), ``RAGTRAIL_LLM_API_KEY`` (password) |
| ``ragtrail_s3`` | ``RAGTRAIL_S3_ENDPOINT_URL`` (extra ``endpoint_url``), ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (login / password), ``AWS_DEFAULT_REGION`` (extra ``region_name``) |

A variable already set in the worker's environment wins (explicit configuration beats the
template), and a connection that does not exist configures nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

CONNECTION_IDS = ("ragtrail_es", "ragtrail_llm", "ragtrail_s3")


def _url(conn: Any, path: str = "") -> str | None:
    if not conn.host:
        return None
    port = f":{conn.port}" if conn.port else ""
    return f"{conn.schema or 'http'}://{conn.host}{port}{path}"


def env_from_connection(conn_id: str, conn: Any) -> dict[str, str]:
    """The ``RAGTRAIL_*`` / AWS variables one connection stands for (empty values left out)."""
    extra: Mapping[str, Any] = conn.extra_dejson or {}
    if conn_id == "ragtrail_es":
        values = {
            "RAGTRAIL_ES_URL": _url(conn),
            "RAGTRAIL_ES_USERNAME": conn.login,
            "RAGTRAIL_ES_PASSWORD": conn.password,
            "RAGTRAIL_ES_API_KEY": extra.get("api_key"),
        }
    elif conn_id == "ragtrail_llm":
        values = {
            "RAGTRAIL_LLM_BASE_URL": _url(conn, str(extra.get("api_base_path") or "")),
            "RAGTRAIL_LLM_API_KEY": conn.password,
        }
    elif conn_id == "ragtrail_s3":
        values = {
            "RAGTRAIL_S3_ENDPOINT_URL": extra.get("endpoint_url"),
            "AWS_ACCESS_KEY_ID": conn.login,
            "AWS_SECRET_ACCESS_KEY": conn.password,
            "AWS_DEFAULT_REGION": extra.get("region_name"),
        }
    else:
        raise ValueError(f"unknown ragtrail connection {conn_id!r}")
    return {key: str(value) for key, value in values.items() if value not in (None, "")}


def apply_connections(
    lookup: Callable[[str], Any | None], environ: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """Set the variables of every existing connection that the environment does not set yet.

    ``lookup(conn_id)`` returns the connection or None. Returns what was set.
    """
    environ = os.environ if environ is None else environ
    applied: dict[str, str] = {}
    for conn_id in CONNECTION_IDS:
        conn = lookup(conn_id)
        if conn is None:
            continue
        for key, value in env_from_connection(conn_id, conn).items():
            if key not in environ:
                environ[key] = applied[key] = value
    return applied


def airflow_lookup(conn_id: str) -> Any | None:
    """The connection from Airflow (inside a running task), or None when it is not defined."""
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return Connection.get(conn_id)
    except AirflowNotFoundException:
        return None
