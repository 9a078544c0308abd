"""Credentials inside URLs, hidden before anything is recorded, logged or printed.

A model spec such as ``openai:model@http://user:password@host/v1``, a database URL such as
``postgresql+psycopg://user:password@host/db``, an S3 or Elasticsearch endpoint, or a URL with an
``api_key=`` parameter carries a secret in its text. The real value has to reach the backend that
connects with it, but no stored row, document, report, log line, error message or JSON output may
hold it. :func:`redact` rewrites every URL in a text:

- its userinfo (``user:password@`` or a bare ``token@``) becomes ``***@``: the user name goes too,
  since it is sometimes the token itself;
- the value of each credential-looking parameter of its query or fragment (a name that is, or ends
  in, ``key``, ``token``, ``secret``, ``password``, ``signature``, ``credential``, ... such as
  ``api_key``, ``access_token``, ``X-Amz-Signature``) becomes ``***``.

Everything else stays as written: a URL without credentials, an ``s3://bucket/key`` URI, a path, a
spec without a URL. When a URL is ambiguous redaction hides a little too much rather than too
little (an ``@`` in the path of a URL whose host has a port reads as userinfo). A redacted text
cannot connect to anything: :func:`is_redacted` tells a recorded spec from a real one, so the code
that loads a model refuses one that was read back from a record.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
"""What stands in place of a hidden userinfo or parameter value."""

_URL = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]*://)([^\s\"'<>`]*)")
"""A scheme and the rest of the URL up to whitespace, a quote or an angle bracket."""

_USERINFO = re.compile(
    # everything up to the last "@" before the path, query or fragment (an "@" in a password)...
    r"[^/?#]*@"
    # ...or "user:password@" with a "/" in the unencoded password, as SQLAlchemy reads it
    r"|[^/?#:@]*:[^@?#]*@"
)

_SECRET_WORDS = ("key", "sig", "pwd", "auth", "authorization")
"""Short words: a parameter name that is one of them or ends in ``_word``, ``-word``, ``.word``."""
_SECRET_SUFFIXES = (
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "signature",
    "credential",
    "credentials",
)
"""Longer words: a parameter name that ends in one of them (``sslpassword``, ``accesstoken``)."""
_PARAM = re.compile(
    r"([?&;#])("
    r"(?:[A-Za-z0-9._~%-]*[._-])?(?:" + "|".join(_SECRET_WORDS) + r")"
    r"|[A-Za-z0-9._~%-]*(?:" + "|".join(_SECRET_SUFFIXES) + r")"
    r")=([^&;#]*)",
    re.IGNORECASE,
)
"""A credential-looking parameter and its value (to the next parameter or the end of the URL:
punctuation after a URL in a sentence goes with it rather than risk keeping part of a secret)."""

_REDACTED_MARKS = re.compile(r"://\*\*\*@|[?&;#][^=&;#\s]*=\*\*\*(?:[&;#\s]|$)")


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***`` (see module doc)."""
    if "://" not in text:
        return text
    return _URL.sub(_redact_url, text)


def _redact_url(match: re.Match[str]) -> str:
    scheme, rest = match.group(1), match.group(2)
    userinfo = _USERINFO.match(rest)
    if userinfo is not None:
        rest = f"{REDACTED}@{rest[userinfo.end() :]}"
    return scheme + _PARAM.sub(_hide_value, rest)


def _hide_value(match: re.Match[str]) -> str:
    value = match.group(3)
    return f"{match.group(1)}{match.group(2)}={REDACTED if value else ''}"


def redact_json(value: Any) -> Any:
    """``value`` (strict-JSON data: mappings, lists, scalars) with :func:`redact` applied to every
    string in it, keys included; the containers are copied, other values kept as they are."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_json(k): redact_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v) for v in value]
    return value


def is_redacted(text: str) -> bool:
    """Whether ``text`` holds a URL whose credentials :func:`redact` hid (``://***@`` or a
    parameter ``=***``): such a text was read back from a record and must not be used to
    connect."""
    return _REDACTED_MARKS.search(text) is not None
