"""A scripted LLM backend selectable by configuration, for tests that run ragtrail in processes
they do not control (``dag.test()`` task code, Airflow workers under a real scheduler).

``RAGTRAIL_GENERATION__LLM=scripted:tests.scripted_llm:backend`` makes every role's client answer
with :func:`tests.unit.generate.routed_backend`: valid, deterministic JSON derived from each
prompt's input, labelled by the statement kind. A TEST DOUBLE, not a model.
"""

from __future__ import annotations

from ragtrail.llm.testing import ScriptedBackend
from tests.unit.generate import label_by_kind, routed_backend

SPEC = "scripted:tests.scripted_llm:backend"
MODEL_ID = "scripted-test-v1"


def backend(model_id: str = MODEL_ID) -> ScriptedBackend:
    return routed_backend({"label": label_by_kind}, model_id=model_id)
