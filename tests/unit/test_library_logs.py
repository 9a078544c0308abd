"""Third-party chatter stays out of task logs; warnings still come through (fresh interpreters,
since what is measured is what happens on first import)."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, logging, os, sys
os.environ.pop("MLFLOW_CONFIGURE_LOGGING", None)
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.name, record.levelname))
logging.basicConfig(level=logging.INFO, handlers=[Keep()])
order = sys.argv[1]
if order == "mlflow-first":
    import mlflow
from ragtrail.library_logs import quiet_library_logs
quiet_library_logs()
import faiss, mlflow
import great_expectations
logging.getLogger("mlflow.tracking").info("an mlflow info line")
logging.getLogger("faiss.loader").warning("a faiss warning")
print(json.dumps({"records": records, "mlflow_handlers": len(logging.getLogger("mlflow").handlers)}))
"""


def _probe(order: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, order], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_quiet_before_the_imports() -> None:
    seen = _probe("quiet-first")
    records = [tuple(r) for r in seen["records"]]
    assert not [
        r for r in records if r[0].startswith(("faiss", "great_expectations")) and r[1] == "INFO"
    ]
    # MLflow logs through the hierarchy at its real level, not through its own stderr handler.
    assert ("mlflow.tracking", "INFO") in records and seen["mlflow_handlers"] == 0
    assert ("faiss.loader", "WARNING") in records


def test_quiet_after_mlflow_configured_itself() -> None:
    seen = _probe("mlflow-first")
    assert seen["mlflow_handlers"] == 0
    assert ("mlflow.tracking", "INFO") in [tuple(r) for r in seen["records"]]
