"""TEST-ONLY entailment judge: a rule, not a model, so metric tests can be computed by hand.

"supported" exactly when every word of the hypothesis occurs in the premise (lower-cased runs of
letters and digits). Hypotheses listed in ``fail_on`` get a failed verdict with raw output, as a
model whose reply could not be parsed would. Every batch is recorded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ragtrail.judges.contract import (
    NOT_SUPPORTED,
    SUPPORTED,
    JudgeInput,
    JudgeSpec,
    Verdict,
    judge_version,
)
from ragtrail.judges.entailment import entailment_spec


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class WordSubsetJudge:
    def __init__(self, fail_on: Iterable[str] = ()) -> None:
        self.fail_on = frozenset(fail_on)
        self._spec = entailment_spec(
            name="entailment.test-word-subset",
            version=judge_version(rule="word-subset", fail_on=sorted(self.fail_on)),
            backend="scripted",
            model="word-subset rule (tests only)",
            description="TEST ONLY: supported when the hypothesis's words are a subset of the "
            "premise's",
        )
        self.batches: list[list[JudgeInput]] = []

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        self.batches.append(list(items))
        out = []
        for item in items:
            if item.hypothesis in self.fail_on:
                out.append(Verdict(self._spec.ref, None, error="unparseable", raw=("{verd",)))
            else:
                entailed = words(item.hypothesis) <= words(item.premise)
                out.append(Verdict(self._spec.ref, SUPPORTED if entailed else NOT_SUPPORTED))
        return out

    @property
    def judged(self) -> list[tuple[str, str]]:
        """Every (premise, hypothesis) sent, in order, across batches."""
        return [(i.premise, i.hypothesis) for batch in self.batches for i in batch]
