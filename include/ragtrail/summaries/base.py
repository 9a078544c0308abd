"""The base of every typed summary: frozen pydantic models that read and write strict JSON.

A summary keeps ragtrail's convention for undefined numbers (:mod:`ragtrail.jsonsafe`): a value
that cannot be computed is ``None`` and the record says why under ``undefined`` (``{field:
reason}``); the ``undefined`` mapping is left out of the JSON when nothing is undefined, as the
hand-built documents always did. Unknown keys are refused on reading, so a renamed field fails
where the document is read rather than as a missing cell in a report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from ragtrail import jsonsafe


def _empty(value: Any) -> bool:
    return not value


def is_none(value: object) -> bool:
    """``exclude_if`` for a key that the document leaves out rather than writing null."""
    return value is None


class Record(BaseModel):
    """A frozen, strictly shaped summary with strict-JSON input and output."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        """The record as a strict-JSON dict (NaN or infinity anywhere is an error)."""
        data = self.model_dump(mode="json", by_alias=True)
        return jsonsafe.check_finite(data, type(self).__name__)

    def dumps(self, **kwargs: Any) -> str:
        """:meth:`to_json` as a JSON string (``json.dumps`` keyword arguments)."""
        return jsonsafe.dumps(self.to_json(), type(self).__name__, **kwargs)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | bytes) -> Self:
        """Read a record back from its JSON (a parsed mapping, or the text itself)."""
        if isinstance(data, str | bytes):
            return cls.model_validate_json(data)
        return cls.model_validate(dict(data))


class WithUndefined(Record):
    """A record whose null fields carry their reason under ``undefined``."""

    undefined: dict[str, str] = Field(default_factory=dict, exclude_if=_empty)

    def reason(self, field: str, default: str = "undefined") -> str:
        """Why ``field`` is null (``default`` when no reason was recorded)."""
        return self.undefined.get(field, default)


class Figure(Record):
    """A headline number with its confidence interval, the interval's method and the sample size
    (None: undefined; the full record it was taken from says why)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int | None
    ci_method: str | None = Field(None, exclude_if=is_none)


class Estimate(WithUndefined):
    """An aggregate's value with its confidence interval over ``n`` items (null parts with their
    reasons); the base of every evaluation's aggregate rows."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    ci_method: str | None = Field(None, exclude_if=is_none)

    @property
    def figure(self) -> Figure:
        """The number with its interval, method and n (what tables and headlines show)."""
        return Figure(
            value=self.value,
            ci_low=self.ci_low,
            ci_high=self.ci_high,
            n=self.n,
            ci_method=self.ci_method,
        )
