"""LLMClient progress: the sink hears monotonic counts that match the requests answered, cache
hits included, retries growing the total (ScriptedBackend: a test double, not a model)."""

from __future__ import annotations

from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.cache import MemoryLLMCache
from ragtrail.llm.client import LLMClient
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.progress import ProgressUpdate
from tests.unit.llm.test_client import ITEMS, PROMPT, good_reply, item_text


def test_updates_per_backend_call_then_all_from_cache() -> None:
    heard: list[ProgressUpdate] = []
    backend = ScriptedBackend(good_reply)
    client = LLMClient(backend, MemoryLLMCache(), progress=heard.append, report_every=4)
    client.run(PROMPT, ITEMS, stage="judge")  # 6 inputs: backend calls of 4 and 2
    assert [(u.done, u.total, u.cache_hits) for u in heard] == [(4, 6, 0), (6, 6, 0)]
    assert {u.task for u in heard} == {"model calls judge"}
    assert backend.generate_calls == 2 and len(backend.calls) == 6

    heard.clear()
    client.run(PROMPT, ITEMS, stage="judge")  # a rerun: every answer from the cache
    assert [(u.done, u.total, u.cache_hits) for u in heard] == [(6, 6, 6)]
    assert backend.generate_calls == 2


def test_retries_grow_the_total_and_counts_match_the_requests() -> None:
    def first_gamma_fails(req: GenerationRequest, number: int) -> str:
        if item_text(req) == "gamma" and req.seed == 0:
            return "not json"
        return good_reply(req, number)

    heard: list[ProgressUpdate] = []
    backend = ScriptedBackend(first_gamma_fails)
    outs = LLMClient(backend, progress=heard.append, report_every=4).run(
        PROMPT, ITEMS, stage="judge"
    )
    assert all(o.ok for o in outs)
    assert [(u.done, u.total) for u in heard] == [(4, 6), (6, 6), (7, 7)]
    dones = [u.done for u in heard]
    assert dones == sorted(dones) and dones[-1] == len(backend.calls) == 7
