"""HTML parser (``.html``, ``.htm``): the text a browser shows, with its heading outline.

Page furniture (navigation, headers, footers, scripts, hidden elements) is dropped, ``h1``-``h6``
build heading paths and each data table becomes its own section. The charset is taken from a
BOM or a ``<meta>`` declaration, else the bytes must be UTF-8. BeautifulSoup and lxml are
imported on first use so that loading the package stays cheap.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

from ragtrail.ingest.formats.common import (
    Parsed,
    QuarantineError,
    SectionBuilder,
    check_binary,
    decode_utf8,
    render_table,
)
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import QuarantineReason, SourceFile

__all__ = ["parse_html"]

_HTML_DROP = frozenset(
    {
        "script",
        "style",
        "nav",
        "header",
        "footer",
        "aside",
        "noscript",
        "form",
        "template",
        "iframe",
        "svg",
        "button",
        "select",
        "head",
        "title",
    }
)
_HTML_DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
_HTML_BLOCKS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "blockquote",
        "pre",
        "li",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "figure",
        "figcaption",
        "address",
        "details",
        "summary",
        "hr",
        "br",
        "caption",
        "center",
    }
)
_HTML_DOCUMENT_PARTS = frozenset({"html", "body"})
"""Elements a malformed page may repeat; their contents render as one body, in document order."""
_HTML_TEXT_BREAKS = _HTML_BLOCKS | _HTML_DOCUMENT_PARTS | {"table", "tr", "td", "th"}
"""Elements whose start and end end the current paragraph."""
_HEADING_TAGS = {f"h{n}": n for n in range(1, 7)}
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


def _decode_html(data: bytes) -> str:
    """Decode HTML bytes: BOM first, else a declared ``<meta charset>``, else strict UTF-8."""
    check_binary(data)
    if data.startswith(codecs.BOM_UTF8):
        return decode_utf8(data)
    declared = _META_CHARSET.search(data[:4096])
    if declared:
        name = declared.group(1).decode("ascii", "replace")
        try:
            codec = codecs.lookup(name).name
        except LookupError:
            codec = None
        if codec and codec != "utf-8":
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                raise QuarantineError(
                    QuarantineReason.INVALID_UTF8,
                    f"not valid {name} (declared charset) at offset {exc.start}",
                ) from None
    return decode_utf8(data)


def parse_html(src: SourceFile, max_bytes: int) -> Parsed:
    """Boilerplate dropped; h1–h6 build heading paths; each data table becomes its own section.

    The text indexed is what a browser renders. HTML5 parsing puts everything outside the page's
    ``<body>`` into that body — content before ``<html>``, a second ``<body>``, text after
    ``</html>`` — so the whole document is walked in order, not only the first ``<body>`` (which
    lxml, unlike a browser, closes early); ``<head>`` and ``<title>`` are not rendered and are
    dropped wherever they stand.
    """
    from bs4 import BeautifulSoup, Comment

    text = _decode_html(src.data)
    soup = BeautifulSoup(text, "lxml")
    title_tag = soup.find("title")
    title = title_tag.get_text(" ", strip=True) if title_tag else ""
    if not title and (h1 := soup.find("h1")):
        title = h1.get_text(" ", strip=True)
    for comment in soup.find_all(string=lambda s: isinstance(s, Comment)):
        comment.extract()
    builder = SectionBuilder()
    _walk_html(soup, builder)
    meta: JsonObject = {}
    if soup.html is not None and soup.html.get("lang"):
        meta["language"] = soup.html.get("lang")
    return Parsed(title=title or None, sections=builder.build(), metadata=meta)


def _is_dropped(tag: Any) -> bool:
    """Boilerplate or invisible element whose text must not reach the index."""
    if tag.name in _HTML_DROP:
        return True
    attrs = tag.attrs or {}
    if "hidden" in attrs or str(attrs.get("aria-hidden", "")).lower() == "true":
        return True
    return str(attrs.get("role", "")).lower() in _HTML_DROP_ROLES


def _walk_html(root: Any, builder: SectionBuilder) -> None:
    """Iterative document-order walk (no recursion: hostile nesting cannot blow the stack).

    Inline text accumulates into a paragraph buffer that is flushed at block boundaries; ``<pre>``
    keeps its line breaks, everything else has whitespace collapsed.
    """
    from bs4 import NavigableString, Tag
    from bs4.element import PreformattedString

    buffer: list[str] = []
    pre_depth = 0

    def flush() -> None:
        block = "".join(buffer)
        buffer.clear()
        if block.strip() not in ("", "-"):  # "-" alone is an empty list item
            builder.add_text(block if pre_depth else " ".join(block.split()))

    # Stack items: a node to visit, or a marker string "/pre" / "/block" closing an element.
    stack: list[Any] = list(reversed(list(root.children)))
    while stack:
        node = stack.pop()
        if isinstance(node, str) and not isinstance(node, NavigableString):
            flush()
            if node == "/pre":
                pre_depth -= 1
            continue
        if isinstance(node, PreformattedString):  # comments, doctype, processing instructions
            continue
        if isinstance(node, NavigableString):
            buffer.append(str(node))
            continue
        if not isinstance(node, Tag) or _is_dropped(node):
            continue
        name = node.name
        if name in _HEADING_TAGS:
            flush()
            builder.heading(_HEADING_TAGS[name], node.get_text(" ", strip=True))
            continue
        if name == "table" and not _is_layout_table(node):
            flush()
            builder.add_table(render_table(_html_table_rows(node)))
            continue
        if name == "br":
            buffer.append("\n" if pre_depth else " ")
            flush()
            continue
        if name == "li":
            flush()
            buffer.append("- ")
        if name in _HTML_TEXT_BREAKS:
            flush()
            if name == "pre":
                pre_depth += 1
            stack.append("/pre" if name == "pre" else "/block")
        stack.extend(reversed(list(node.children)))
    flush()


def _own_rows(table: Any) -> list[Any]:
    """``<tr>`` elements of this table, not of tables nested inside its cells."""
    return [tr for tr in table.find_all("tr") if tr.find_parent("table") is table]


def _is_layout_table(table: Any) -> bool:
    """A table with at most one cell per row is page layout, not data: walk it as normal text."""
    rows = _own_rows(table)
    return all(len(tr.find_all(["td", "th"], recursive=False)) <= 1 for tr in rows)


def _html_table_rows(table: Any) -> list[list[str]]:
    """Cell texts per row (nested tables flattened into their cell's text)."""
    return [
        [cell.get_text(" ", strip=True) for cell in tr.find_all(["td", "th"], recursive=False)]
        for tr in _own_rows(table)
    ]
