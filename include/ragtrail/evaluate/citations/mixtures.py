"""Relevance mixtures for citation evaluation (METHODS §6, RAGE): for each question a seeded,
shuffled list of relevant, irrelevant and seemingly relevant passages the model must cite from.

Passage kinds
-------------
* **relevant**: the item's ground chunks. An item that names only documents gets the chunks of
  those documents the hybrid retriever ranks highest for its question (at most the spec's relevant
  maximum); the choice is recorded (``relevant_source`` and the fused ranks) so it can be audited.
  Unanswerable items have none.
* **seemingly relevant**: drawn from the ``seemingly_pool`` (default 10) chunks nearest to the
  question by embedding similarity, relevant chunks excluded. By default every chunk of a ground
  document is excluded too (``exclude_ground_documents``): chunk windows overlap, so a neighbour
  of a ground chunk may carry the answer, and calling it "seemingly relevant" would punish a
  correct citation. Turning the flag off keeps only the ground chunks themselves out.
* **irrelevant**: random chunks of other documents (no ground document), outside the seemingly
  relevant pool, so an "irrelevant" passage is never one of the question's near neighbours.

Mixture types: ``relevant+irrelevant``, ``relevant+seemingly`` and ``all`` (the three kinds);
each item gets one mixture per configured type, counts from a :class:`MixtureSpec` ("1-3/3/3").

Determinism: every draw uses a NumPy generator seeded by a SHA-256 of ``(seed, qid, purpose)``
(never Python's salted ``hash()``). The relevant count and subset are drawn once per item
(purpose ``relevant``) so all mixture types of an item hold the same relevant passages and differ
only in their distractors; distractors and the shuffle are drawn per ``(seed, qid, type)``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import MIXTURE_TYPES, Chunk, MixtureType, QAItem, QuestionLabel, SearchHit

PassageKind = Literal["relevant", "irrelevant", "seemingly"]
GROUND_CHUNKS = "ground_chunks"
RETRIEVER_TOP = "retriever_top_of_ground_docs"
NO_RELEVANT = "unanswerable"
DEFAULT_SPEC = "1-3/3/3"

_SPEC_RE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+))?\s*/\s*(\d+)\s*/\s*(\d+)\s*$")

SearchFn = Callable[[Sequence[str], int], list[list[SearchHit]]]
"""``(questions, k) -> top-k hits per question``, best first."""


class MixtureInputError(ValueError):
    """The items or the corpus cannot make mixtures; the message lists every problem."""


@dataclass(frozen=True)
class MixtureSpec:
    """How many passages of each kind a mixture holds: relevant ``min-max``, irrelevant,
    seemingly relevant. ``"1-3/3/3"`` is RAGE's setting; ``"2/3/3"`` fixes the relevant count."""

    relevant_min: int = 1
    relevant_max: int = 3
    irrelevant: int = 3
    seemingly: int = 3

    def __post_init__(self) -> None:
        problems = []
        if self.relevant_min < 1:
            problems.append(f"relevant minimum must be >= 1, got {self.relevant_min}")
        if self.relevant_max < self.relevant_min:
            problems.append(
                f"relevant maximum {self.relevant_max} is below the minimum {self.relevant_min}"
            )
        if self.irrelevant < 0 or self.seemingly < 0:
            problems.append("distractor counts must be >= 0")
        if problems:
            raise ValueError(f"bad mixture spec {self.text!r}: " + "; ".join(problems))

    @classmethod
    def parse(cls, text: str) -> MixtureSpec:
        """``"R/I/S"`` or ``"Rmin-Rmax/I/S"`` with non-negative integers."""
        match = _SPEC_RE.match(text)
        if not match:
            raise ValueError(
                f"bad mixture spec {text!r}: expected 'relevant_min-relevant_max/irrelevant/"
                "seemingly' (e.g. '1-3/3/3') or 'relevant/irrelevant/seemingly' (e.g. '2/3/3')"
            )
        low, high, irrelevant, seemingly = match.groups()
        return cls(int(low), int(high or low), int(irrelevant), int(seemingly))

    @property
    def text(self) -> str:
        rel = (
            str(self.relevant_min)
            if self.relevant_min == self.relevant_max
            else f"{self.relevant_min}-{self.relevant_max}"
        )
        return f"{rel}/{self.irrelevant}/{self.seemingly}"


@dataclass(frozen=True)
class MixtureCorpus:
    """What mixtures are drawn from: the corpus's chunks and two searches over them.

    ``dense_search`` ranks chunks by embedding similarity to each question (seemingly relevant
    pool); ``hybrid_search`` is the fused retriever (relevant chunks of document-level items).
    """

    chunks: Sequence[Chunk]
    dense_search: SearchFn
    hybrid_search: SearchFn


@dataclass(frozen=True)
class MixturePassage:
    """Passage ``number`` (1-based, as the model sees it) of a mixture."""

    number: int
    kind: PassageKind
    chunk_id: str
    doc_id: str
    text: str

    def as_dict(self) -> JsonObject:
        return {
            "number": self.number,
            "kind": self.kind,
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "text": self.text,
        }


@dataclass(frozen=True)
class Mixture:
    """One question's passages for one mixture type, in the order they are numbered.

    ``relevant_source`` says where the relevant passages came from (:data:`GROUND_CHUNKS`,
    :data:`RETRIEVER_TOP` with ``relevant_ranks`` = their 1-based fused ranks, or
    :data:`NO_RELEVANT`).
    """

    qid: str
    question: str
    label: str
    mixture_type: MixtureType
    passages: tuple[MixturePassage, ...]
    relevant_source: str
    relevant_ranks: tuple[int, ...] = ()

    @property
    def relevant_numbers(self) -> frozenset[int]:
        return frozenset(p.number for p in self.passages if p.kind == "relevant")

    @property
    def answerable(self) -> bool:
        return bool(self.relevant_numbers)

    @property
    def kinds(self) -> tuple[PassageKind, ...]:
        return tuple(p.kind for p in self.passages)

    def as_dict(self) -> JsonObject:
        return {
            "qid": self.qid,
            "question": self.question,
            "label": self.label,
            "mixture": self.mixture_type,
            "relevant_source": self.relevant_source,
            "relevant_ranks": list(self.relevant_ranks),
            "passages": [p.as_dict() for p in self.passages],
        }


@dataclass(frozen=True)
class SkippedItem:
    """An item no mixture was built for, and why (never dropped silently)."""

    qid: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"qid": self.qid, "reason": self.reason}


@dataclass(frozen=True)
class MixtureSet:
    mixtures: tuple[Mixture, ...]
    skipped: tuple[SkippedItem, ...] = ()
    spec: MixtureSpec = field(default_factory=MixtureSpec)

    def as_dict(self) -> JsonObject:
        return {
            "spec": self.spec.text,
            "mixtures": [m.as_dict() for m in self.mixtures],
            "skipped": [s.as_dict() for s in self.skipped],
        }

    def to_json(self) -> str:
        """Canonical JSON (sorted keys): equal sets give equal bytes."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from the canonical JSON of ``parts`` (stable across processes and runs)."""
    digest = hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _rng(*parts: object) -> np.random.Generator:
    return np.random.default_rng(stable_seed(*parts))


@dataclass(frozen=True)
class _Relevant:
    chunks: tuple[Chunk, ...]
    source: str
    ranks: tuple[int, ...] = ()


def build_mixtures(
    items: Sequence[QAItem],
    corpus: MixtureCorpus,
    *,
    spec: MixtureSpec | None = None,
    seed: int = 13,
    types: Sequence[MixtureType] = MIXTURE_TYPES,
    seemingly_pool: int = 10,
    exclude_ground_documents: bool = True,
    retriever_depth: int = 50,
) -> MixtureSet:
    """One mixture per item and type (see the module docstring).

    Raises :class:`MixtureInputError` listing every bad item (duplicate qid, empty question,
    answerable item without ground context, unknown mixture type) before drawing anything. An
    item whose ground chunks or documents are not in the corpus (a QA set older than the corpus
    snapshot) or whose ground documents have no chunk among the retriever's top
    ``retriever_depth`` is skipped with that reason; the others are still evaluated.
    """
    spec = spec or MixtureSpec()
    by_id = {c.chunk_id: c for c in corpus.chunks}
    by_doc: dict[str, list[Chunk]] = {}
    for chunk in corpus.chunks:
        by_doc.setdefault(chunk.doc_id, []).append(chunk)
    _validate(items, types)
    skipped: list[SkippedItem] = []
    known: list[QAItem] = []
    for item in items:
        reason = _missing_ground(item, by_id, by_doc)
        if reason:
            skipped.append(SkippedItem(item.qid, reason))
        else:
            known.append(item)
    items = known

    questions = [item.question for item in items]
    exclusions = [
        _excluded_from_distractors(item, by_doc, exclude_ground_documents) for item in items
    ]
    depth = seemingly_pool + max((len(e) for e in exclusions), default=0)
    nearest = corpus.dense_search(questions, depth) if items else []
    doc_level = [i for i, item in enumerate(items) if _needs_retriever(item)]
    ranked = corpus.hybrid_search([questions[i] for i in doc_level], retriever_depth)
    ranked_by_item = dict(zip(doc_level, ranked, strict=True))

    mixtures: list[Mixture] = []
    for i, item in enumerate(items):
        relevant = _relevant_of(item, spec, seed, by_id, ranked_by_item.get(i, []))
        if relevant is None:
            skipped.append(
                SkippedItem(
                    item.qid,
                    f"no chunk of the ground documents {list(item.ground_doc_ids)} among the "
                    f"retriever's top {retriever_depth}",
                )
            )
            continue
        excluded = exclusions[i] | {c.chunk_id for c in relevant.chunks}
        pool = [
            by_id[h.chunk_id]
            for h in nearest[i]
            if h.chunk_id in by_id and h.chunk_id not in excluded
        ][:seemingly_pool]
        pool_ids = {c.chunk_id for c in pool}
        ground_docs = set(item.ground_doc_ids) | {c.doc_id for c in relevant.chunks}
        others = [
            c for c in corpus.chunks if c.doc_id not in ground_docs and c.chunk_id not in pool_ids
        ]
        for mixture_type in types:
            mixtures.append(_mix(item, mixture_type, relevant, pool, others, spec, seed))
    return MixtureSet(tuple(mixtures), tuple(skipped), spec)


def _missing_ground(
    item: QAItem, by_id: dict[str, Chunk], by_doc: dict[str, list[Chunk]]
) -> str | None:
    """Why ``item``'s ground context is not in the corpus (None when it is)."""
    missing_chunks = [c for c in item.ground_chunk_ids if c not in by_id]
    if missing_chunks:
        return f"ground chunks not in the corpus: {missing_chunks}"
    missing_docs = [d for d in item.ground_doc_ids if d not in by_doc]
    if missing_docs and _is_answerable(item):
        return f"ground documents not in the corpus: {missing_docs}"
    return None


def _validate(items: Sequence[QAItem], types: Sequence[str]) -> None:
    problems = [f"unknown mixture type {t!r}" for t in types if t not in MIXTURE_TYPES]
    if len(set(types)) != len(types):
        problems.append(f"mixture types repeat: {list(types)}")
    seen: dict[str, int] = {}
    for row, item in enumerate(items, start=1):
        if item.qid in seen:
            problems.append(f"row {row}: qid {item.qid!r} repeats row {seen[item.qid]}")
        seen.setdefault(item.qid, row)
        if not item.question.strip():
            problems.append(f"row {row} ({item.qid}): empty question")
        if _is_answerable(item) and not (item.ground_chunk_ids or item.ground_doc_ids):
            problems.append(f"row {row} ({item.qid}): answerable item without ground context")
    if problems:
        raise MixtureInputError(
            f"cannot build mixtures, {len(problems)} problem(s):\n  " + "\n  ".join(problems)
        )


def _is_answerable(item: QAItem) -> bool:
    return item.label != QuestionLabel.UNANSWERABLE


def _needs_retriever(item: QAItem) -> bool:
    return _is_answerable(item) and not item.ground_chunk_ids


def _excluded_from_distractors(
    item: QAItem, by_doc: dict[str, list[Chunk]], exclude_ground_documents: bool
) -> set[str]:
    """Chunk ids that may never be seemingly relevant (or irrelevant) for ``item``."""
    excluded = set(item.ground_chunk_ids)
    if exclude_ground_documents:
        for doc_id in item.ground_doc_ids:
            excluded.update(c.chunk_id for c in by_doc.get(doc_id, []))
    return excluded


def _relevant_of(
    item: QAItem,
    spec: MixtureSpec,
    seed: int,
    by_id: dict[str, Chunk],
    ranking: Sequence[SearchHit],
) -> _Relevant | None:
    if not _is_answerable(item):
        return _Relevant((), NO_RELEVANT)
    rng = _rng(seed, item.qid, "relevant")
    if item.ground_chunk_ids:
        pool = list(dict.fromkeys(item.ground_chunk_ids))
        count = _draw_count(rng, spec, len(pool))
        picked = sorted(rng.choice(len(pool), size=count, replace=False).tolist())
        return _Relevant(tuple(by_id[pool[j]] for j in picked), GROUND_CHUNKS)
    ground = set(item.ground_doc_ids)
    hits = [(rank, h) for rank, h in enumerate(ranking, start=1) if h.doc_id in ground]
    hits = [(rank, h) for rank, h in hits if h.chunk_id in by_id]
    if not hits:
        return None
    count = _draw_count(rng, spec, len(hits))
    top = hits[:count]
    return _Relevant(
        tuple(by_id[h.chunk_id] for _, h in top), RETRIEVER_TOP, tuple(r for r, _ in top)
    )


def _draw_count(rng: np.random.Generator, spec: MixtureSpec, available: int) -> int:
    """Uniform in ``[min, max]`` capped by what is available (all of it when fewer than min)."""
    high = min(spec.relevant_max, available)
    low = min(spec.relevant_min, high)
    return int(rng.integers(low, high + 1))


def _mix(
    item: QAItem,
    mixture_type: MixtureType,
    relevant: _Relevant,
    pool: Sequence[Chunk],
    others: Sequence[Chunk],
    spec: MixtureSpec,
    seed: int,
) -> Mixture:
    rng = _rng(seed, item.qid, mixture_type)
    chosen: list[tuple[PassageKind, Chunk]] = [("relevant", c) for c in relevant.chunks]
    if mixture_type in (MixtureType.RELEVANT_IRRELEVANT, MixtureType.ALL):
        chosen += [("irrelevant", c) for c in _sample(rng, others, spec.irrelevant)]
    if mixture_type in (MixtureType.RELEVANT_SEEMINGLY, MixtureType.ALL):
        chosen += [("seemingly", c) for c in _sample(rng, pool, spec.seemingly)]
    order = rng.permutation(len(chosen)).tolist()
    passages = tuple(
        MixturePassage(
            n, chosen[j][0], chosen[j][1].chunk_id, chosen[j][1].doc_id, chosen[j][1].text
        )
        for n, j in enumerate(order, start=1)
    )
    return Mixture(
        qid=item.qid,
        question=item.question,
        label=item.label,
        mixture_type=mixture_type,
        passages=passages,
        relevant_source=relevant.source,
        relevant_ranks=relevant.ranks,
    )


def _sample(rng: np.random.Generator, chunks: Sequence[Chunk], count: int) -> list[Chunk]:
    """``count`` distinct chunks (all of them when fewer), in the order drawn."""
    size = min(count, len(chunks))
    return [chunks[j] for j in rng.choice(len(chunks), size=size, replace=False).tolist()]
