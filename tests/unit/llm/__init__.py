"""Tests for ragtrail.llm: parsing, prompts, cache, client, and the backends."""
