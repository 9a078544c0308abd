"""Training data of the citation answerer: relevance mixtures split by question and by document.

:func:`split_citation_data` partitions the corpus's *documents* into an evaluation side and a
training side, seeded:

* questions are grouped by shared ground documents (questions linked through a document stay
  together); whole groups are held out until ``eval_share`` of the questions is reached, and
  their ground documents go to the evaluation side;
* documents that are no question's ground document (pure distractors) are shared out in the same
  proportion, so held-out mixtures have distractors of their own;
* held-out mixtures are drawn only from evaluation-side documents, training mixtures only from
  training-side documents (the searches are filtered too).

So no training prompt shows a held-out question, a passage a held-out mixture shows, or any other
passage of those documents. Drawing distractors for the whole corpus first and excluding their
documents afterwards would, on a small corpus, exclude nearly every document (on a 30-document
corpus, 16 held-out questions x 3 mixture types x 6 distractors). The held-out mixtures are kept
in the split, frozen: every candidate model is scored on exactly them.

Unanswerable questions may be held out (the evaluation scores abstention on them) but are never
trained on: the reward needs relevant passages.

Each training prompt renders to the exact chat the answerer gets at evaluation time
(``CITED_ANSWER_PROMPT.render`` of the mixture's input: system message, worked example, the
question with its numbered passages), which the trainers and the transformers backend both turn
into text with the tokenizer's chat template. It keeps the mixture's relevant passage numbers for
the reward.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ragtrail.evaluate.attribution.cited_answers import CITED_ANSWER_PROMPT, CitedAnswerInput
from ragtrail.evaluate.citations.evaluator import CitationEvalConfig
from ragtrail.evaluate.citations.mixture_answers import mixture_input
from ragtrail.evaluate.citations.mixtures import (
    DEFAULT_SPEC,
    MIXTURE_TYPES,
    Mixture,
    MixtureCorpus,
    MixturePassage,
    MixtureType,
    SearchFn,
    build_mixtures,
)
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import QAItem, QuestionLabel, SearchHit
from ragtrail.train.question_split import document_groups, held_out_questions

SPLIT_FORMAT = "ragtrail-citation-split/1"


class CitationSplitError(ValueError):
    """The items cannot be split into training and evaluation data; lists every problem."""


@dataclass(frozen=True)
class CitationPrompt:
    """One training prompt: a mixture's question and numbered passages, and what the reward needs.

    :attr:`messages` is the chat exactly as the evaluation sends it (rendered from
    :attr:`answer_input` by ``CITED_ANSWER_PROMPT``); ``relevant`` holds the 1-based numbers of the
    relevant passages; ``doc_ids`` the document of each passage in numbered order (kept to prove
    the split's document rule).
    """

    qid: str
    mixture_type: str
    label: str
    question: str
    passages: tuple[str, ...]
    relevant: tuple[int, ...]
    doc_ids: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.qid}/{self.mixture_type}"

    @property
    def n_passages(self) -> int:
        return len(self.passages)

    @property
    def answer_input(self) -> CitedAnswerInput:
        return CitedAnswerInput(question=self.question, passages=list(self.passages))

    @property
    def messages(self) -> list[dict[str, str]]:
        """The chat the answerer gets for this mixture (system, worked example, the input)."""
        rendered = CITED_ANSWER_PROMPT.render(self.answer_input)
        return [{"role": m["role"], "content": m["content"]} for m in rendered]

    def as_dict(self) -> JsonObject:
        return {
            "qid": self.qid,
            "mixture_type": self.mixture_type,
            "label": self.label,
            "question": self.question,
            "passages": list(self.passages),
            "relevant": list(self.relevant),
            "doc_ids": list(self.doc_ids),
        }

    @classmethod
    def from_dict(cls, data: JsonObject) -> CitationPrompt:
        return cls(
            qid=data["qid"],
            mixture_type=data["mixture_type"],
            label=data["label"],
            question=data["question"],
            passages=tuple(data["passages"]),
            relevant=tuple(int(k) for k in data["relevant"]),
            doc_ids=tuple(data["doc_ids"]),
        )


def prompt_of(mixture: Mixture) -> CitationPrompt:
    """The training prompt of an answerable mixture (passage k is the mixture's number k)."""
    if not mixture.answerable:
        raise ValueError(f"{mixture.qid}/{mixture.mixture_type}: no relevant passage to reward")
    inp = mixture_input(mixture)
    return CitationPrompt(
        qid=mixture.qid,
        mixture_type=mixture.mixture_type,
        label=mixture.label,
        question=inp.question,
        passages=tuple(inp.passages),
        relevant=tuple(sorted(mixture.relevant_numbers)),
        doc_ids=tuple(p.doc_id for p in mixture.passages),
    )


@dataclass(frozen=True)
class CitationSplit:
    """Training prompts and frozen evaluation mixtures, split by question and document.

    ``split_version`` is a digest of the whole content (prompts, mixtures, settings): two splits
    with the same version hold the same data. ``dropped`` maps what was left out (a qid, or
    ``qid/mixture type`` for a single held-out mixture) to the reason. :meth:`to_json` / :meth:`from_json` round-trip it; :meth:`lineage` is the compact
    form stored with a trained model.
    """

    train: tuple[CitationPrompt, ...]
    eval_mixtures: tuple[Mixture, ...]
    eval_qids: tuple[str, ...]
    excluded_doc_ids: tuple[str, ...]
    settings: JsonObject
    dropped: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def split_version(self) -> str:
        digest = hashlib.sha256(_canonical(self._content()).encode()).hexdigest()
        return digest[:16]

    @property
    def eval_config(self) -> CitationEvalConfig:
        """The citation-evaluation settings the held-out mixtures were built with."""
        return CitationEvalConfig(
            mixture_spec=self.settings["mixture_spec"],
            mixture_types=tuple(self.settings["mixture_types"]),
            seed=self.settings["seed"],
            seemingly_pool=self.settings["seemingly_pool"],
            exclude_ground_documents=self.settings["exclude_ground_documents"],
        )

    def _content(self) -> JsonObject:
        return {
            "format": SPLIT_FORMAT,
            "settings": self.settings,
            "train": [p.as_dict() for p in self.train],
            "eval_mixtures": [m.as_dict() for m in self.eval_mixtures],
            "eval_qids": list(self.eval_qids),
            "excluded_doc_ids": list(self.excluded_doc_ids),
            "dropped": dict(sorted(self.dropped.items())),
            "counts": dict(self.counts),
        }

    def to_json(self) -> str:
        """The whole split as canonical JSON (equal splits give equal bytes)."""
        return _canonical({**self._content(), "split_version": self.split_version})

    @classmethod
    def from_json(cls, text: str) -> CitationSplit:
        """Read :meth:`to_json` back; refuses a file whose content does not match its version."""
        data = json.loads(text)
        if data.get("format") != SPLIT_FORMAT:
            raise CitationSplitError(f"not a citation split: format {data.get('format')!r}")
        split = cls(
            train=tuple(CitationPrompt.from_dict(p) for p in data["train"]),
            eval_mixtures=tuple(_mixture_from_dict(m) for m in data["eval_mixtures"]),
            eval_qids=tuple(data["eval_qids"]),
            excluded_doc_ids=tuple(data["excluded_doc_ids"]),
            settings=dict(data["settings"]),
            dropped=dict(data["dropped"]),
            counts={k: int(v) for k, v in data["counts"].items()},
        )
        if split.split_version != data.get("split_version"):
            raise CitationSplitError(
                f"split content does not match its version {data.get('split_version')!r} "
                f"(recomputed {split.split_version!r}): the file was edited or damaged"
            )
        return split

    def lineage(self) -> JsonObject:
        """What a trained model records of its data: version, settings, counts, the held-out
        questions and excluded documents, and the training prompt keys."""
        return {
            "split_version": self.split_version,
            "settings": dict(self.settings),
            "counts": dict(self.counts),
            "eval_qids": list(self.eval_qids),
            "excluded_doc_ids": list(self.excluded_doc_ids),
            "train_keys": [p.key for p in self.train],
        }


def split_citation_data(
    items: Sequence[QAItem],
    corpus: MixtureCorpus,
    *,
    eval_share: float = 0.25,
    seed: int = 13,
    mixture_spec: str = DEFAULT_SPEC,
    mixture_types: Sequence[MixtureType] = MIXTURE_TYPES,
    seemingly_pool: int = 10,
    exclude_ground_documents: bool = True,
) -> CitationSplit:
    """Split ``items`` into training prompts and held-out mixtures (see the module docstring).

    At least one group of questions is held out and at least one kept; raises
    :class:`CitationSplitError` when that is impossible (fewer than two document groups) or
    when no training prompt survives the document rule.
    """
    config = CitationEvalConfig(
        mixture_spec=mixture_spec,
        mixture_types=tuple(mixture_types),
        seed=seed,
        seemingly_pool=seemingly_pool,
        exclude_ground_documents=exclude_ground_documents,
    )
    _check_items(items, eval_share)
    groups = document_groups(items)
    if len(groups) < 2:
        raise CitationSplitError(
            f"cannot split {len(items)} question(s): all share ground documents (one group), so "
            "holding any out leaves nothing to train on"
        )
    rng = random.Random(seed)
    eval_ids = held_out_questions(groups, len(items), eval_share, rng)
    eval_items = [i for i in items if i.qid in eval_ids]
    rest = [i for i in items if i.qid not in eval_ids]

    all_docs = sorted({c.doc_id for c in corpus.chunks})
    grounds = {d for i in items for d in i.ground_doc_ids}
    free = [d for d in all_docs if d not in grounds]
    rng.shuffle(free)
    eval_docs = {d for i in eval_items for d in i.ground_doc_ids}
    eval_docs |= set(free[: round(eval_share * len(free))])
    train_docs = set(all_docs) - eval_docs

    build = {
        "spec": config.spec,
        "seed": seed,
        "types": tuple(mixture_types),
        "seemingly_pool": seemingly_pool,
        "exclude_ground_documents": exclude_ground_documents,
    }
    held_out = build_mixtures(eval_items, _restricted(corpus, eval_docs), **build)
    dropped = {s.qid: f"held out but no mixture: {s.reason}" for s in held_out.skipped}
    eval_mixtures = tuple(m for m in held_out.mixtures if m.passages)
    for m in held_out.mixtures:
        if not m.passages:  # an unanswerable question on a small evaluation side
            dropped[f"{m.qid}/{m.mixture_type}"] = "held-out mixture without any passage"
    trainable = []
    for item in rest:
        shared = sorted(set(item.ground_doc_ids) & eval_docs)
        if item.label == QuestionLabel.UNANSWERABLE:
            dropped[item.qid] = "unanswerable: no relevant passage to reward"
        elif shared:  # only a ground document missing from the corpus gets here
            dropped[item.qid] = f"shares documents {shared} with the evaluation side"
        else:
            trainable.append(item)
    trained = build_mixtures(trainable, _restricted(corpus, train_docs), **build)
    for skipped in trained.skipped:
        dropped[skipped.qid] = f"no mixture: {skipped.reason}"
    prompts = tuple(prompt_of(m) for m in trained.mixtures if m.answerable)
    shown = {p.doc_id for m in eval_mixtures for p in m.passages}
    excluded = eval_docs | shown
    leaks = [p.key for p in prompts if excluded & set(p.doc_ids)]
    if leaks or shown - eval_docs:  # cannot happen with restricted corpora; a guard
        raise CitationSplitError(f"the split leaks documents: {leaks or sorted(shown - eval_docs)}")
    if not prompts:
        raise CitationSplitError(
            f"no training prompt left: {len(rest)} question(s) outside the evaluation side, "
            f"dropped: {dict(sorted(dropped.items()))}"
        )
    counts = {
        "items": len(items),
        "eval_items": len(eval_items),
        "eval_mixtures": len(eval_mixtures),
        "eval_items_skipped": len(held_out.skipped),
        "train_items": len({p.qid for p in prompts}),
        "train_prompts": len(prompts),
        "dropped_items": len(dropped),
        "eval_documents": len(eval_docs),
        "train_documents": len(train_docs),
    }
    settings = {
        "eval_share": eval_share,
        "seed": seed,
        "mixture_spec": config.mixture_spec,
        "mixture_types": list(config.mixture_types),
        "seemingly_pool": seemingly_pool,
        "exclude_ground_documents": exclude_ground_documents,
        "prompt": f"{CITED_ANSWER_PROMPT.name}@{CITED_ANSWER_PROMPT.version}",
    }
    return CitationSplit(
        train=prompts,
        eval_mixtures=eval_mixtures,
        eval_qids=tuple(sorted(eval_ids)),
        excluded_doc_ids=tuple(sorted(excluded)),
        settings=settings,
        dropped=dropped,
        counts=counts,
    )


def _check_items(items: Sequence[QAItem], eval_share: float) -> None:
    problems = []
    if not 0.0 < eval_share < 1.0:
        problems.append(f"eval_share must be in (0, 1), got {eval_share}")
    if len(items) < 2:
        problems.append(f"need at least two questions, got {len(items)}")
    seen: set[str] = set()
    for row, item in enumerate(items, start=1):
        if item.qid in seen:
            problems.append(f"row {row}: qid {item.qid!r} repeats")
        seen.add(item.qid)
        if item.label != QuestionLabel.UNANSWERABLE and not item.ground_doc_ids:
            problems.append(f"row {row} ({item.qid}): answerable item without ground documents")
    if problems:
        raise CitationSplitError(
            f"cannot split citation data, {len(problems)} problem(s):\n  " + "\n  ".join(problems)
        )


def _restricted(corpus: MixtureCorpus, documents: set[str]) -> MixtureCorpus:
    """``corpus`` reduced to the chunks of ``documents``, its searches filtered to match."""
    kept = [c for c in corpus.chunks if c.doc_id in documents]
    hidden = len(corpus.chunks) - len(kept)

    def filtered(search: SearchFn) -> SearchFn:
        def run(questions: Sequence[str], k: int) -> list[list[SearchHit]]:
            ranked = search(questions, k + hidden)
            return [[h for h in hits if h.doc_id in documents][:k] for hits in ranked]

        return run

    return MixtureCorpus(kept, filtered(corpus.dense_search), filtered(corpus.hybrid_search))


def _mixture_from_dict(data: JsonObject) -> Mixture:
    return Mixture(
        qid=data["qid"],
        question=data["question"],
        label=data["label"],
        mixture_type=data["mixture"],
        passages=tuple(
            MixturePassage(p["number"], p["kind"], p["chunk_id"], p["doc_id"], p["text"])
            for p in data["passages"]
        ),
        relevant_source=data["relevant_source"],
        relevant_ranks=tuple(data["relevant_ranks"]),
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
