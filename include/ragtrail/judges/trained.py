"""Judges trained on a team's own labels: a fine-tuned cross-encoder that reads two texts.

A trained judge is a sentence-transformers ``CrossEncoder`` with one output per category of its
kind (:data:`TRAINED_KINDS`): ``entailment`` reads (premise, hypothesis) and says supported or
not, ``sufficiency`` reads (question, context) and says sufficient or not, ``labeller`` reads
(question, context) and names one of the four question labels. A two-category kind says
``positive`` when P(positive) reaches the decision threshold tuned at training time; the
labeller takes the most probable label.

The judge lives in a directory (a model bundle, :mod:`ragtrail.models.bundle`) holding the saved
cross-encoder under ``model/`` and ``judge.json`` (kind, categories, threshold, window). Its
version hashes the bytes of every weight and tokenizer file (:func:`weights_digest`), so new
weights are a new judge version and no calibration of the old weights applies to them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragtrail import jsonsafe
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.contract import (
    ENTAILMENT_CATEGORIES,
    SUPPORTED,
    JudgeInput,
    JudgeRole,
    JudgeSpec,
    Verdict,
    VerdictType,
    judge_version,
)
from ragtrail.judges.entailment import check_threshold, failed_verdict, judge_nonempty
from ragtrail.judges.sufficiency_raters import SUFFICIENCY_CATEGORIES, SUFFICIENT
from ragtrail.records import QuestionLabel

BACKEND = "trained-cross-encoder"
MODEL_SUBDIR = "model"
JUDGE_FILE = "judge.json"
JUDGE_FORMAT = "ragtrail-trained-judge/1"
DEFAULT_BATCH_SIZE = 32

_NOT_WEIGHTS = frozenset({"README.md"})
"""Files of a saved cross-encoder that do not change its verdicts (the generated model card
carries dates): left out of the weights digest."""


@dataclass(frozen=True)
class TrainedKind:
    """What a trained judge of one kind reads and answers.

    ``fields`` are the two :class:`~ragtrail.judges.contract.JudgeInput` fields it reads, in the
    order the cross-encoder sees them; ``positive`` is the category a threshold decides for
    (None: the most probable category wins).
    """

    kind: str
    role: JudgeRole
    categories: tuple[str, ...]
    fields: tuple[str, str]
    positive: str | None

    @property
    def judge_name(self) -> str:
        """``entailment.trained``, ``sufficiency.trained``, ``labeller.trained``."""
        return f"{self.kind}.trained"

    @property
    def registered_model(self) -> str:
        """The model-registry name its versions are registered under."""
        return f"ragtrail-judge-{self.kind}"

    @property
    def bundle_kind(self) -> str:
        return f"judge-{self.kind}"


TRAINED_KINDS: dict[str, TrainedKind] = {
    k.kind: k
    for k in (
        TrainedKind(
            "entailment",
            JudgeRole.ENTAILMENT,
            ENTAILMENT_CATEGORIES,
            ("premise", "hypothesis"),
            SUPPORTED,
        ),
        TrainedKind(
            "sufficiency",
            JudgeRole.SUFFICIENCY,
            SUFFICIENCY_CATEGORIES,
            ("question", "context"),
            SUFFICIENT,
        ),
        TrainedKind(
            "labeller",
            JudgeRole.LABELLER,
            tuple(label.value for label in QuestionLabel),
            ("question", "context"),
            None,
        ),
    )
}


def trained_kind(kind: str) -> TrainedKind:
    """The kind named ``kind``; a ValueError lists the kinds a judge can be trained for."""
    try:
        return TRAINED_KINDS[kind]
    except KeyError:
        raise ValueError(
            f"no trained judge of kind {kind!r}; known: {', '.join(TRAINED_KINDS)}"
        ) from None


def weights_digest(model_dir: Path | str) -> str:
    """SHA-256 over the name and bytes of every file that shapes the verdicts (weights, config,
    tokenizer): the same weights give the same digest, any changed weight a new one."""
    root = Path(model_dir)
    h = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in _NOT_WEIGHTS)
    if not files:
        raise FileNotFoundError(f"{root}: no model files")
    for path in files:
        h.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class JudgeSettingsFile:
    """``judge.json``: what turns the cross-encoder's probabilities into verdicts."""

    kind: str
    threshold: float | None
    max_length: int
    base_model: str

    def as_dict(self) -> JsonObject:
        return {
            "format": JUDGE_FORMAT,
            "kind": self.kind,
            "threshold": self.threshold,
            "max_length": self.max_length,
            "base_model": self.base_model,
        }

    def write(self, directory: Path) -> None:
        text = jsonsafe.dumps(self.as_dict(), JUDGE_FILE, indent=2)
        (directory / JUDGE_FILE).write_text(text, encoding="utf-8")

    @classmethod
    def read(cls, directory: Path) -> JudgeSettingsFile:
        path = directory / JUDGE_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{directory}: no {JUDGE_FILE}; not a trained judge")
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != JUDGE_FORMAT:
            raise ValueError(f"{path}: format {data.get('format')!r}, expected {JUDGE_FORMAT!r}")
        threshold = data.get("threshold")
        return cls(
            kind=trained_kind(str(data["kind"])).kind,
            threshold=None if threshold is None else check_threshold(threshold),
            max_length=int(data["max_length"]),
            base_model=str(data.get("base_model", "")),
        )


@dataclass(frozen=True)
class LabelledPair:
    """One human label: the two texts a judge of some kind reads (in its field order), the
    category, and the query it belongs to (``group``: what a split by query keeps together)."""

    item_id: str
    group: str
    first: str
    second: str
    label: str

    def judge_input(self, kind: TrainedKind) -> JudgeInput:
        """The pair as the judges of ``kind`` read it."""
        return JudgeInput(**dict(zip(kind.fields, (self.first, self.second), strict=True)))


def pair_texts(kind: TrainedKind, item: JudgeInput) -> tuple[str, str]:
    """The two texts the cross-encoder reads for ``item``."""
    first, second = kind.fields
    return getattr(item, first), getattr(item, second)


class TrainedCrossEncoderJudge:
    """A judge backed by a fine-tuned cross-encoder (see the module docstring).

    ``Verdict.score`` is P(positive) for a two-category kind and the winning category's
    probability for the labeller. ``model_ref`` names where the judge came from in its spec
    (``registry:ragtrail-judge-entailment@3``, a path).
    """

    def __init__(
        self,
        cross_encoder: Any,
        settings: JudgeSettingsFile,
        *,
        digest: str,
        model_ref: str,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        self.kind = trained_kind(settings.kind)
        self.settings = settings
        self.digest = digest
        self.batch_size = batch_size
        labels = [str(cross_encoder.config.id2label[i]) for i in range(len(self.kind.categories))]
        if tuple(labels) != self.kind.categories:
            raise ValueError(
                f"{model_ref}: the model's labels {labels} are not the {self.kind.kind} "
                f"categories {list(self.kind.categories)}"
            )
        if (settings.threshold is None) != (self.kind.positive is None):
            raise ValueError(
                f"{model_ref}: a {self.kind.kind} judge "
                + ("needs a threshold" if self.kind.positive else "takes no threshold")
            )
        self._model = cross_encoder
        self._model.eval()
        version = judge_version(
            backend=BACKEND,
            kind=self.kind.kind,
            weights=digest,
            threshold=settings.threshold,
            max_length=settings.max_length,
        )
        rule = (
            f"{self.kind.positive} when P({self.kind.positive}) >= {settings.threshold:.2f}"
            if settings.threshold is not None
            else "the most probable label"
        )
        self._spec = JudgeSpec(
            name=self.kind.judge_name,
            version=version,
            role=self.kind.role,
            backend=BACKEND,
            model=model_ref,
            verdict_type=VerdictType.CATEGORY,
            categories=self.kind.categories,
            description=(
                f"cross-encoder fine-tuned from {settings.base_model} on the team's "
                f"{self.kind.kind} labels (weights {digest[:12]}): {rule}"
            ),
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def probabilities(self, items: Sequence[JudgeInput]) -> np.ndarray:
        """An (n, categories) array of class probabilities, rows in the order of ``items``."""
        if not items:
            return np.zeros((0, len(self.kind.categories)), dtype=np.float32)
        probs = self._model.predict(
            [pair_texts(self.kind, item) for item in items],
            batch_size=self.batch_size,
            apply_softmax=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return np.asarray(probs, dtype=np.float64).reshape(len(items), -1)

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        return judge_nonempty(
            self._spec.ref, items, self._judge_valid, problem=lambda i: i.blank(*self.kind.fields)
        )

    def _judge_valid(self, items: list[JudgeInput]) -> list[Verdict]:
        return [self.verdict(row) for row in self.probabilities(items)]

    def verdict(self, row: np.ndarray) -> Verdict:
        """The verdict for one row of class probabilities."""
        ref = self._spec.ref
        if not np.all(np.isfinite(row)):
            return failed_verdict(ref, "the model produced a non-finite probability", (repr(row),))
        categories = self.kind.categories
        if self.kind.positive is None:
            best = int(np.argmax(row))
            return Verdict(judge=ref, value=categories[best], score=float(row[best]))
        assert self.settings.threshold is not None
        p = float(row[categories.index(self.kind.positive)])
        other = next(c for c in categories if c != self.kind.positive)
        value = self.kind.positive if p >= self.settings.threshold else other
        return Verdict(judge=ref, value=value, score=p)

    def uncertainty(self, items: Sequence[JudgeInput]) -> list[float]:
        """How unsure the judge is of each item, in [0, 1]: 1 at the decision boundary.

        Two categories: 1 - |P(positive) - threshold| / max distance on that side; the
        labeller: 1 - (top probability - second probability)."""
        out = []
        for row in self.probabilities(items):
            if self.kind.positive is None:
                top = np.sort(row)[::-1]
                out.append(float(1.0 - (top[0] - top[1])))
                continue
            assert self.settings.threshold is not None
            p = float(row[self.kind.categories.index(self.kind.positive)])
            out.append(closeness_to_threshold(p, self.settings.threshold))
        return out


def closeness_to_threshold(score: float, threshold: float, lowest: float = 0.0) -> float:
    """How close a thresholded ``score`` lies to its ``threshold``, in [0, 1]: 1 on it, 0 at
    the end of the score's range on its side (``lowest`` to 1; a cosine starts at -1)."""
    span = (1.0 - threshold) if score >= threshold else (threshold - lowest)
    return max(0.0, 1.0 - abs(score - threshold) / span) if span > 0 else 0.0


def load_trained_judge(
    directory: Path | str, *, model_ref: str, device: str = "cpu"
) -> TrainedCrossEncoderJudge:
    """The trained judge saved in ``directory`` (``judge.json`` and ``model/``)."""
    from sentence_transformers import CrossEncoder

    root = Path(directory)
    settings = JudgeSettingsFile.read(root)
    model_dir = root / MODEL_SUBDIR
    cross_encoder = CrossEncoder(
        str(model_dir), device=device, local_files_only=True, max_length=settings.max_length
    )
    return TrainedCrossEncoderJudge(
        cross_encoder, settings, digest=weights_digest(model_dir), model_ref=model_ref
    )


__all__ = [
    "BACKEND",
    "JUDGE_FILE",
    "MODEL_SUBDIR",
    "TRAINED_KINDS",
    "JudgeSettingsFile",
    "LabelledPair",
    "TrainedCrossEncoderJudge",
    "TrainedKind",
    "closeness_to_threshold",
    "load_trained_judge",
    "pair_texts",
    "trained_kind",
    "weights_digest",
]
