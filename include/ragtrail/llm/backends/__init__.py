"""LLM backends. Only the protocol is imported here; concrete backends load torch, httpx or vLLM
on demand (import them from their modules, or go through :func:`ragtrail.llm.factory.load_llm_backend`).
"""

from ragtrail.llm.backends.base import (
    GenerationRequest,
    GenerationResult,
    LLMBackend,
    Message,
)

__all__ = ["GenerationRequest", "GenerationResult", "LLMBackend", "Message"]
