"""top_k sampling: the request field, its cache-key material, and the local sampler's cut."""

from __future__ import annotations

import pytest
import torch

from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.transformers_local import _PerRowSampler

MESSAGES = ({"role": "user", "content": "hi"},)


def test_top_k_is_in_the_params_only_when_set() -> None:
    assert "top_k" not in GenerationRequest(MESSAGES).generation_params()
    assert GenerationRequest(MESSAGES, top_k=80).generation_params()["top_k"] == 80
    with pytest.raises(ValueError, match="top_k"):
        GenerationRequest(MESSAGES, top_k=-1)


def test_top_k_one_samples_the_argmax_and_top_k_two_only_the_best_two() -> None:
    scores = torch.tensor([[0.0, 3.0, 2.9, -1.0, 2.8]])
    ids = torch.zeros((1, 1), dtype=torch.long)
    for seed in range(20):
        one = _PerRowSampler([5.0], [1.0], [seed], [1])(ids, scores)
        assert int(one[0].argmax()) == 1
    chosen = {
        int(_PerRowSampler([5.0], [1.0], [seed], [2])(ids, scores)[0].argmax())
        for seed in range(40)
    }
    assert chosen == {1, 2}  # a high temperature spreads the mass, the cut keeps two
