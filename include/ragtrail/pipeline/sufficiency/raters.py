"""The configured sufficiency raters, their references and their calibration.

Raters are built from ``settings.sufficiency``: the LLM raters run on the judge model role
(:data:`~ragtrail.config.ModelRole.JUDGE`); the chunked rater wraps the zero-shot LLM rater; the
entailment rater wraps the configured entailment judge (an NLI model, else its documented
fallback, with which the rater is approximate). Tokens are counted with the embedder's tokenizer,
the unit every chunk size in ragtrail is measured in. Each rater is registered by name in
:data:`~ragtrail.judges.registry.JUDGES` (the registrations close this module).

Each rater is calibrated like every judge: Cohen's kappa against references built from the
corpus's golden items (:func:`~ragtrail.judges.sufficiency_references.golden_sufficiency_examples`)
plus the labelled file ``settings.sufficiency.reference_file`` when one is set, stored with the
rater's exact version, then read by the gate decision.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TypedDict

from ragtrail.config import ModelRole
from ragtrail.ingest.chunk import Tokenizer, as_token_counter
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.calibration import calibrate_categorical
from ragtrail.judges.contract import Judge, JudgeInput, JudgeRole
from ragtrail.judges.registry import JUDGES, CalibrationRequest, register_judge
from ragtrail.judges.sufficiency_raters import (
    SUFFICIENT,
    ChunkedSufficiencyJudge,
    ContainsAnswerJudge,
    EntailmentSufficiencyJudge,
    LlmSufficiencyJudge,
)
from ragtrail.judges.sufficiency_references import (
    SufficiencyExample,
    golden_sufficiency_examples,
    is_answerable,
    load_sufficiency_reference,
)
from ragtrail.llm.together import together
from ragtrail.pipeline.champion_judges import build_trained
from ragtrail.pipeline.judges import (
    CalibrationError,
    entailment_judge,
    gate_decision,
    ground_context,
    judge_params,
    reference_id,
    store_calibration_run,
)
from ragtrail.records import QAItem, SufficiencyRaterName
from ragtrail.runtime import Runtime
from ragtrail.storage.document_store import ChunkRecord
from ragtrail.storage.judge_store import CalibrationRecord, JudgeStore
from ragtrail.testset.qaset import load_qa_set
from ragtrail.text import text_key

log = logging.getLogger(__name__)

IRRELEVANT_PASSAGES = 3
"""Passages of other documents that make up an answerable item's irrelevant context."""


# ------------------------------------------------------------------------------ the raters


def token_counter(rt: Runtime) -> Tokenizer:
    """The token counter contexts are cut and chunked with: the embedder's tokenizer."""
    return as_token_counter(rt.embedder.tokenizer)


def sufficiency_rater(rt: Runtime, name: str) -> Judge:
    """The rater ``name`` (one of ``SUFFICIENCY_RATERS``) as the settings configure it."""
    return JUDGES.build(rt, name, role=JudgeRole.SUFFICIENCY)


class _Budget(TypedDict):
    """The context budget every rater cuts contexts to, in the embedder's tokens."""

    max_context_tokens: int
    counter: Tokenizer
    tokenizer_name: str


def _budget(rt: Runtime) -> _Budget:
    return _Budget(
        max_context_tokens=rt.settings.sufficiency.max_context_tokens,
        counter=token_counter(rt),
        tokenizer_name=rt.settings.embedding_model,
    )


def _llm_rater(rt: Runtime, *, shots: int) -> LlmSufficiencyJudge:
    params = replace(judge_params(rt), max_new_tokens=rt.settings.sufficiency.rater_max_new_tokens)
    return LlmSufficiencyJudge(rt.llm(ModelRole.JUDGE), params, shots=shots, **_budget(rt))


def _zero_shot(rt: Runtime, name: str) -> Judge:
    return _llm_rater(rt, shots=0)


def _one_shot(rt: Runtime, name: str) -> Judge:
    return _llm_rater(rt, shots=1)


def _chunked(rt: Runtime, name: str) -> Judge:
    chunk_tokens = rt.settings.sufficiency.chunk_tokens
    return ChunkedSufficiencyJudge(
        _llm_rater(rt, shots=0), chunk_tokens=chunk_tokens, **_budget(rt)
    )


def _contains_answer(rt: Runtime, name: str) -> Judge:
    return ContainsAnswerJudge(**_budget(rt))


def _entailment(rt: Runtime, name: str) -> Judge:
    settings = rt.settings.sufficiency
    return EntailmentSufficiencyJudge(
        entailment_judge(rt),
        threshold=settings.entailment_threshold,
        chunk_tokens=settings.chunk_tokens,
        **_budget(rt),
    )


def sufficiency_raters(rt: Runtime, names: Sequence[str] | None = None) -> list[Judge]:
    """The raters ``names`` (default: the configured ``settings.sufficiency.raters``), in order."""
    return [sufficiency_rater(rt, name) for name in names or rt.settings.sufficiency.raters]


# ------------------------------------------------------------------------------ references


class _LazyContexts(Mapping[str, str]):
    """qid -> context, computed on first use (None = the item has none) and kept."""

    def __init__(self, items: Sequence[QAItem], compute: Callable[[QAItem], str | None]) -> None:
        self._items = {i.qid: i for i in items}
        self._compute = compute
        self._done: dict[str, str | None] = {}

    def _get(self, qid: str) -> str | None:
        if qid not in self._done:
            item = self._items.get(qid)
            self._done[qid] = self._compute(item) if item is not None else None
        return self._done[qid]

    def __getitem__(self, qid: str) -> str:
        value = self._get(qid)
        if value is None:
            raise KeyError(qid)
        return value

    def __contains__(self, qid: object) -> bool:
        return isinstance(qid, str) and self._get(qid) is not None

    def __iter__(self) -> Iterator[str]:
        return (qid for qid in self._items if qid in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def irrelevant_context(chunks: Sequence[ChunkRecord], item: QAItem, seed: int) -> str | None:
    """:data:`IRRELEVANT_PASSAGES` seeded random ``chunks`` of documents other than the item's
    ground documents that do not contain its answer (normalised), blank-line separated; None when
    there are fewer such chunks."""
    ground = set(item.ground_doc_ids)
    needle = f" {text_key(item.answer)} "
    pool = [c for c in chunks if c.doc_id not in ground and needle not in f" {text_key(c.text)} "]
    if len(pool) < IRRELEVANT_PASSAGES:
        return None
    chosen = random.Random(f"{seed}:{item.qid}").sample(pool, IRRELEVANT_PASSAGES)
    return "\n\n".join(c.text for c in chosen)


def sufficiency_references(
    rt: Runtime, corpus: str, items: Sequence[QAItem], *, per_kind: int | None = None
) -> list[SufficiencyExample]:
    """The calibration references: golden kinds from ``items`` (``per_kind`` of each, default
    ``calibration_per_kind``, seeded) then the rows of ``settings.sufficiency.reference_file``
    when set."""
    settings = rt.settings
    ground = _LazyContexts(items, lambda item: ground_context(rt, corpus, item))
    chunks = rt.store.get_chunks(corpus)
    irrelevant = _LazyContexts(
        [i for i in items if is_answerable(i)],
        lambda item: irrelevant_context(chunks, item, settings.seed),
    )
    examples = golden_sufficiency_examples(
        items,
        ground,
        irrelevant,
        per_kind=settings.sufficiency.calibration_per_kind if per_kind is None else per_kind,
        seed=settings.seed,
    )
    if settings.sufficiency.reference_file is not None:
        examples += load_sufficiency_reference(settings.sufficiency.reference_file)
    return examples


# ------------------------------------------------------------------------------ calibrating


def calibrate_sufficiency(
    rt: Runtime, judge: Judge, examples: Sequence[SufficiencyExample]
) -> CalibrationRecord:
    """Kappa (bootstrap CI), accuracy and precision/recall of "sufficient" on ``examples``,
    stored with the rater's version and the per-item verdicts as an artifact."""
    if len(examples) < 2:
        raise CalibrationError(
            f"{judge.spec.name} needs at least 2 references, found {len(examples)}"
        )
    calibration, verdicts = calibrate_categorical(
        judge,
        [JudgeInput(question=e.question, context=e.context, answer=e.answer) for e in examples],
        [e.label for e in examples],
        positive=SUFFICIENT,
        n_resamples=rt.settings.judges.bootstrap_samples,
        seed=rt.settings.seed,
        item_ids=[e.example_id for e in examples],
    )
    details = [
        {"item": e.example_id, "kind": e.kind, "reference": e.label, **v.as_dict()}
        for e, v in zip(examples, verdicts, strict=True)
    ]
    reference = reference_id("sufficiency", [(e.example_id, e.label) for e in examples])
    return store_calibration_run(rt, judge, calibration, reference, details)


def _figures(record: CalibrationRecord) -> JsonObject:
    return {
        "metric": record.metric,
        "value": record.value,
        "ci_low": record.ci_low,
        "ci_high": record.ci_high,
        "ci_method": record.ci_method,
        "n": record.n,
        "undefined": dict(record.undefined),
    }


def calibrate_sufficiency_raters(
    rt: Runtime, corpus: str, items: Sequence[QAItem], raters: Sequence[Judge] | None = None
) -> dict[str, JsonObject]:
    """Calibrate each rater (``raters``, default the configured ones) that has no calibration
    for its version yet.

    Per rater name: ``status`` (calibrated / cached / not calibrated, with ``reason``), the
    headline figures (metric, value, CI, n) of its latest calibration, and its ``gate`` decision.
    References are built once, only when some rater needs them; model calls go through the
    cache, so a rerun costs nothing.
    """
    store = JudgeStore(rt.engine)
    chosen = sufficiency_raters(rt) if raters is None else list(raters)
    todo = [j for j in chosen if store.latest(j.spec.name, j.spec.version) is None]
    examples: list[SufficiencyExample] = []
    no_references: ValueError | None = None
    if todo:
        try:
            examples = sufficiency_references(rt, corpus, items)
        except ValueError as exc:  # bad reference files: reported on each rater
            no_references = exc

    def calibrate(judge: Judge) -> JsonObject:
        spec = judge.spec
        entry: JsonObject = {"judge": spec.ref, "approximate": spec.approximate}
        record = store.latest(spec.name, spec.version)
        if record is not None:
            entry["status"] = "cached"
        else:
            try:
                if no_references is not None:
                    raise no_references
                record = calibrate_sufficiency(rt, judge, examples)
                entry["status"] = "calibrated"
                log.info(
                    "%s calibrated: %s %s (n=%d)", spec.ref, record.metric, record.value, record.n
                )
            except ValueError as exc:  # CalibrationError included
                log.warning("%s not calibrated: %s", spec.ref, exc)
                entry.update(status="not calibrated", reason=str(exc))
        if record is not None:
            entry.update(_figures(record))
        entry["gate"] = gate_decision(rt, spec, record).as_dict()
        return entry

    # the raters' calibrations do not read each other: an endpoint gets them at once
    entries = together(
        [partial(calibrate, judge) for judge in chosen], concurrent=rt.llm_calls_overlap()
    )
    return {judge.spec.name: entry for judge, entry in zip(chosen, entries, strict=True)}


# ---------------------------------------------------------------------------- registrations


def _calibrate_raters(
    rt: Runtime, names: Sequence[str], request: CalibrationRequest
) -> list[CalibrationRecord]:
    """``ragtrail judge calibrate sufficiency.<rater>``: a filled label queue's rows, or references
    from the QA set's items (and ``settings.sufficiency.reference_file``), like the nightly
    builds them from golden sets."""
    from ragtrail.judges.label_queue import is_label_queue, read_label_queue
    from ragtrail.judges.trained import TRAINED_KINDS

    kind = TRAINED_KINDS["sufficiency"]
    if is_label_queue(request.reference, kind):
        examples = [
            SufficiencyExample(p.item_id, p.first, p.second, "", p.label, "file")
            for p in read_label_queue(request.reference, kind).pairs
        ]
    else:
        items, _ = load_qa_set(request.reference)
        examples = sufficiency_references(rt, request.corpus, items)
    return [calibrate_sufficiency(rt, sufficiency_rater(rt, name), examples) for name in names]


for _name, _build in (
    (SufficiencyRaterName.LLM, _zero_shot),
    (SufficiencyRaterName.LLM_1SHOT, _one_shot),
    (SufficiencyRaterName.CHUNKED, _chunked),
    (SufficiencyRaterName.CONTAINS_ANSWER, _contains_answer),
    (SufficiencyRaterName.ENTAILMENT, _entailment),
    (SufficiencyRaterName.TRAINED, build_trained),
):
    register_judge(_name, JudgeRole.SUFFICIENCY, _build, calibrate=_calibrate_raters)
