"""The generation LLM of the system test: a scripted TEST DOUBLE, not a model.

Airflow workers build their LLM from ``RAGTRAIL_GENERATION__LLM``, so the system test selects
this module by spec string::

    RAGTRAIL_GENERATION__LLM=scripted:tests.system.scripted_llm:generation_backend

(the repository root must be on the workers' ``PYTHONPATH``). Replies come from
:func:`tests.unit.generate.routed_backend`: valid, deterministic JSON for every generation
prompt, derived from the prompt's own input. The labeller is scripted to name the kind of
statement a question was built from (fact, summary, conclusion), so the generated set spans the
answerable labels instead of reporting every item as ``fact_single``.
"""

from __future__ import annotations

import json
from typing import Any

from ragtrail.llm.testing import ScriptedBackend
from tests.unit.generate import routed_backend

MODEL_ID = "system-test-scripted-v1"


def _label(fields: dict[str, Any]) -> str:
    """``summary`` / ``reasoning`` for questions built from the scripted derived statements."""
    question = str(fields.get("question", ""))
    if "Together," in question:
        label = "reasoning"
    elif " and " in question:
        label = "summary"
    else:
        label = "fact_single"
    return json.dumps({"label_name": label, "reason": "scripted by the system test"})


def generation_backend() -> ScriptedBackend:
    """The scripted backend named by ``scripted:tests.system.scripted_llm:generation_backend``."""
    return routed_backend({"label": _label}, model_id=MODEL_ID)
