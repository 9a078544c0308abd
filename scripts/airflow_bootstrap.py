#!/usr/bin/env python
"""Apply airflow_settings.yaml (pools, connection templates, variables) to an Airflow 3 DB.

Uses Airflow's own CLI against whatever metadata DB the environment configures
(``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``), after ``airflow db migrate``:

- pools: ``airflow pools import`` — creates or updates, so slot changes in the YAML apply;
- variables: ``airflow variables import --action-on-existing-key skip``;
- connections: ``airflow connections import`` without ``--overwrite``.

Existing variables and connections are never overwritten: operators add credentials to them
later (UI, secrets backend), and a re-run must not wipe those. Running it twice is a no-op.

Usage::

    python scripts/airflow_bootstrap.py [--settings airflow_settings.yaml] [--pools-only]
                                        [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_SETTINGS = Path(__file__).resolve().parents[1] / "airflow_settings.yaml"
CONN_FIELDS = {
    "conn_type": "conn_type",
    "conn_host": "host",
    "conn_port": "port",
    "conn_schema": "schema",
    "conn_login": "login",
    "conn_description": "description",
}
SECRET_KEYS = ("conn_password", "password", "secret", "token", "api_key", "aws_secret_access_key")


@dataclass
class AirflowSettings:
    """The parsed, validated content of airflow_settings.yaml."""

    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    connections: dict[str, dict[str, Any]] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)


def _secret_like(key: str) -> bool:
    return any(marker in key.lower() for marker in SECRET_KEYS)


def parse_settings(path: Path) -> AirflowSettings:
    """Read and validate the Astronomer-style settings file; refuse secrets in it."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    section = raw.get("airflow") or {}
    if not isinstance(section, dict):
        raise ValueError(f"{path}: 'airflow' must be a mapping")
    settings = AirflowSettings()

    for item in section.get("pools") or []:
        name, slots = item.get("pool_name"), item.get("pool_slot")
        if not name or not isinstance(slots, int) or isinstance(slots, bool) or slots < -1:
            raise ValueError(f"{path}: pool needs pool_name and an integer pool_slot >= -1: {item}")
        settings.pools[name] = {
            "slots": slots,
            "description": (item.get("pool_description") or "").strip(),
            "include_deferred": bool(item.get("pool_include_deferred", False)),
        }

    for item in section.get("connections") or []:
        conn_id = item.get("conn_id")
        if not conn_id or not item.get("conn_type"):
            raise ValueError(f"{path}: connection needs conn_id and conn_type: {item}")
        if item.get("conn_password"):
            raise ValueError(f"{path}: connection {conn_id!r} has a password; use the env/UI")
        extra = item.get("conn_extra") or {}
        leaked = [key for key, value in extra.items() if _secret_like(key) and value]
        if leaked:
            raise ValueError(f"{path}: connection {conn_id!r} extra holds secrets {leaked}")
        conn = {
            target: item[source]
            for source, target in CONN_FIELDS.items()
            if item.get(source) not in (None, "")
        }
        if extra:
            conn["extra"] = json.dumps(extra, sort_keys=True)
        settings.connections[conn_id] = conn

    for item in section.get("variables") or []:
        key = item.get("variable_name")
        if not key:
            raise ValueError(f"{path}: variable needs variable_name: {item}")
        if _secret_like(key):
            raise ValueError(f"{path}: variable {key!r} looks like a secret; use the env/UI")
        value = item.get("variable_value")
        settings.variables[key] = value if isinstance(value, str) else json.dumps(value)
    return settings


def airflow_command() -> list[str]:
    """The ``airflow`` CLI next to this interpreter, else the one on PATH."""
    beside = Path(sys.executable).with_name("airflow")
    return [str(beside)] if beside.exists() else ["airflow"]


def _run_import(kind: str, payload: dict[str, Any], extra_args: list[str], dry_run: bool) -> None:
    if not payload:
        return
    with tempfile.TemporaryDirectory(prefix="ragtrail-bootstrap-") as tmp:
        path = Path(tmp) / f"{kind}.json"
        path.write_text(json.dumps(payload, indent=1), encoding="utf-8")
        cmd = [*airflow_command(), kind, "import", str(path), *extra_args]
        print(f"$ {' '.join(cmd)}  # {sorted(payload)}", flush=True)
        if not dry_run:
            subprocess.run(cmd, check=True, env=os.environ)


def apply_settings(settings: AirflowSettings, *, pools_only: bool, dry_run: bool) -> None:
    """Import pools (upsert), then variables and connections (skip existing ones)."""
    _run_import("pools", settings.pools, [], dry_run)
    if pools_only:
        return
    _run_import("variables", settings.variables, ["--action-on-existing-key", "skip"], dry_run)
    _run_import("connections", settings.connections, [], dry_run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", type=Path, default=DEFAULT_SETTINGS)
    parser.add_argument("--pools-only", action="store_true", help="skip variables/connections")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    settings = parse_settings(args.settings)
    apply_settings(settings, pools_only=args.pools_only, dry_run=args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
