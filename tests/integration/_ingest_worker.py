"""An ingest in a process of its own, for the lock and kill tests of test_ingest_guards.

``python -m tests.integration._ingest_worker MODE HOME SOURCE CORPUS SIGNALS``

- ``exit-before-finalize``: plan and every shard, then ``os._exit`` as a killed process would
  (no cleanup, no finalize): the snapshot stays running with this dead process as its owner.
- ``pause-after-plan``: plan, create ``SIGNALS/planned``, wait until ``SIGNALS/go`` exists, then
  shards and finalize; the summary goes to stdout as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ragtrail.config import load_settings
from ragtrail.pipeline.ingest import finalize_ingest, ingest_shard, plan_ingest
from ragtrail.runtime import Runtime

WAIT_LIMIT_S = 600


def main(mode: str, home: str, source: str, corpus: str, signals: str) -> None:
    rt = Runtime(load_settings(home=Path(home)))
    plan = plan_ingest(rt, source, corpus, shard_size=2)
    if mode == "pause-after-plan":
        (Path(signals) / "planned").write_text(plan.snapshot_id)
        deadline = time.monotonic() + WAIT_LIMIT_S
        while not (Path(signals) / "go").exists():
            if time.monotonic() > deadline:
                raise SystemExit("never told to go on")
            time.sleep(0.05)
    for shard in plan.shards:
        ingest_shard(rt, corpus, plan.snapshot_id, shard)
    if mode == "exit-before-finalize":
        sys.stdout.write(plan.snapshot_id + "\n")
        sys.stdout.flush()
        os._exit(9)
    summary = finalize_ingest(rt, corpus, plan.snapshot_id, changed=plan.changed)
    rt.close()
    sys.stdout.write(json.dumps(summary.as_dict()) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:6])
