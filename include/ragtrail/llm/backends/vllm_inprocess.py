"""Optional in-process vLLM backend (CUDA machines only).

``vllm`` is imported inside the constructor, so importing this module costs nothing and works
without vLLM; constructing the backend without it raises an ImportError that says how to install
it. Guided JSON uses vLLM's structured-output sampling parameters (``structured_outputs`` in recent
releases, ``guided_decoding`` in older ones).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from ragtrail.llm.backends.base import GenerationRequest, GenerationResult

INSTALL_HINT = "pip install ragtrail[vllm] (CUDA only)"


class VLLMBackend:
    """Batched generation with ``vllm.LLM.chat``. Extra keyword arguments go to ``vllm.LLM``."""

    name = "vllm"
    supports_json_schema = True

    def __init__(self, model: str, *, seed: int = 0, **engine_kwargs: Any) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(
                f"the in-process vLLM backend needs the 'vllm' package: {INSTALL_HINT}"
            ) from exc
        self._vllm = vllm
        self.model_id = model
        self._llm = vllm.LLM(model=model, seed=seed, **engine_kwargs)

    def _sampling_params(self, req: GenerationRequest) -> Any:
        kwargs: dict[str, Any] = {
            "max_tokens": req.max_new_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "top_k": req.top_k or -1,  # vLLM: -1 = every token
            "seed": req.effective_seed(),
            "stop": list(req.stop) or None,
        }
        if req.json_schema is not None:
            sp_module = importlib.import_module("vllm.sampling_params")
            if hasattr(sp_module, "StructuredOutputsParams"):
                kwargs["structured_outputs"] = sp_module.StructuredOutputsParams(
                    json=req.json_schema
                )
            elif hasattr(sp_module, "GuidedDecodingParams"):
                kwargs["guided_decoding"] = sp_module.GuidedDecodingParams(json=req.json_schema)
        return self._vllm.SamplingParams(**kwargs)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if not requests:
            return []
        try:
            outputs = self._llm.chat(
                [list(r.messages) for r in requests],
                sampling_params=[self._sampling_params(r) for r in requests],
                use_tqdm=False,
            )
        except Exception as exc:  # one bad request must not hide the others: retry one by one
            if len(requests) == 1:
                return [GenerationResult.failure(f"vllm generation failed: {exc}")]
            return [res for r in requests for res in self.generate([r])]
        results = []
        for out in outputs:
            best = out.outputs[0]
            results.append(
                GenerationResult(
                    text=best.text,
                    prompt_tokens=len(out.prompt_token_ids or []),
                    completion_tokens=len(best.token_ids or []),
                    finish_reason=str(best.finish_reason or "stop"),
                )
            )
        return results
