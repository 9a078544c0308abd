"""Generation shards: a local model's batch, or at least an HTTP endpoint's concurrency."""

from __future__ import annotations

from ragtrail.config import load_settings
from ragtrail.pipeline.generate.orchestration import shard_size_for
from ragtrail.runtime import Runtime


def test_an_endpoint_gets_shards_as_wide_as_its_concurrency(tmp_path) -> None:
    def shard(llm: str) -> int:
        generation = {"llm": llm, "llm_batch_size": 8, "llm_max_concurrency": 32}
        return shard_size_for(Runtime(load_settings(home=tmp_path, generation=generation)))

    assert shard("openai:m@http://127.0.0.1:9/v1") == 32
    assert shard("builtin:smollm2-135m-instruct") == 8
