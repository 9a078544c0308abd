"""ragtrail's LLM layer: backends, typed prompts, structured parsing, caching and a retrying client.

Typical use::

    backend = load_llm_backend("builtin:smollm2-135m-instruct")
    client = LLMClient(backend, SqlLLMCache(engine), usage=UsageMeter())
    outcomes = client.run(MY_PROMPT, inputs, stage="qa_generate")
    client.usage.flush(engine, run_id)

Importing this package does not import torch; the transformers backend loads it when built.
"""

from ragtrail.llm.backends.base import GenerationRequest, GenerationResult, LLMBackend
from ragtrail.llm.cache import MemoryLLMCache, SqlLLMCache, cache_key
from ragtrail.llm.client import CallOutcome, FailureCause, GenerationParams, LLMClient
from ragtrail.llm.factory import load_llm_backend, register_llm_backend
from ragtrail.llm.prompts import PROMPTS, DuplicatePromptError, Prompt, PromptRegistry
from ragtrail.llm.structured import ParseOutcome, parse_output
from ragtrail.llm.usage import Price, UsageMeter

__all__ = [
    "PROMPTS",
    "CallOutcome",
    "DuplicatePromptError",
    "FailureCause",
    "GenerationParams",
    "GenerationRequest",
    "GenerationResult",
    "LLMBackend",
    "LLMClient",
    "MemoryLLMCache",
    "ParseOutcome",
    "Price",
    "Prompt",
    "PromptRegistry",
    "SqlLLMCache",
    "UsageMeter",
    "cache_key",
    "load_llm_backend",
    "parse_output",
    "register_llm_backend",
]
