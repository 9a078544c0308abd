"""Generation shards: a local model's batch, or at least an HTTP endpoint's concurrency."""

from __future__ import annotations

from ragtrail.config import load_settings
from ragtrail.pipeline.generate.orchestration import rounds_at_once, shard_size_for
from ragtrail.runtime import Runtime


def test_an_endpoint_gets_shards_as_wide_as_its_concurrency(tmp_path) -> None:
    def shard(llm: str) -> int:
        generation = {"llm": llm, "llm_batch_size": 8, "llm_max_concurrency": 32}
        return shard_size_for(Runtime(load_settings(home=tmp_path, generation=generation)))

    assert shard("openai:m@http://127.0.0.1:9/v1") == 32
    assert shard("builtin:smollm2-135m-instruct") == 8


def test_rounds_are_drafted_together_on_endpoints_and_one_by_one_on_local_models(tmp_path) -> None:
    def rounds(llm: str, **generation: int) -> int:
        settings = load_settings(home=tmp_path, generation={"llm": llm, **generation})
        return rounds_at_once(Runtime(settings))

    endpoint, local = "openai:m@http://127.0.0.1:9/v1", "builtin:smollm2-135m-instruct"
    assert rounds(endpoint, max_rounds=3) == 3
    assert rounds(local, max_rounds=3) == 1
    assert rounds(local, max_rounds=3, rounds_at_once=2) == 2
    assert rounds(endpoint, max_rounds=2, rounds_at_once=5) == 2
