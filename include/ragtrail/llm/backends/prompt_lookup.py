"""Draft tokens for greedy decoding, looked up in the request's own prompt and output.

Much of what the night's small model writes is already in its prompt: the evidence extractor and
the statement extractor copy sentences of their passages, citations repeat passage numbers, and
JSON replies repeat their keys and separators. After a row's last few tokens, the tokens that
followed the same few tokens the last time they occurred are a cheap guess of what comes next
("prompt lookup decoding"). A decoding step can then run a row's next token together with such a
draft: the model's choice at each position either confirms the next draft token or replaces it,
so greedy output is what one-token steps would give (up to rounding), in fewer steps.

On the sample night's greedy replies (25,236 tokens), drafts of up to 3 tokens after a 3- or
2-token match took 0.64 row-steps per token, with 2.1 tokens computed per row-step
(BENCHMARKS.md, "Prompt-lookup drafts").
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_DRAFT_TOKENS = 3
"""Draft tokens a row may add to a step (0: one token per step, no drafts)."""

MATCH_LENGTHS = (3, 2)
"""Lengths of the tail matched against earlier tokens, longest first."""


class DraftIndex:
    """The tokens of one request (prompt, then output as it grows) indexed by their n-grams, so a
    draft costs a dictionary lookup per match length rather than a scan of the prompt.

    Each n-gram maps to the start of its most recent occurrence that some token follows."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens: list[int] = []
        self._starts: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens``; each n-gram that now has a follower is (re)indexed."""
        for token in tokens:
            end = len(self.tokens)  # the n-grams ending just before the new token
            for n in MATCH_LENGTHS:
                if end >= n:
                    self._starts[tuple(self.tokens[end - n : end])] = end - n
            self.tokens.append(token)

    def draft(self, limit: int) -> list[int]:
        """Up to ``limit`` tokens that followed the latest earlier occurrence of the longest
        matching tail (none when no tail recurs)."""
        if limit <= 0:
            return []
        for n in MATCH_LENGTHS:
            if len(self.tokens) > n:
                start = self._starts.get(tuple(self.tokens[-n:]))
                if start is not None:
                    return self.tokens[start + n : start + n + limit]
        return []
