"""Keep third-party libraries' chatter out of task logs, so a task log reads like a story.

Measured in Airflow task logs: a Great Expectations task wrote about 214 "Skipping registering
function" INFO lines of its 250; faiss announced each instruction set it failed to load at
INFO; MLflow installs its own stderr handler, which the task runner files as ERROR, so its INFO
lines arrived as errors. :func:`quiet_library_logs` raises those loggers to WARNING and lets
MLflow log through the standard hierarchy (at its real level) instead of its own handler.
Warnings and errors of every library still come through.
"""

from __future__ import annotations

import logging
import os

QUIET_LOGGERS: tuple[str, ...] = (
    "great_expectations._docs_decorators",  # one INFO line per decorated function
    "great_expectations.expectations.registry",  # "multiple declarations of metric ..."
    "faiss.loader",  # one INFO line per instruction set tried
    "alembic",  # MLflow's store migrations, one INFO line per revision
)
"""Loggers held at WARNING: their INFO lines say nothing about the task."""


def quiet_library_logs() -> None:
    """Apply the module docstring's rules (idempotent; cheap; imports nothing heavy)."""
    # Read by mlflow when it is first imported: no handler of its own.
    os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    mlflow_logger = logging.getLogger("mlflow")
    if os.environ["MLFLOW_CONFIGURE_LOGGING"].lower() == "false" and mlflow_logger.handlers:
        # mlflow was imported before this call and configured itself: undo it.
        mlflow_logger.handlers = []
        mlflow_logger.propagate = True
        mlflow_logger.setLevel(logging.NOTSET)
