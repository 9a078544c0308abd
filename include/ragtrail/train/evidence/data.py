"""Training data of the evidence extractor: questions with their retrieved passages, split by
question and by document (as the citation model's data is).

:func:`split_evidence_data` holds out whole groups of questions that share ground documents
(:mod:`ragtrail.train.question_split`) until ``eval_share`` of them is reached. Each question is
given the top ``k`` chunks of the hybrid search; the held-out questions first, and every
document they show (their ground documents and every retrieved chunk's document) becomes
held-out too. Training questions then keep only chunks of other documents. So no training prompt
shows a held-out question, a passage a held-out question shows, or any other chunk of those
documents. Unanswerable questions may be held out (the gate scores abstention on them) but are
never trained on: helpfulness needs a gold answer. A training question left without a chunk is
dropped with the reason, never silently.

The split is stored as JSON with a content version, travels with the model's lineage, and its
held-out part is the frozen item set the promotion gate compares champion and challenger on.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from ragtrail.evaluate.attribution.passage_corpus import CorpusPassage
from ragtrail.evaluate.evidence.extraction import EVIDENCE_PROMPT, EvidenceInput
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.backends.base import Message
from ragtrail.records import QAItem
from ragtrail.train.question_split import document_groups, held_out_questions

SPLIT_FORMAT = "ragtrail-evidence-split/1"
SEARCH_DEPTH = 4
"""Chunks searched per chunk kept, so that filtering held-out documents still leaves ``k``."""

Search = Callable[[list[str], int], list[list[CorpusPassage]]]


class EvidenceSplitError(ValueError):
    """The items cannot be split into training and held-out data."""


@dataclass(frozen=True)
class EvidencePrompt:
    """One question with the numbered passages the extractor reads, and what scoring needs."""

    qid: str
    label: str
    question: str
    gold: str
    passages: tuple[str, ...]
    doc_ids: tuple[str, ...]

    def messages(self) -> tuple[Message, ...]:
        """The chat exactly as the extractor gets it."""
        return tuple(EVIDENCE_PROMPT.render(self.evidence_input()))

    def evidence_input(self) -> EvidenceInput:
        return EvidenceInput(question=self.question, passages=list(self.passages))

    @classmethod
    def from_dict(cls, data: JsonObject) -> EvidencePrompt:
        return cls(
            **{**data, "passages": tuple(data["passages"]), "doc_ids": tuple(data["doc_ids"])}
        )


@dataclass(frozen=True)
class EvidenceSplit:
    """Training prompts, frozen held-out prompts, and how they were made."""

    train: tuple[EvidencePrompt, ...]
    held_out: tuple[EvidencePrompt, ...]
    held_out_docs: tuple[str, ...]
    dropped: dict[str, str]
    settings: JsonObject = field(default_factory=dict)

    def _content(self) -> JsonObject:
        return {
            "format": SPLIT_FORMAT,
            "settings": self.settings,
            "train": [asdict(p) for p in self.train],
            "held_out": [asdict(p) for p in self.held_out],
            "held_out_docs": list(self.held_out_docs),
            "dropped": dict(sorted(self.dropped.items())),
        }

    @property
    def split_version(self) -> str:
        blob = json.dumps(self._content(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    @property
    def counts(self) -> dict[str, int]:
        return {
            "train_prompts": len(self.train),
            "eval_items": len(self.held_out),
            "dropped": len(self.dropped),
        }

    def to_json(self) -> str:
        return json.dumps({**self._content(), "split_version": self.split_version}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> EvidenceSplit:
        data = json.loads(text)
        if data.get("format") != SPLIT_FORMAT:
            raise EvidenceSplitError(f"not an evidence split: format {data.get('format')!r}")
        split = cls(
            train=tuple(EvidencePrompt.from_dict(p) for p in data["train"]),
            held_out=tuple(EvidencePrompt.from_dict(p) for p in data["held_out"]),
            held_out_docs=tuple(data["held_out_docs"]),
            dropped=dict(data["dropped"]),
            settings=data["settings"],
        )
        if split.split_version != data.get("split_version"):
            raise EvidenceSplitError("the split's content does not match its version")
        return split

    def lineage(self) -> JsonObject:
        """What a trained version records of its data (no passage text)."""
        return {
            "format": SPLIT_FORMAT,
            "split_version": self.split_version,
            "settings": self.settings,
            **self.counts,
            "held_out_questions": sorted(p.qid for p in self.held_out),
            "held_out_docs": list(self.held_out_docs),
            "train_questions": [p.qid for p in self.train],
            "dropped": dict(sorted(self.dropped.items())),
        }


def split_evidence_data(
    items: Sequence[QAItem], search: Search, *, k: int, eval_share: float, seed: int
) -> EvidenceSplit:
    """Split ``items`` (see the module docstring); ``search(questions, depth)`` is the hybrid
    search over the corpus."""
    if len({i.qid for i in items}) != len(items):
        raise EvidenceSplitError("the QA sets repeat a qid")
    groups = document_groups(items)
    if len(groups) < 2:
        raise EvidenceSplitError(
            f"cannot split {len(items)} question(s): all share ground documents, so holding any "
            "out leaves nothing to train on"
        )
    held_ids = held_out_questions(groups, len(items), eval_share, random.Random(seed))
    held = [i for i in items if i.qid in held_ids]
    rest = [i for i in items if i.qid not in held_ids]
    hits = search([i.question for i in (*held, *rest)], k * SEARCH_DEPTH)
    held_hits, rest_hits = hits[: len(held)], hits[len(held) :]

    held_prompts = [_prompt(item, found[:k]) for item, found in zip(held, held_hits, strict=True)]
    blocked = {d for i in held for d in i.ground_doc_ids}
    blocked |= {d for p in held_prompts for d in p.doc_ids}
    train: list[EvidencePrompt] = []
    dropped: dict[str, str] = {}
    for item, found in zip(rest, rest_hits, strict=True):
        if not item.gold:
            dropped[item.qid] = (
                "no gold answer (unanswerable, or its answer is empty): helpfulness is undefined"
            )
            continue
        allowed = [p for p in found if p.doc_id not in blocked][:k]
        if not allowed:
            dropped[item.qid] = "every retrieved chunk belongs to a held-out document"
            continue
        train.append(_prompt(item, allowed))
    if not train:
        raise EvidenceSplitError(
            f"no training prompt is left ({len(dropped)} dropped: "
            + "; ".join(f"{q}: {r}" for q, r in sorted(dropped.items())[:5])
            + ")"
        )
    return EvidenceSplit(
        train=tuple(train),
        held_out=tuple(held_prompts),
        held_out_docs=tuple(sorted(blocked)),
        dropped=dropped,
        settings={"eval_share": eval_share, "seed": seed, "k": k},
    )


def _prompt(item: QAItem, passages: Sequence[CorpusPassage]) -> EvidencePrompt:
    return EvidencePrompt(
        qid=item.qid,
        label=str(item.label),
        question=item.question,
        gold=item.gold,
        passages=tuple(p.text for p in passages),
        doc_ids=tuple(p.doc_id for p in passages),
    )
