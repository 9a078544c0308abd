"""Strict JSON for every value that leaves the process (XCom, asset extras, metrics files, DB JSON).

JSON has no NaN or infinity; Python's ``json`` writes them anyway unless told not to, and Airflow's
API refuses them. ragtrail therefore never lets a non-finite float out: an undefined value is
``null`` and its record says why, in a mapping ``undefined: {field: reason}`` beside the fields::

    {"label": "summary", "gap_to_best": null,
     "undefined": {"gap_to_best": "every label has a best recall of 0"}}

:func:`mark_undefined` writes that convention, :func:`dumps` refuses anything else and names the
path of the offending value, so a NaN is caught where it was produced, not three systems later.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

UNDEFINED_KEY = "undefined"

JsonObject = dict[str, Any]
"""A strict-JSON object built or passed through as is: a serialised record (``as_dict``,
``as_json``), a request body, a schema, or a nested blob a record does not look inside."""


class NonFiniteValueError(ValueError):
    """A NaN or infinite float was about to leave the process."""


def mark_undefined(record: MutableMapping[str, Any], field: str, reason: str) -> None:
    """Set ``record[field]`` to None and record why under ``record["undefined"][field]``."""
    record[field] = None
    record.setdefault(UNDEFINED_KEY, {})[field] = reason


def finite_or_undefined(
    record: MutableMapping[str, Any], field: str, value: float | None, reason: str
) -> None:
    """``record[field] = value`` when it is a finite number, else :func:`mark_undefined`."""
    if value is None or not math.isfinite(float(value)):
        mark_undefined(record, field, reason)
    else:
        record[field] = float(value)


def non_finite_paths(value: Any, path: str = "$") -> Iterator[str]:
    """JSON paths (``$.best[2].gap_to_best``) of every NaN or infinite float inside ``value``."""
    if isinstance(value, float):
        if not math.isfinite(value):
            yield path
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from non_finite_paths(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from non_finite_paths(item, f"{path}[{i}]")
    elif hasattr(value, "dtype") and hasattr(value, "tolist"):  # numpy scalars and arrays
        yield from non_finite_paths(value.tolist(), path)


def check_finite(value: Any, what: str = "value") -> Any:
    """Return ``value`` unchanged, or raise naming every non-finite float inside it."""
    bad = list(non_finite_paths(value))
    if bad:
        raise NonFiniteValueError(
            f"{what} holds non-finite numbers at {', '.join(bad[:10])}"
            f"{' …' if len(bad) > 10 else ''}: undefined values must be null with a reason "
            f"(ragtrail.jsonsafe.mark_undefined)"
        )
    return value


def dumps(value: Any, what: str = "value", **kwargs: Any) -> str:
    """``json.dumps`` that refuses NaN/infinity with the offending paths (``default=str``)."""
    check_finite(value, what)
    kwargs.setdefault("default", str)
    return json.dumps(value, allow_nan=False, **kwargs)


def write_jsonl(rows: Iterable[Any], path: Path | str, what: str = "row") -> int:
    """Write ``rows`` as strict JSON lines, atomically (a temp file renamed into place, so a
    failure leaves any earlier file untouched); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(dumps(row, f"{what} {count + 1}", ensure_ascii=False) + "\n")
                count += 1
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return count
