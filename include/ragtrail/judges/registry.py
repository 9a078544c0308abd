"""Judges by name: one registration per judge (or family of judges), one lookup.

A :class:`JudgeRegistration` says how a judge is built from the runtime and how it is calibrated
against human references; :data:`JUDGES` maps names to registrations the way
:data:`~ragtrail.evaluate.contract.EVALUATORS` maps evaluator names to classes and
:func:`~ragtrail.llm.factory.register_llm_backend` maps spec kinds to loaders. A new judge (a
trained judge, an evidence-faithfulness judge) is one :func:`register_judge` call: the CLI
(``ragtrail judge calibrate NAME``), the pipeline's lookups and every error listing the known names
then know it.

Names are exact (``labeller``, ``entailment.nli``) or a family: ``critique.<criterion>`` with its
members (``critique.stand_alone``, ...) and, optionally, a group name that calibrates them all
(``critiques``). The runtime is typed ``Any`` here: it sits above the judges in the layers, and
the registrations that need it live in the pipeline, next to the steps that use the judges.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragtrail.judges.contract import Judge, JudgeRole
from ragtrail.storage.judge_store import CalibrationRecord

JudgeFactory = Callable[[Any, str], Judge]
"""``factory(runtime, name) -> judge``: ``name`` is the one asked for (a family member's full
name, an alias)."""

Calibrator = Callable[[Any, Sequence[str], "CalibrationRequest"], list[CalibrationRecord]]
"""``calibrate(runtime, names, request)``: measure the judges ``names`` (all served by one
registration) on the request's references and store the results; one record per judge."""

_FAMILY = re.compile(r"^(?P<prefix>[^<>\s]+\.)<(?P<member>[a-z_]+)>$")
_NOUNS = {JudgeRole.SUFFICIENCY: "sufficiency rater"}


class UnknownJudgeError(ValueError):
    """No registration serves the name; the message lists the names that are known."""


class DuplicateJudgeError(ValueError):
    """A name is already served by another registration."""


@dataclass(frozen=True)
class CalibrationRequest:
    """What ``ragtrail judge calibrate`` was given; each calibrator reads the parts it needs."""

    reference: Path
    """A QA set (labeller, critiques, sufficiency, correctness) or labelled pairs (entailment)."""
    corpus: str
    per_label: int | None = None
    """Labeller: golden items per label (None: the setting)."""
    pairs: int | None = None
    """Critiques: contrast pairs per criterion (None: the setting)."""
    sample: int | None = None
    """Entailment: a seeded sample of this many reference rows (None: all)."""


@dataclass(frozen=True)
class JudgeRegistration:
    """How the judge (or family of judges) ``name`` is built and calibrated.

    A family's ``name`` ends in a ``<placeholder>`` (``critique.<criterion>``) and ``members``
    lists the values it takes; ``group`` is a name that calibrates every member at once.
    ``listed`` judges are the configured ones ``ragtrail judge list`` shows; an ``optional`` one
    may be unbuildable in an installation (no NLI weights offline), and the list then says why
    and goes on.
    """

    name: str
    role: JudgeRole
    build: JudgeFactory
    calibrate: Calibrator | None = None
    members: tuple[str, ...] = ()
    group: str | None = None
    listed: bool = False
    optional: bool = False

    def __post_init__(self) -> None:
        # plain strings (a StrEnum member given as a name lists as its value)
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "members", tuple(str(m) for m in self.members))
        if self.group is not None:
            object.__setattr__(self, "group", str(self.group))
        family = _FAMILY.match(self.name)
        if not family and (not self.name or any(ch.isspace() or ch in "<>" for ch in self.name)):
            raise ValueError(f"invalid judge name {self.name!r}")
        if bool(family) != bool(self.members):
            raise ValueError(
                f"judge {self.name!r}: a family ('prefix.<member>') needs members, "
                "and only a family has them"
            )
        if self.group is not None and not family:
            raise ValueError(f"judge {self.name!r}: only a family has a group name")

    @property
    def prefix(self) -> str | None:
        """``"critique."`` for the family ``critique.<criterion>``; None for an exact name."""
        family = _FAMILY.match(self.name)
        return family["prefix"] if family else None

    @property
    def names(self) -> tuple[str, ...]:
        """The names this registration serves: its own, or every member's full name."""
        prefix = self.prefix
        return (self.name,) if prefix is None else tuple(prefix + m for m in self.members)

    def serves(self, name: str) -> bool:
        """Whether ``name`` is this registration's (for a family: starts with its prefix)."""
        prefix = self.prefix
        return name == self.name if prefix is None else name.startswith(prefix)


class JudgeRegistry:
    """Judge name -> registration. Registering a taken name fails unless ``replace=True``."""

    def __init__(self) -> None:
        self._entries: dict[str, JudgeRegistration] = {}

    def register(
        self, registration: JudgeRegistration, *, replace: bool = False
    ) -> JudgeRegistration:
        taken = self._entries.get(registration.name)
        if taken == registration:
            return registration  # the same registration again (a module imported twice)
        if taken is not None and not replace:
            raise DuplicateJudgeError(
                f"judge {registration.name!r} is already registered; pass replace=True to "
                "overwrite it"
            )
        others = [e for key, e in self._entries.items() if key != registration.name]
        clash = sorted(
            {n for n in _all_names(registration) if any(_answers_to(e, n) for e in others)}
            | {n for e in others for n in _all_names(e) if _answers_to(registration, n)}
        )
        if clash:
            raise DuplicateJudgeError(f"judge names {clash} are already registered")
        self._entries[registration.name] = registration
        return registration

    def resolve(
        self, name: str, *, role: JudgeRole | None = None, groups: bool = False
    ) -> JudgeRegistration:
        """The registration serving ``name`` (of ``role`` when given), or
        :class:`UnknownJudgeError` listing the known names (with the group names if ``groups``)."""
        for entry in self._entries.values():
            if (role is None or entry.role == role) and entry.serves(name):
                prefix = entry.prefix
                if prefix is not None and name.removeprefix(prefix) not in entry.members:
                    raise UnknownJudgeError(
                        f"unknown {prefix.rstrip('.')} {name.removeprefix(prefix)!r}; "
                        f"known: {', '.join(entry.members)}"
                    )
                return entry
        noun = "judge" if role is None else _NOUNS.get(role, f"{role.value} judge")
        known = ", ".join(self.names(role, groups=groups))
        raise UnknownJudgeError(f"unknown {noun} {name!r}; known: {known}")

    def build(self, rt: Any, name: str, *, role: JudgeRole | None = None) -> Judge:
        """The judge ``name`` (of ``role`` when given) as the runtime's settings configure it."""
        return self.resolve(name, role=role).build(rt, name)

    def calibrate(self, rt: Any, name: str, request: CalibrationRequest) -> list[CalibrationRecord]:
        """Calibrate the judge ``name``, or every member of the family whose group it is."""
        for entry in self._entries.values():
            if entry.group is not None and entry.group == name:
                return _calibrator(entry, name)(rt, entry.names, request)
        entry = self.resolve(name, groups=True)
        return _calibrator(entry, name)(rt, [name], request)

    def names(self, role: JudgeRole | None = None, *, groups: bool = False) -> list[str]:
        """Every name served (of ``role`` when given), in registration order; with ``groups``,
        each family's group name follows its members."""
        out: list[str] = []
        for entry in self._entries.values():
            if role is None or entry.role == role:
                out += entry.names
                if groups and entry.group is not None:
                    out.append(entry.group)
        return out

    def listed(self) -> list[JudgeRegistration]:
        """The registrations ``ragtrail judge list`` shows, in registration order."""
        return [e for e in self._entries.values() if e.listed]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and any(
            name in e.names or name == e.group for e in self._entries.values()
        )


def _all_names(entry: JudgeRegistration) -> tuple[str, ...]:
    return (*entry.names, *((entry.group,) if entry.group is not None else ()))


def _answers_to(entry: JudgeRegistration, name: str) -> bool:
    """Whether ``entry`` answers to ``name``: a name it serves (a family: its whole prefix), or
    its group."""
    return entry.serves(name) or name == entry.group


def _calibrator(entry: JudgeRegistration, name: str) -> Calibrator:
    if entry.calibrate is None:
        raise ValueError(f"judge {name!r} has no calibration (no reference kind is registered)")
    return entry.calibrate


JUDGES = JudgeRegistry()
"""Every judge ragtrail can build; the pipeline modules that build judges register them."""


def register_judge(
    name: str,
    role: JudgeRole,
    build: JudgeFactory,
    *,
    calibrate: Calibrator | None = None,
    members: Sequence[str] = (),
    group: str | None = None,
    listed: bool = False,
    optional: bool = False,
) -> JudgeRegistration:
    """Add a judge (or family) to :data:`JUDGES`, refusing to silently replace another."""
    return JUDGES.register(
        JudgeRegistration(
            name,
            role,
            build,
            calibrate=calibrate,
            members=tuple(members),
            group=group,
            listed=listed,
            optional=optional,
        )
    )


__all__ = [
    "JUDGES",
    "CalibrationRequest",
    "Calibrator",
    "DuplicateJudgeError",
    "JudgeFactory",
    "JudgeRegistration",
    "JudgeRegistry",
    "UnknownJudgeError",
    "register_judge",
]
