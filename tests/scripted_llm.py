"""Scripted LLM backends selectable by configuration, for tests that run ragtrail in processes
they do not control (``dag.test()`` task code, Airflow workers under a real scheduler).

``RAGTRAIL_GENERATION__LLM=scripted:tests.scripted_llm:backend`` makes every role's client answer
with :func:`tests.unit.generate.routed_backend`: valid, deterministic JSON derived from each
prompt's input, labelled by the statement kind. On the hand-written sample set that labeller is
poor (it reads the kind back from the scripted question form), so its calibration fails and it
only advises — the path a weak local model takes.

``CALIBRATED_SPEC`` (:func:`calibrated_backend`) is the other path: a labeller that knows the
sample set's human labels and critiques that notice what the documented contrasts perturb, so
their calibrations pass and they gate. TEST DOUBLES, not models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ragtrail.judges.contrasts import PASSAGE_PREFIX
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.paths import sample_qa_set
from ragtrail.text import content_words, text_key
from tests.unit.generate import label_by_kind, routed_backend

SPEC = "scripted:tests.scripted_llm:backend"
MODEL_ID = "scripted-test-v1"
CALIBRATED_SPEC = "scripted:tests.scripted_llm:calibrated_backend"
CALIBRATED_MODEL_ID = "scripted-calibrated-v1"


def backend(model_id: str = MODEL_ID) -> ScriptedBackend:
    return routed_backend({"label": label_by_kind}, model_id=model_id)


def _golden_labels() -> dict[str, str]:
    rows = [json.loads(line) for line in sample_qa_set().read_text().splitlines() if line.strip()]
    return {text_key(row["question"]): row["label"] for row in rows}


def oracle_label(fields: dict[str, Any]) -> str:
    """The human label of a sample-set question; the statement-kind reading otherwise."""
    label = _golden_labels().get(text_key(fields["question"]))
    if label is None:
        return label_by_kind(fields)
    return json.dumps({"label_name": label, "reason": "scripted oracle"})


def _overlap(part: str, whole: str) -> float:
    words = content_words(part)
    return len(words & content_words(whole)) / len(words) if words else 0.0


def _rating(good: bool) -> str:
    return json.dumps({"rating": 5 if good else 1, "evaluation": "scripted"})


DISCERNING: dict[str, Callable[[dict[str, Any]], bool]] = {
    "stand_alone": lambda f: not f["question"].lower().startswith(PASSAGE_PREFIX.strip().lower()),
    "qa_tautology": lambda f: text_key(f["answer"]) != text_key(f["question"]),
    "q_usefulness": lambda f: len(f["question"].split()) > 3,
    "a_to_c_groundedness": lambda f: _overlap(f["answer"], f["context"]) >= 0.5,
}
"""Critiques the calibrated double rates with a rule that sees its contrast's perturbation; the
others keep the routed default (a constant 4: ties, so their calibration fails)."""


def _rated_by(rule: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], str]:
    return lambda fields: _rating(rule(fields))


def calibrated_backend(model_id: str = CALIBRATED_MODEL_ID) -> ScriptedBackend:
    critiques = {f"critique_{name}": _rated_by(rule) for name, rule in DISCERNING.items()}
    return routed_backend({"label": oracle_label, **critiques}, model_id=model_id)


def assume_calibrated(rt: Any) -> None:
    """Store a passing calibration for every generation judge of ``rt`` as configured now.

    For tests of the gating funnel itself (quotas, label mismatches, critique thresholds), which
    are not about calibration: they start from judges that have already shown they can judge.
    Calibration proper is tested in tests/integration/test_judge_calibration.py.
    """
    from ragtrail.judges.contract import JudgeRole
    from ragtrail.pipeline.judges import generation_judges
    from ragtrail.storage.judge_store import JudgeStore

    store = JudgeStore(rt.engine)
    for judge in generation_judges(rt):
        spec = judge.spec
        labeller = spec.role is JudgeRole.LABELLER
        store.record(
            spec=spec.as_dict(),
            kind="categorical" if labeller else "contrast",
            reference="test:assumed",
            n=100,
            metric="kappa" if labeller else "contrast_accuracy",
            value=1.0,
            ci_low=1.0,
            ci_high=1.0,
            metrics={"assumed_by_test": True},
        )


DEAD_SPEC = "scripted:tests.scripted_llm:dead_backend"
FLAKY_SPEC = "scripted:tests.scripted_llm:flaky_backend"
EXITING_SPEC = "scripted:tests.scripted_llm:exiting_backend"
EXIT_AFTER_ENV = "SCRIPTED_LLM_EXIT_AFTER"
"""Requests :func:`exiting_backend` answers before its process exits (no ``RAGTRAIL_`` prefix:
it is no setting)."""
DEAD_ERROR = "connection refused (scripted dead endpoint)"


def dead_backend(model_id: str = "scripted-dead-v1") -> ScriptedBackend:
    """An endpoint that is down: every request fails with an error result."""
    from ragtrail.llm.backends.base import GenerationResult

    return ScriptedBackend(lambda request, number: GenerationResult.failure(DEAD_ERROR), model_id)


def flaky_backend(model_id: str = "scripted-flaky-v1", every: int = 4) -> ScriptedBackend:
    """The routed double, except that every ``every``-th distinct request (by content, in the
    order first seen) fails every time it is sent: a quarter of the items fail, retries too."""
    from ragtrail.llm.backends.base import GenerationResult

    routed = backend(model_id)
    seen: dict[str, int] = {}

    def responder(request: Any, number: int) -> Any:
        key = json.dumps(request.messages, sort_keys=True)
        index = seen.setdefault(key, len(seen))
        if index % every == 0:
            return GenerationResult.failure("scripted flaky failure")
        return routed._reply(request, number)

    return ScriptedBackend(responder, model_id=model_id)


def exiting_backend(model_id: str = "scripted-exiting-v1") -> ScriptedBackend:
    """The routed double, until request number ``$SCRIPTED_LLM_EXIT_AFTER``: then the process
    ends at once, as a killed one does (no cleanup, no exception handler runs)."""
    import os

    routed = backend(model_id)
    limit = int(os.environ.get(EXIT_AFTER_ENV, "3"))

    def responder(request: Any, number: int) -> Any:
        if number >= limit:
            os._exit(9)
        return routed._reply(request, number)

    return ScriptedBackend(responder, model_id=model_id)


WEAK_EXTRACTOR_SPEC = "scripted:tests.scripted_llm:weak_extractor_backend"


def weak_extractor_backend(model_id: str = "scripted-weak-extractor-v1") -> ScriptedBackend:
    """An extractor that copies the wrong sentence: greedy requests get the last sentence of the
    last passage; sampled ones (temperature > 0) a sentence chosen by their seed, so self-sampling
    draws different evidence per seed. Every other prompt gets the routed default. A TEST
    DOUBLE, not a model."""
    import random
    import re

    from tests.unit.generate import input_fields, prompt_name

    routed = routed_backend(model_id=model_id)

    def responder(request: Any, number: int) -> Any:
        if prompt_name(request) != "evidence.extract":
            return routed.responder(request, number)  # type: ignore[operator]
        passages = input_fields(request).get("passages") or []
        sentences = [s for p in passages for s in re.split(r"(?<=[.!?])\s", p.strip()) if s]
        if not sentences:
            return json.dumps({"evidence": ""})
        if request.temperature > 0:
            pick = random.Random(request.seed).randrange(len(sentences))
            return json.dumps({"evidence": " ".join(sentences[pick : pick + 2])[:300]})
        return json.dumps({"evidence": sentences[-1][:300]})

    return ScriptedBackend(responder, model_id=model_id)


def as_on_an_endpoint(rt: Any, monkeypatch: Any) -> Callable[[], int]:
    """From now on ``rt`` runs its model steps as where every model is an endpoint (side by side,
    on threads), with an empty completion cache so that every call is made again; returns a
    function giving the calls made since."""
    from sqlalchemy import text

    with rt.engine.begin() as conn:
        conn.execute(text("DELETE FROM llm_cache"))
    monkeypatch.setattr(type(rt), "llm_calls_overlap", lambda self: True)
    before = rt.llm_usage.totals().calls
    return lambda: rt.llm_usage.totals().calls - before
