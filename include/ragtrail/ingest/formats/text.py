"""Plain-text parser (``.txt``, ``.text``): the whole file is one section.

A text file has no structure to recover, so after the binary and UTF-8 checks the normalised
text becomes a single section titled by its first non-empty line.
"""

from __future__ import annotations

from ragtrail.ingest.formats.common import Parsed, decode_text, first_line, normalise_text
from ragtrail.records import Section, SourceFile

__all__ = ["parse_text"]


def parse_text(src: SourceFile, max_bytes: int) -> Parsed:
    """One section; the title is the first non-empty line."""
    text = normalise_text(decode_text(src))
    return Parsed(title=first_line(text), sections=[Section(text=text)])
