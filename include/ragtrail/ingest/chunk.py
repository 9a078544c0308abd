"""Token-window chunker: split parsed sections into retrievable chunks sized for the embedder.

Sizes are measured in the embedding model's own tokens (without special tokens), so a chunk of
``max_tokens`` never gets silently truncated by the embedder. Each section is tokenised once with
character offsets; windows are cut on token boundaries and sliced from the section text, so every
text chunk is an exact substring of its section. Cuts prefer paragraph, line and sentence breaks
in the last 30% of a window, and consecutive windows of one section overlap by ``overlap_tokens``.

A chunk never spans two sections (hence never two headings). Tables stay whole up to
``max_table_tokens``; larger tables are split by rows with the header row repeated in each piece.
Chunk ids are ``f"{doc_id}#{ordinal:04d}"``: deterministic, so unchanged text keeps its ids.

Every chunk is also bounded in characters (``ChunkingSettings.char_limit``). Token budgets alone
do not bound length: a tokenizer maps one overlong "word" (base64, minified JSON, a data dump) to
a single unknown token, which once made a 19 MB chunk. Such a token is cut into pieces of at most
the bound before windowing, and a window ends where either budget runs out. Ordinary text never
comes near the bound, so its chunks (and their ids) are the same as with tokens alone.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ragtrail.config import ChunkingSettings
from ragtrail.records import Chunk, ParsedDocument, Section

__all__ = ["HFTokenCounter", "Tokenizer", "as_token_counter", "chunk_document", "chunk_id"]

CUT_SEARCH_FRACTION = 0.3
"""Look for a natural break only in the last 30% of a window, so chunks stay near full size."""
_SENTENCE_END = frozenset({".", "!", "?", "…", "。", "！", "？"})


@runtime_checkable
class Tokenizer(Protocol):
    """What the chunker needs from a tokenizer; counts exclude special tokens."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        ...

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character span in ``text`` of every token, in order."""
        ...

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        ...

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """Token counts of several texts in one (parallel) call."""
        ...


class HFTokenCounter:
    """:class:`Tokenizer` over a Hugging Face *fast* tokenizer (or a ``tokenizers.Tokenizer``).

    Works on a private copy of the Rust backend with truncation and padding switched off: the
    model's ``tokenizer.json`` may enable them (MiniLM pads/truncates to 128), which would make
    counts wrong, and the copy leaves the caller's tokenizer untouched.
    """

    def __init__(self, tokenizer: Any) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        if not isinstance(backend, RustTokenizer):
            raise TypeError(
                f"{type(tokenizer).__name__} is not a fast tokenizer; offsets need the Rust backend"
            )
        self._tok = RustTokenizer.from_str(backend.to_str())
        self._tok.no_truncation()
        self._tok.no_padding()

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return list(self._tok.encode(text, add_special_tokens=False).offsets)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]


_COUNTERS: weakref.WeakKeyDictionary[Any, HFTokenCounter] = weakref.WeakKeyDictionary()


def as_token_counter(tokenizer: Any) -> Tokenizer:
    """A :class:`Tokenizer` for ``tokenizer``: returned as is if it already is one, otherwise a
    cached :class:`HFTokenCounter` wrapping it (so per-document calls do not rebuild the copy)."""
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    try:
        counter = _COUNTERS.get(tokenizer)
    except TypeError:  # not weak-referenceable: no caching
        return HFTokenCounter(tokenizer)
    if counter is None:
        counter = HFTokenCounter(tokenizer)
        _COUNTERS[tokenizer] = counter
    return counter


def chunk_id(doc_id: str, ordinal: int) -> str:
    """Stable chunk id: the document id plus the chunk's position in the document."""
    return f"{doc_id}#{ordinal:04d}"


def chunk_document(
    doc: ParsedDocument, tokenizer: Any, settings: ChunkingSettings, language: str = "und"
) -> list[Chunk]:
    """Split ``doc`` into chunks, section by section, in document order; each chunk carries the
    document's ``language`` (ISO 639-1), which picks its lexical analysis in the index.

    ``tokenizer`` is a :class:`Tokenizer` or a Hugging Face fast tokenizer (wrapped once, cached).
    Text chunks have at most ``settings.max_tokens`` tokens; a table within
    ``settings.max_table_tokens`` is one chunk, a larger one is split into pieces of at most
    ``max_tokens`` that each start with the header row. No chunk is longer than
    ``settings.char_limit`` characters.
    """
    counter = as_token_counter(tokenizer)
    chunker = _SectionChunker(counter, settings)
    chunks: list[Chunk] = []
    for section in doc.sections:
        headings = section.headings or ((doc.title,) if doc.title else ())
        for text, n_tokens in chunker.split(section):
            ordinal = len(chunks)
            chunks.append(
                Chunk(
                    chunk_id=chunk_id(doc.doc_id, ordinal),
                    doc_id=doc.doc_id,
                    ordinal=ordinal,
                    text=text,
                    headings=headings,
                    n_tokens=n_tokens,
                    kind=section.kind,
                    language=language,
                )
            )
    return chunks


@dataclass
class _SectionChunker:
    """Windowing logic for one tokenizer and one set of settings."""

    counter: Tokenizer
    settings: ChunkingSettings

    @property
    def max_tokens(self) -> int:
        return self.settings.max_tokens

    @property
    def overlap(self) -> int:
        """Overlap, capped at half a window so every step makes real progress."""
        return min(self.settings.overlap_tokens, self.settings.max_tokens // 2)

    @property
    def max_chars(self) -> int:
        return self.settings.char_limit

    def split(self, section: Section) -> list[tuple[str, int]]:
        """(chunk text, token count) pairs for one section."""
        if section.kind == "table":
            return self._split_table(section.text)
        return self._windows(section.text, self.max_tokens, self.overlap, self.max_chars)

    # -- text ---------------------------------------------------------------------------------

    def _windows(
        self, text: str, budget: int, overlap: int, max_chars: int
    ) -> list[tuple[str, int]]:
        """Overlapping windows of at most ``budget`` tokens and ``max_chars`` characters, each an
        exact substring of ``text``."""
        offsets = _split_long_tokens(self.counter.offsets(text), max_chars)
        n = len(offsets)
        if n == 0:
            return []
        if n <= budget and offsets[-1][1] - offsets[0][0] <= max_chars:
            piece = text[offsets[0][0] : offsets[-1][1]]
            return [(piece, self.counter.count(piece))]
        ends = [end for _, end in offsets]
        spans: list[tuple[int, int]] = []
        start = 0
        while True:
            end = min(start + budget, n)
            # Tokens fitting the character bound; at least one, as no token is longer than it.
            fitting = bisect_right(ends, offsets[start][0] + max_chars, start, end)
            char_bound = fitting < end
            end = fitting
            if end < n:
                end = _choose_cut(text, offsets, start, end, end - start)
            spans.append((start, end))
            if end >= n:
                break
            # A window cut by the character bound may hold few tokens: overlap half of it at most.
            step_back = min(overlap, (end - start) // 2) if char_bound else overlap
            start = _word_start_at_or_after(text, offsets, max(end - step_back, start + 1), end)
        return self._finalise(text, offsets, spans, budget)

    def _finalise(
        self,
        text: str,
        offsets: list[tuple[int, int]],
        spans: list[tuple[int, int]],
        budget: int,
    ) -> list[tuple[str, int]]:
        """Slice the spans and count their tokens exactly (one batched call).

        A span cut inside a word can re-tokenise into more tokens than it had in context; such a
        (rare) span is shrunk until it fits, so the budget is a hard guarantee.
        """
        pieces = [text[offsets[s][0] : offsets[e - 1][1]] for s, e in spans]
        counts = self.counter.count_batch(pieces)
        out = []
        for (s, e), piece, count in zip(spans, pieces, counts, strict=True):
            while count > budget and e - s > 1:
                e -= max(1, count - budget)
                piece = text[offsets[s][0] : offsets[e - 1][1]]
                count = self.counter.count(piece)
            out.append((piece, count))
        return out

    # -- tables -------------------------------------------------------------------------------

    def _split_table(self, text: str) -> list[tuple[str, int]]:
        """Whole table if it fits ``max_table_tokens`` and the character bound; else row groups
        under a repeated header."""
        rows = [row for row in text.split("\n") if row.strip()]
        counts = self.counter.count_batch(rows)
        total = sum(counts)  # newlines add no tokens, so this is the count of the whole table
        if not total:
            return []
        if total <= self.settings.max_table_tokens and len(text) <= self.max_chars:
            return [(text, self.counter.count(text))]
        header, header_n = (rows[0], counts[0]) if len(rows) > 1 else (None, 0)
        # A huge header would crowd out the data rows.
        if header is not None and (
            header_n > self.max_tokens // 2 or len(header) > self.max_chars // 2
        ):
            header, header_n = None, 0
        skip = 1 if header else 0
        body = list(zip(rows[skip:], counts[skip:], strict=True))
        budget = self.max_tokens - header_n
        char_budget = self.max_chars - (len(header) + 1 if header else 0)
        pieces: list[tuple[str, int]] = []
        group: list[str] = []
        group_n = group_chars = 0

        def emit(lines: list[str], n_tokens: int) -> None:
            pieces.append(("\n".join([header, *lines]) if header else "\n".join(lines), n_tokens))

        for row, n_row in body:
            if group and (group_n + n_row > budget or group_chars + 1 + len(row) > char_budget):
                emit(group, header_n + group_n)
                group, group_n, group_chars = [], 0, 0
            if n_row > budget or len(row) > char_budget:
                # One oversized row: window it like text, header on every piece.
                for piece, n_piece in self._windows(row, budget, 0, char_budget):
                    emit([piece], header_n + n_piece)
                continue
            group_chars += len(row) + (1 if group else 0)
            group.append(row)
            group_n += n_row
        if group:
            emit(group, header_n + group_n)
        return pieces


def _split_long_tokens(offsets: list[tuple[int, int]], max_chars: int) -> list[tuple[int, int]]:
    """``offsets`` with every token longer than ``max_chars`` cut into consecutive pieces of at
    most ``max_chars`` characters (the list itself when no token is that long)."""
    if all(end - start <= max_chars for start, end in offsets):
        return offsets
    out: list[tuple[int, int]] = []
    for start, end in offsets:
        while end - start > max_chars:
            out.append((start, start + max_chars))
            start += max_chars
        out.append((start, end))
    return out


def _gap(text: str, offsets: list[tuple[int, int]], k: int) -> str:
    """Characters between token k-1 and token k (whitespace, or "" inside a word)."""
    return text[offsets[k - 1][1] : offsets[k][0]]


def _break_strength(text: str, offsets: list[tuple[int, int]], k: int) -> int:
    """How good a cut before token k is: 4 paragraph, 3 line, 2 sentence end, 1 word, 0 none."""
    gap = _gap(text, offsets, k)
    if "\n\n" in gap:
        return 4
    if "\n" in gap:
        return 3
    if not gap:
        return 0
    previous = text[offsets[k - 1][0] : offsets[k - 1][1]]
    return 2 if previous in _SENTENCE_END else 1


def _choose_cut(
    text: str, offsets: list[tuple[int, int]], start: int, end: int, budget: int
) -> int:
    """End (exclusive token index) of the window starting at ``start`` with hard limit ``end``.

    Takes the strongest break in the last 30% of the window (latest one on ties); failing that,
    the last word boundary anywhere in the window; failing that, a hard cut at ``end``.
    """
    floor = max(start + 1, end - max(1, int(budget * CUT_SEARCH_FRACTION)))
    best_k, best_strength = end, 0
    for k in range(end, floor - 1, -1):
        strength = _break_strength(text, offsets, k)
        if strength > best_strength:
            best_k, best_strength = k, strength
            if strength == 4:
                break
    if best_strength:
        return best_k
    for k in range(floor - 1, start, -1):
        if _gap(text, offsets, k):
            return k
    return end


def _word_start_at_or_after(text: str, offsets: list[tuple[int, int]], k: int, limit: int) -> int:
    """First token index in [k, limit) that starts a word, so an overlap never begins mid-word;
    ``k`` itself when there is none (a single enormous word)."""
    for i in range(k, limit):
        if _gap(text, offsets, i):
            return i
    return k
