"""Turn raw model text into a validated pydantic object, repairing only what is unambiguous.

Small models wrap JSON in prose or code fences, leave trailing commas, write Python literals,
use single quotes, or get cut off by ``max_new_tokens``. :func:`parse_output` handles these:

1. find the first JSON object (inside a code fence if there is one, else after any prose); the
   scan is string-aware, so braces inside string values never end the object early;
2. if it does not parse, repair it: ``True/False/None`` -> ``true/false/null`` outside strings,
   single-quoted strings -> double-quoted when the closing quote is followed by ``: , } ]``,
   trailing commas removed, and for truncated output the open brackets closed. A value cut off
   mid-way (an unterminated string, a half-written literal or a key without a value) is dropped,
   never completed: repair does not invent content;
3. validate against the output model with pydantic's normal (lax) coercion, so ``"4"`` becomes
   ``4`` for an int field, but constraints are never clamped: 7 on a 1-5 scale is an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from ragtrail.jsonsafe import JsonObject

T = TypeVar("T", bound=BaseModel)

ErrorKind = Literal["parse_error", "validation_error"]

_FENCE_RE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_JSON_LITERALS = {"true", "false", "null"}
_MAX_CANDIDATES = 20


@dataclass
class ParseOutcome(Generic[T]):
    """Result of :func:`parse_output`. ``value`` is set iff ``ok``.

    ``repaired`` tells that the JSON had to be repaired (``repairs`` lists how); ``json_text`` is
    the candidate that was finally parsed or rejected.
    """

    ok: bool
    value: T | None
    error: str | None
    raw_text: str
    repaired: bool = False
    error_kind: ErrorKind | None = None
    repairs: list[str] = field(default_factory=list)
    json_text: str | None = None


def parse_output(text: str, model: type[T]) -> ParseOutcome[T]:
    """Extract, repair if needed, and validate one JSON object of type ``model`` from ``text``."""
    if not text or not text.strip():
        return ParseOutcome(False, None, "empty output", text, error_kind="parse_error")
    obj, candidate, repairs, error = extract_json_object(text)
    if obj is None:
        return ParseOutcome(
            False, None, error, text, bool(repairs), "parse_error", repairs, candidate
        )
    try:
        value = model.model_validate(obj)
    except ValidationError as exc:
        return ParseOutcome(
            False,
            None,
            _summarise_validation(exc),
            text,
            bool(repairs),
            "validation_error",
            repairs,
            candidate,
        )
    return ParseOutcome(True, value, None, text, bool(repairs), None, repairs, candidate)


def extract_json_object(text: str) -> tuple[JsonObject | None, str | None, list[str], str]:
    """Find the first JSON object in ``text``.

    Returns ``(object, candidate_text, repairs, error)``; ``object`` is None when nothing usable
    was found, and ``error`` then says why.
    """
    regions = [m.group(1) for m in _FENCE_RE.finditer(text) if "{" in m.group(1)] + [text]
    first_error = "no JSON object found in the output"
    fallback: str | None = None
    for region in regions:
        starts = [m.start() for m in re.finditer(r"\{", region)][:_MAX_CANDIDATES]
        # Pass 1: a candidate that is valid JSON as-is wins.
        for start in starts:
            candidate = _balanced_span(region, start)
            try:
                obj = json.loads(candidate)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj, candidate, [], ""
        # Pass 2: the first candidate that repairs into an object.
        for start in starts:
            candidate = _balanced_span(region, start)
            fallback = fallback or candidate
            repaired, repairs = repair_json(candidate)
            try:
                obj = json.loads(repaired)
            except ValueError as exc:
                if first_error.startswith("no JSON"):
                    first_error = f"invalid JSON: {exc}"
                continue
            if isinstance(obj, dict):
                return obj, repaired, repairs, ""
    return None, fallback, [], first_error


def _balanced_span(text: str, start: int) -> str:
    """Text from ``start`` (a ``{``) to its matching brace, or to the end if it never closes.

    Strings in either quote style are skipped, so braces inside values do not count.
    """
    depth = 0
    quote: str | None = None
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            continue
        if ch == '"' or (ch == "'" and _single_quote_opens(text, i)):
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return text[start:]


def _single_quote_opens(text: str, i: int) -> bool:
    """A ``'`` opens a string only where a JSON value or key may start (after ``{[,:``)."""
    j = i - 1
    while j >= 0 and text[j] in " \t\r\n":
        j -= 1
    return j >= 0 and text[j] in "{[,:"


def repair_json(candidate: str) -> tuple[str, list[str]]:
    """Apply the safe repairs described in the module docstring. Returns (text, repairs)."""
    out: list[str] = []
    repairs: list[str] = []
    stack: list[str] = []
    # For each open container: is the next string a key?  Tracked so a dangling key is droppable.
    i, n = 0, len(candidate)
    truncated_string_at: int | None = None
    while i < n:
        ch = candidate[i]
        if ch == '"':
            end = _string_end(candidate, i, '"')
            if end is None:
                truncated_string_at = len(out)
                out.append(candidate[i:])
                break
            out.append(candidate[i : end + 1])
            i = end + 1
            continue
        if ch == "'" and _single_quote_opens(candidate, i):
            end = _string_end(candidate, i, "'")
            if end is not None and _followed_by_structure(candidate, end + 1):
                inner = candidate[i + 1 : end].replace("\\'", "'")
                out.append(json.dumps(_unescape_simple(inner), ensure_ascii=False))
                repairs.append("single_quotes")
                i = end + 1
                continue
            if end is None:
                truncated_string_at = len(out)
                out.append(candidate[i:])
                break
            out.append(ch)  # ambiguous: leave it, json.loads will report the problem
            i += 1
            continue
        if ch.isalpha() or ch == "_":
            j = i
            while j < n and (candidate[j].isalnum() or candidate[j] == "_"):
                j += 1
            word = candidate[i:j]
            if word in _PY_LITERALS:
                out.append(_PY_LITERALS[word])
                repairs.append("python_literals")
            else:
                out.append(word)
            i = j
            continue
        if ch == ",":
            j = i + 1
            while j < n and candidate[j] in " \t\r\n":
                j += 1
            if j < n and candidate[j] in "}]":
                repairs.append("trailing_comma")
                i = j
                continue
            out.append(ch)
            i += 1
            continue
        if ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
        out.append(ch)
        i += 1

    if truncated_string_at is None and not stack:
        return "".join(out), sorted(set(repairs))

    # Truncated output: drop any unfinished trailing value, then close what is open.
    if truncated_string_at is not None:
        del out[truncated_string_at:]
        repairs.append("dropped_truncated_value")
    text = "".join(out)
    text, dropped = _drop_dangling_tail(text)
    if dropped:
        repairs.append("dropped_truncated_value")
    closing = _open_containers(text)
    if closing:
        repairs.append("closed_truncated")
        text += "".join("}" if c == "{" else "]" for c in reversed(closing))
    return text, sorted(set(repairs))


def _string_end(text: str, start: int, quote: str) -> int | None:
    escaped = False
    for k in range(start + 1, len(text)):
        c = text[k]
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == quote:
            return k
    return None


def _followed_by_structure(text: str, k: int) -> bool:
    while k < len(text) and text[k] in " \t\r\n":
        k += 1
    return k >= len(text) or text[k] in ":,}]"


def _unescape_simple(s: str) -> str:
    """Undo backslash escapes in a single-quoted string body (best effort, via JSON rules)."""
    try:
        return str(json.loads('"' + s.replace('"', '\\"') + '"'))
    except ValueError:
        return s


_LITERAL_PREFIXES = sorted(
    {w[:k] for w in ("true", "false", "null", "True", "False", "None") for k in range(1, len(w))},
    key=len,
    reverse=True,
)
_HALF_VALUE_RE = re.compile(
    r"(?<=[:\[,])\s*(?:" + "|".join(_LITERAL_PREFIXES) + r"|-?\d+\.|-?\d+(?:\.\d+)?[eE][-+]?|-)$"
)
_KEY_COLON_RE = re.compile(r'"(?:[^"\\]|\\.)*"\s*:$')


def _drop_dangling_tail(text: str) -> tuple[str, bool]:
    """Strip the unfinished piece at the end of truncated JSON, in one fixed sequence.

    Only what truncation leaves behind is removed: a half-written literal or number, a key whose
    value never came (with or without its colon), then one separator. Anything else (``,,``, a
    stray word) is left for ``json.loads`` to reject.
    """
    original = text
    text = text.rstrip()
    if m := _HALF_VALUE_RE.search(text):
        text = text[: m.start()].rstrip()
    if m := _KEY_COLON_RE.search(text):
        text = text[: m.start()].rstrip()
    elif _ends_with_key(text):
        text = re.sub(r'"(?:[^"\\]|\\.)*"$', "", text).rstrip()
    if text.endswith(","):
        text = text[:-1].rstrip()
    return text, text != original.rstrip()


def _ends_with_key(text: str) -> bool:
    """True if the text ends with a complete string that is an object key (no colon yet)."""
    m = re.search(r'"(?:[^"\\]|\\.)*"$', text)
    if m is None:
        return False
    before = text[: m.start()].rstrip()
    if not before or before[-1] not in "{,":
        return False
    stack = _open_containers(before)
    return bool(stack) and stack[-1] == "{"


def _open_containers(text: str) -> list[str]:
    stack: list[str] = []
    quote = False
    escaped = False
    for c in text:
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                quote = False
            continue
        if c == '"':
            quote = True
        elif c in "{[":
            stack.append(c)
        elif c in "}]" and stack:
            stack.pop()
    return stack


def _summarise_validation(exc: ValidationError, limit: int = 5) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "<root>"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = len(exc.errors()) - limit
    if more > 0:
        parts.append(f"... and {more} more")
    return "validation failed: " + "; ".join(parts)
