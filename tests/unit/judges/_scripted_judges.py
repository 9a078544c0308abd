"""A judge test double: verdicts looked up from a script keyed by the item's text, batch counted."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ragtrail.judges.contract import (
    JudgeInput,
    JudgeRole,
    JudgeSpec,
    Verdict,
    VerdictType,
    judge_version,
)

FAIL = object()
"""A scripted answer meaning "the model output could not be parsed"."""


class ScriptedJudge:
    """Answers ``script[key(item)]`` for each item; :data:`FAIL` gives a failed verdict."""

    def __init__(
        self,
        script: Mapping[str, object],
        *,
        name: str = "labeller",
        role: JudgeRole = JudgeRole.LABELLER,
        verdict_type: VerdictType = VerdictType.CATEGORY,
        categories: Sequence[str] = (),
        key: Callable[[JudgeInput], str] = lambda item: item.question,
    ) -> None:
        self._spec = JudgeSpec(
            name=name,
            version=judge_version(script=sorted(map(str, script.items()))),
            role=role,
            backend="scripted",
            model="test",
            verdict_type=verdict_type,
            categories=tuple(categories),
        )
        self.script = dict(script)
        self.key = key
        self.batches: list[int] = []

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        self.batches.append(len(items))
        out = []
        for item in items:
            answer = self.script[self.key(item)]
            if answer is FAIL:
                out.append(Verdict(self.spec.ref, None, error="unparseable", raw=("{oops",)))
            else:
                out.append(Verdict(self.spec.ref, answer))  # type: ignore[arg-type]
        return out
