"""Markdown parser (``.md``, ``.markdown``): headings become heading paths, tables sections.

The parser is line-based and deliberately small rather than a full CommonMark implementation:
it recognises YAML front matter (kept as metadata), ATX and setext headings, fenced code blocks
(whose ``#`` lines are code, not headings) and pipe tables, which is what retrieval needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from ragtrail.ingest.formats.common import Parsed, SectionBuilder, decode_text, render_table
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import SourceFile

__all__ = ["parse_markdown"]

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_TABLE_LINE = re.compile(r"^ {0,3}\|")
_TABLE_ALIGN_ROW = re.compile(r"^\s*\|?(\s*:?-+:?\s*\|)*\s*:?-+:?\s*\|?\s*$")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_LIST_OR_QUOTE = re.compile(r"^ {0,3}(?:[-*+>]|\d+[.)])(?:\s|$)")


def parse_markdown(src: SourceFile, max_bytes: int) -> Parsed:
    """Front matter -> metadata; ATX/setext headings -> heading paths; pipe tables -> sections."""
    text = decode_text(src)
    metadata, body = _split_front_matter(text)
    builder = SectionBuilder()
    first_h1: str | None = None
    for kind, level, payload in _markdown_blocks(body):
        if kind == "heading":
            builder.heading(level, payload)
            if level == 1 and first_h1 is None and payload.strip():
                first_h1 = payload
        elif kind == "table":
            builder.add_table(payload)
        else:
            builder.add_text(payload)
    fm_title = metadata.get("title")
    title = str(fm_title).strip() if fm_title not in (None, "") else first_h1
    return Parsed(title=title, sections=builder.build(), metadata=metadata)


def _split_front_matter(text: str) -> tuple[JsonObject, str]:
    """(metadata, body). Malformed YAML front matter is dropped and reported in the metadata
    rather than quarantining a perfectly readable document."""
    import frontmatter

    if not text.startswith("---"):
        return {}, text
    try:
        post = frontmatter.loads(text)
    except Exception as exc:
        body = _FRONT_MATTER.sub("", text, count=1)
        return {"front_matter_error": f"{type(exc).__name__}: {exc}".splitlines()[0]}, body
    metadata = dict(post.metadata) if isinstance(post.metadata, Mapping) else {}
    return metadata, post.content


def _markdown_blocks(body: str) -> Iterator[tuple[str, int, str]]:
    """Yield ("heading", level, text), ("table", 0, rendered) and ("text", 0, block) in order.

    Lines inside fenced code blocks are always text, so ``# comment`` in a shell snippet is not a
    heading. Setext headings (a single line underlined with === or ---) are recognised too.
    """
    fence: str | None = None
    para: list[str] = []
    table: list[str] = []

    def flush_table() -> Iterator[tuple[str, int, str]]:
        if table:
            rows = [_split_cells(line) for line in table if not _TABLE_ALIGN_ROW.match(line)]
            yield ("table", 0, render_table(rows))
            table.clear()

    def flush_para() -> Iterator[tuple[str, int, str]]:
        if para:
            yield ("text", 0, "\n".join(para))
            para.clear()

    for line in body.split("\n"):
        if fence is not None:
            para.append(line)
            stripped = line.strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            continue
        if table and not _TABLE_LINE.match(line):
            yield from flush_table()
        if opened := _FENCE.match(line):
            fence = opened.group(1)
            para.append(line)
        elif _TABLE_LINE.match(line):
            yield from flush_para()
            table.append(line)
        elif atx := _ATX.match(line):
            yield from flush_para()
            yield ("heading", len(atx.group(1)), atx.group(2) or "")
        elif (
            (setext := _SETEXT.match(line))
            and len(para) == 1  # a one-line paragraph (blank lines flush, fences are 2+ lines)
            and not _LIST_OR_QUOTE.match(para[0])
        ):
            title = para.pop()
            yield from flush_para()
            yield ("heading", 1 if setext.group(1)[0] == "=" else 2, title)
        elif not line.strip():
            yield from flush_para()
        else:
            para.append(line)
    yield from flush_table()
    yield from flush_para()


def _split_cells(line: str) -> list[str]:
    """Cells of a Markdown pipe-table row (outer pipes optional, ``\\|`` is a literal pipe)."""
    line = line.strip()
    line = line.removeprefix("|")
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(line)]
