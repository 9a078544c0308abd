"""The judge contract: who made a verdict, what kind of verdict it is, and the verdicts themselves.

Every model verdict in ragtrail comes from a :class:`Judge`. Its :class:`JudgeSpec` (name, version,
role, backend, model, verdict type) travels with each :class:`Verdict`, so a stored label, rating or
entailment decision can always say which judge produced it, and a calibration is tied to the exact
judge version it measured. The version is a content hash of everything that changes the judge's
behaviour (backend, model, prompt name and version, decision parameters): change any of them and
earlier calibrations no longer apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import sha256_json
from ragtrail.redact import redact


class VerdictType(StrEnum):
    """What a judge returns: one of fixed categories, a 1-5 rating, or a probability in [0, 1]."""

    CATEGORY = "category"
    RATING = "rating"
    PROBABILITY = "probability"


class JudgeRole(StrEnum):
    """The question a judge answers. Calibration and gate bars are defined per role."""

    LABELLER = "labeller"  # which taxonomy label a (context, question) pair has
    CRITIQUE = "critique"  # a 1-5 rating of one critique criterion
    ENTAILMENT = "entailment"  # does the premise support the hypothesis
    SUFFICIENCY = "sufficiency"  # (issue 10) is the context sufficient to answer
    CORRECTNESS = "correctness"  # (issue 10) is the answer correct


SUPPORTED = "supported"
NOT_SUPPORTED = "not_supported"
ENTAILMENT_CATEGORIES: tuple[str, ...] = (SUPPORTED, NOT_SUPPORTED)
"""The categories of an entailment verdict (a probability judge thresholds into these)."""


def judge_version(**behaviour: Any) -> str:
    """``"j-"`` + 12 hex digits of sha256 over the canonical JSON of what drives the verdicts."""
    return f"j-{sha256_json(behaviour)[:12]}"


@dataclass(frozen=True)
class JudgeSpec:
    """Identity of a judge.

    ``name`` is stable across versions (``labeller``, ``critique.stand_alone``,
    ``entailment.embedding``); ``version`` changes whenever behaviour can change (see
    :func:`judge_version`); ``backend`` says how verdicts are computed (``llm``, ``nli-classifier``,
    ``cross-encoder``, ``seq2seq-nli``, ``embedding-similarity``, ``scripted``); ``model`` the model
    or spec behind it; ``categories`` the allowed values of a CATEGORY judge; ``approximate`` marks
    a documented stand-in (e.g. the embedding-similarity fallback for a missing NLI model) that
    every report must name as such.
    """

    name: str
    version: str
    role: JudgeRole
    backend: str
    model: str
    verdict_type: VerdictType
    categories: tuple[str, ...] = ()
    approximate: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        # Stored with every verdict and calibration and shown in reports: never a credential
        # from the URL of the model behind the judge (its version hashes the full spec).
        object.__setattr__(self, "model", redact(self.model))
        object.__setattr__(self, "description", redact(self.description))

    @property
    def ref(self) -> str:
        """``name@version``: how stored verdicts name their judge."""
        return f"{self.name}@{self.version}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeSpec:
        """Inverse of :meth:`as_dict` (e.g. the spec a calibration was stored with)."""
        return cls(
            name=data["name"],
            version=data["version"],
            role=JudgeRole(data["role"]),
            backend=data["backend"],
            model=data["model"],
            verdict_type=VerdictType(data["verdict_type"]),
            categories=tuple(data.get("categories", ())),
            approximate=bool(data.get("approximate", False)),
            description=data.get("description", ""),
        )

    def as_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "version": self.version,
            "role": str(self.role),
            "backend": self.backend,
            "model": self.model,
            "verdict_type": str(self.verdict_type),
            "categories": list(self.categories),
            "approximate": self.approximate,
            "description": self.description,
        }


@dataclass(frozen=True)
class JudgeInput:
    """What a judge looks at. Which fields matter depends on the role:

    labeller: ``context`` + ``question``; critique: the fields its criterion reads among
    ``context``/``question``/``answer``; entailment: ``premise`` + ``hypothesis``.
    """

    context: str = ""
    question: str = ""
    answer: str = ""
    premise: str = ""
    hypothesis: str = ""

    def blank(self, *fields: str) -> str | None:
        """``"empty <field> and <field>"`` naming those of ``fields`` that are blank, else None:
        why a judge that reads them cannot judge this input."""
        missing = [name for name in fields if not getattr(self, name).strip()]
        return f"empty {' and '.join(missing)}" if missing else None


@dataclass(frozen=True)
class Verdict:
    """One judgement. ``value`` is a category (str), a rating (int 1-5) or a probability (float).

    A failed judgement has ``value=None``, the ``error`` cause and the ``raw`` model output(s) —
    never a guessed value. ``score`` is an optional continuous score behind a category (e.g. the
    entailment probability) kept for threshold analysis; ``reason`` the judge's explanation.
    """

    judge: str  # JudgeSpec.ref, "name@version"
    value: str | int | float | None
    score: float | None = None
    reason: str = ""
    error: str | None = None
    raw: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.error is None and self.value is not None

    def as_dict(self) -> JsonObject:
        out: JsonObject = {"judge": self.judge, "value": self.value}
        if self.score is not None:
            out["score"] = self.score
        if self.reason:
            out["reason"] = self.reason
        if self.error is not None:
            out["error"] = self.error
            out["raw"] = list(self.raw)
        return out


@runtime_checkable
class Judge(Protocol):
    """Anything that turns inputs into verdicts, batch in, batch out, in order."""

    @property
    def spec(self) -> JudgeSpec: ...

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]: ...
