"""Settings every ragtrail DAG shares, so retry policy and ownership cannot drift apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

START_DATE = datetime(2025, 1, 1, tzinfo=UTC)


def default_args() -> dict[str, Any]:
    """A fresh ``default_args`` dict: owner, two retries with exponential backoff from 5 min."""
    return {
        "owner": "ragtrail",
        "retries": 2,
        "retry_delay": timedelta(minutes=5),
        "retry_exponential_backoff": 2.0,
    }
