"""The configured judges, their calibration against human references, and who may reject.

The judges a night uses are built here from the settings (the labeller and one critique judge per
criterion on their model roles; the entailment judge from ``nli_model`` or its documented
fallback) and registered by name in :data:`~ragtrail.judges.registry.JUDGES`, with how each is
calibrated (the registrations close this module). Calibration measures a judge on labelled references and stores the result with the
judge's exact version (:class:`~ragtrail.storage.judge_store.JudgeStore`); the gate decision then
reads the latest calibration of that version against the configured bar:

* the labeller is calibrated on golden QA sets — each item's context is the ground chunk that
  holds its answer (or, for unanswerable items, the named ground document's chunk closest to the
  question) — with Cohen's kappa against the human label;
* each critique judge on seeded contrasts (:mod:`ragtrail.judges.contrasts`) built from golden
  items and accepted test-set items;
* an entailment judge on (premise, hypothesis, label) references such as the HAGRID
  attributable flags.

A calibration whose verdicts mostly failed (more than ``judges.max_failed_share``: a dead
endpoint, a model that cannot follow the verdict format) is not stored, since it would stand
for the judge's version until the version changes; it raises
:class:`~ragtrail.failures.EvaluationFailedError` (a ValueError, so the nightly reports the judge
as not calibrated and it advises).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ragtrail import jsonsafe
from ragtrail.artifact_keys import calibration_key
from ragtrail.config import ModelRole
from ragtrail.failures import FailureCount, check_failures, one_line
from ragtrail.generate.critiques import CRITERIA, LlmCritiqueJudge
from ragtrail.generate.judges import LABELLER, criterion_of, critique_judge_name
from ragtrail.generate.labeller import LlmLabellerJudge
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.calibration import (
    CategoricalCalibration,
    calibrate_categorical,
    calibrate_contrasts,
)
from ragtrail.judges.contract import SUPPORTED, Judge, JudgeInput, JudgeRole, JudgeSpec
from ragtrail.judges.contrasts import ContrastSource, build_contrasts
from ragtrail.judges.gate import GateDecision, bar_for, decide, default_bars
from ragtrail.judges.recording import Calibration, store_calibration
from ragtrail.judges.registry import JUDGES, CalibrationRequest, register_judge
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.together import together
from ragtrail.pipeline.champion_judges import build_trained
from ragtrail.records import EntailmentJudgeName, ModelSpec, QAItem, QuestionLabel, sha256_json
from ragtrail.runtime import Runtime
from ragtrail.storage.document_store import ChunkRecord
from ragtrail.storage.judge_store import CalibrationRecord, JudgeStore
from ragtrail.testset.qaset import load_qa_set
from ragtrail.text import text_key

log = logging.getLogger(__name__)


class CalibrationError(ValueError):
    """A calibration that cannot run: unknown judge, missing reference, too few items."""


# ------------------------------------------------------------------------------ the judges


def judge_params(rt: Runtime) -> GenerationParams:
    """The decoding settings the generation judges run with (the seed is not part of a version)."""
    return GenerationParams(temperature=rt.settings.generation.temperature, seed=rt.settings.seed)


TRAINED_LABELLER = "labeller.trained"


def labeller_name(rt: Runtime) -> str:
    """The configured labeller: ``labeller`` (the LLM) or ``labeller.trained``."""
    return rt.settings.judges.labeller


def labeller_for(rt: Runtime) -> LLMClient | Judge:
    """What labels generated questions: the trained labeller when configured, else the client
    the LLM labeller asks (see :func:`~ragtrail.generate.labeller.label_candidates`)."""
    if labeller_name(rt) == TRAINED_LABELLER:
        return build_trained(rt, TRAINED_LABELLER)
    return rt.llm(ModelRole.LABELLER)


def labeller_judge(rt: Runtime) -> Judge:
    """The configured labeller as a judge."""
    return JUDGES.build(rt, labeller_name(rt), role=JudgeRole.LABELLER)


def critique_judge(rt: Runtime, criterion: str) -> LlmCritiqueJudge:
    return LlmCritiqueJudge(criterion, rt.llm(ModelRole.CRITIC), judge_params(rt))


def generation_judges(rt: Runtime) -> list[Judge]:
    """The judges whose verdicts can reject test-set items: the labeller and the critiques."""
    return [labeller_judge(rt), *(critique_judge(rt, name) for name in CRITERIA)]


def configured_entailment(rt: Runtime) -> str:
    """The judge ``entailment`` stands for: the NLI model when ``nli_model`` is set, else the
    documented fallback ``judges.entailment_fallback``."""
    if rt.settings.nli_model:
        return EntailmentJudgeName.NLI
    return rt.settings.judges.entailment_fallback


def entailment_judge(rt: Runtime, name: str = EntailmentJudgeName.CONFIGURED) -> Judge:
    """An entailment judge by name; ``entailment`` is the configured one."""
    return JUDGES.build(rt, name, role=JudgeRole.ENTAILMENT)


def _nli_judge(rt: Runtime, name: str) -> Judge:
    from ragtrail.judges.nli import load_nli_judge

    settings = rt.settings
    if not settings.nli_model:
        raise CalibrationError(
            "no NLI model is configured (nli_model is none; none exists offline): set "
            "RAGTRAIL_NLI_MODEL to an HF id, local path or s3:// URI, or use "
            f"{EntailmentJudgeName.EMBEDDING} (approximate) or {EntailmentJudgeName.LLM}"
        )
    return load_nli_judge(
        ModelSpec.parse_nli(settings.nli_model).model,
        cache_dir=settings.resolved_model_cache_dir,
        device=settings.device,
        s3_endpoint_url=settings.s3_endpoint_url,
    )


def _embedding_judge(rt: Runtime, name: str) -> Judge:
    from ragtrail.judges.embedding_entailment import (
        DEFAULT_EMBEDDING_THRESHOLD,
        EmbeddingEntailmentJudge,
    )

    threshold = rt.settings.judges.embedding_entailment_threshold
    return EmbeddingEntailmentJudge(
        rt.cached_embedder,  # premises and hypotheses recur night after night
        threshold=DEFAULT_EMBEDDING_THRESHOLD if threshold is None else threshold,
        model_id=rt.embedder_identity,
    )


def _llm_entailment_judge(rt: Runtime, name: str) -> Judge:
    from ragtrail.judges.llm_entailment import LLMEntailmentJudge

    return LLMEntailmentJudge(rt.llm(ModelRole.JUDGE))


def _configured_entailment_judge(rt: Runtime, name: str) -> Judge:
    return entailment_judge(rt, configured_entailment(rt))


# --------------------------------------------------------------------------- gate decisions


def gate_decisions(rt: Runtime, judges: Iterable[Judge]) -> dict[str, GateDecision]:
    """Judge name -> gate or advise, from the latest calibration of the judge's exact version."""
    store = JudgeStore(rt.engine)
    return {
        j.spec.name: gate_decision(rt, j.spec, store.latest(j.spec.name, j.spec.version))
        for j in judges
    }


def generation_gates(rt: Runtime) -> dict[str, JsonObject]:
    """The gate decision of each generation judge (labeller, critiques) from its stored
    calibration, by judge name: the policy a generation run applies."""
    return {name: d.as_dict() for name, d in gate_decisions(rt, generation_judges(rt)).items()}


def gate_decision(
    rt: Runtime, spec: JudgeSpec, calibration: CalibrationRecord | None
) -> GateDecision:
    """Gate or advise for ``spec`` given ``calibration``, under the configured bars."""
    return decide(spec, calibration, bar_for(spec, default_bars(rt.settings.judges)))


# ------------------------------------------------------------------------------- references


def ground_context(rt: Runtime, corpus: str, item: QAItem) -> str | None:
    """The text a labeller should see for a golden item (None when the corpus has none of it).

    Ground chunk ids name it directly. Otherwise the ground documents' chunks are searched: for
    an answerable item the chunk that contains the answer verbatim (after folding), else the one
    closest to question + answer by embedding; for an unanswerable item the chunk closest to the
    question (the document is on topic but must not answer it).
    """
    return ground_contexts(rt, corpus, [item])[0]


def ground_contexts(rt: Runtime, corpus: str, items: Sequence[QAItem]) -> list[str | None]:
    """:func:`ground_context` of each item, the items that need the embedding search embedded
    together (one batch instead of one model call per item)."""
    out: list[str | None] = []
    searches: list[tuple[int, list[ChunkRecord], str]] = []
    for item in items:
        found = _named_or_holding(rt, corpus, item)
        if isinstance(found, tuple):
            searches.append((len(out), *found))
            out.append(None)
        else:
            out.append(found)
    if searches:
        # Chunks as the index embedded them (headings and text): the ingest's vectors, read
        # from the embedding cache; the probes are embedded together.
        texts = list(dict.fromkeys(_indexed(c) for _, chunks, _ in searches for c in chunks))
        encoded = rt.cached_embedder.encode_chunks(texts + [p for _, _, p in searches])
        vectors = dict(zip(texts, encoded, strict=False))
        for (index, chunks, _), probe in zip(searches, encoded[len(texts) :], strict=True):
            scores = np.stack([vectors[_indexed(c)] for c in chunks]) @ probe
            out[index] = chunks[int(np.argmax(scores))].text
    return out


def _indexed(chunk: ChunkRecord) -> str:
    return chunk.to_chunk("und").index_text()


def _named_or_holding(
    rt: Runtime, corpus: str, item: QAItem
) -> str | tuple[list[ChunkRecord], str] | None:
    """The item's ground text when its chunk ids name it or a ground chunk holds its answer;
    None when the corpus has none of its documents; else the chunks to search and the probe."""
    if item.ground_chunk_ids:
        texts = rt.store.get_chunk_texts(corpus, item.ground_chunk_ids)
        found = [texts[c] for c in item.ground_chunk_ids if c in texts]
        if found:
            return "\n\n".join(found)
    chunks = [c for d in item.ground_doc_ids for c in rt.store.get_chunks(corpus, d)]
    if not chunks:
        return None
    answerable = item.label != QuestionLabel.UNANSWERABLE and item.answer.strip()
    if answerable:
        needle = text_key(item.answer)
        holding = [c for c in chunks if needle and needle in text_key(c.text)]
        if holding:
            return holding[0].text
    return chunks, f"{item.question} {item.answer}" if answerable else item.question


def stratified_sample(items: Sequence[QAItem], per_label: int, seed: int) -> list[QAItem]:
    """Up to ``per_label`` items of each label, drawn with a seeded generator, in label order."""
    rng = random.Random(seed)
    out: list[QAItem] = []
    for label in QuestionLabel:
        pool = [i for i in items if i.label == label]
        out += rng.sample(pool, min(per_label, len(pool)))
    return out


@dataclass(frozen=True)
class LabelledExample:
    item_id: str
    context: str
    question: str
    label: str


def labeller_examples(
    rt: Runtime, corpus: str, items: Sequence[QAItem], per_label: int, seed: int
) -> tuple[list[LabelledExample], list[str]]:
    """The labeller's calibration examples from QA items, and the items left out (with why)."""
    examples, skipped = [], []
    chosen = stratified_sample(items, per_label, seed)
    for item, context in zip(chosen, ground_contexts(rt, corpus, chosen), strict=True):
        if context is None:
            skipped.append(f"{item.qid}: none of its ground chunks/documents is in {corpus!r}")
            continue
        examples.append(LabelledExample(item.qid, context, item.question, item.label))
    return examples, skipped


def contrast_sources(
    rt: Runtime, corpus: str, items: Sequence[QAItem], accepted: Sequence[Any] = ()
) -> list[ContrastSource]:
    """Answerable golden items (context = their ground chunk) and accepted test-set items."""
    sources = []
    answerable = [i for i in items if i.label != QuestionLabel.UNANSWERABLE and i.answer.strip()]
    for item, context in zip(answerable, ground_contexts(rt, corpus, answerable), strict=True):
        if context is not None:
            doc = item.ground_doc_ids[0] if item.ground_doc_ids else item.ground_chunk_ids[0]
            sources.append(
                ContrastSource(f"golden:{item.qid}", doc, context, item.question, item.answer)
            )
    for cand in accepted:
        if cand.effective_label != QuestionLabel.UNANSWERABLE and cand.answer:
            sources.append(
                ContrastSource(
                    f"testset:{cand.candidate_id}",
                    cand.context.doc_id,
                    cand.context.text,
                    cand.question,
                    cand.answer,
                )
            )
    return sources


def reference_id(kind: str, payload: Any) -> str:
    """``"<kind>:<12 hex>"``: what a calibration was measured on, by content."""
    return f"{kind}:{sha256_json(payload)[:12]}"


# ------------------------------------------------------------------------------ calibrating


def store_calibration_run(
    rt: Runtime,
    judge: Judge,
    calibration: Calibration,
    reference: str,
    details: list[JsonObject],
) -> CalibrationRecord:
    """Keep the per-item verdicts as an artifact and the figures as a calibration row; nothing
    is kept when more than ``judges.max_failed_share`` of the verdicts failed."""
    spec = judge.spec
    failed = (
        calibration.n_failed
        if isinstance(calibration, CategoricalCalibration)
        else calibration.failed
    )
    check_failures(
        f"calibration of {spec.ref}",
        [FailureCount("verdicts", failed, calibration.n, _first_error(details))],
        max_share=rt.settings.judges.max_failed_share,
        setting="judges.max_failed_share",
    )
    uri = rt.artifacts.put_bytes(
        calibration_key(spec.name, spec.version, reference),
        jsonsafe.dumps({"spec": spec.as_dict(), "items": details}, "calibration").encode(),
    )
    return store_calibration(
        JudgeStore(rt.engine), spec, calibration, reference=reference, details_uri=uri
    )


def _first_error(details: Sequence[JsonObject]) -> str | None:
    """The first error among per-item verdicts (a pair's verdicts sit under intact/perturbed)."""
    for item in details:
        for verdict in (item, item.get("intact"), item.get("perturbed")):
            if isinstance(verdict, dict) and verdict.get("error"):
                return one_line(str(verdict["error"]))
    return None


def calibrate_labeller(
    rt: Runtime,
    corpus: str,
    items: Sequence[QAItem],
    *,
    per_label: int | None = None,
    judge: Judge | None = None,
) -> CalibrationRecord:
    """Cohen's kappa (bootstrap CI), accuracy and confusion of a labeller (default: the
    configured one) on golden items."""
    settings = rt.settings
    judge = judge or labeller_judge(rt)
    examples, skipped = labeller_examples(
        rt, corpus, items, per_label or settings.judges.labeller_items_per_label, settings.seed
    )
    if len(examples) < 2:
        raise CalibrationError(
            f"the labeller needs labelled examples with their ground context in {corpus!r}; "
            f"found {len(examples)} ({'; '.join(skipped[:5]) or 'no items'})"
        )
    if skipped:
        log.warning("labeller calibration left out %d items: %s", len(skipped), skipped[:5])
    return calibrate_labeller_on(rt, judge, examples)


def calibrate_labeller_on(
    rt: Runtime, judge: Judge, examples: Sequence[LabelledExample]
) -> CalibrationRecord:
    """Calibrate a labeller on ``examples`` (golden items with their context, or a filled label
    queue) and store the result."""
    settings = rt.settings
    calibration, verdicts = calibrate_categorical(
        judge,
        [JudgeInput(context=e.context, question=e.question) for e in examples],
        [e.label for e in examples],
        n_resamples=settings.judges.bootstrap_samples,
        seed=settings.seed,
        item_ids=[e.item_id for e in examples],
    )
    details = [
        {"item": e.item_id, "reference": e.label, **v.as_dict()}
        for e, v in zip(examples, verdicts, strict=True)
    ]
    reference = reference_id("qa", [(e.item_id, e.question, e.label) for e in examples])
    return store_calibration_run(rt, judge, calibration, reference, details)


def calibrate_critique(
    rt: Runtime, criterion: str, sources: Sequence[ContrastSource], *, n: int | None = None
) -> CalibrationRecord:
    """How often the critique rates an intact item above its perturbed twin (Wilson CI)."""
    settings = rt.settings
    judge = critique_judge(rt, criterion)
    pairs = build_contrasts(
        criterion,
        sources,
        n=n or settings.judges.contrast_pairs_per_criterion,
        seed=settings.seed,
    )
    if not pairs:
        raise CalibrationError(f"no contrast pairs could be built for {criterion!r}")
    calibration, verdicts = calibrate_contrasts(judge, pairs, seed=settings.seed)
    details = [
        {
            "source": p.source_id,
            "perturbation": p.perturbation,
            "intact": a.as_dict(),
            "perturbed": b.as_dict(),
        }
        for p, (a, b) in zip(pairs, verdicts, strict=True)
    ]
    reference = reference_id("contrasts", [(p.source_id, p.perturbation) for p in pairs])
    return store_calibration_run(rt, judge, calibration, reference, details)


def calibrate_entailment(
    rt: Runtime, name: str, reference_path: Path, *, sample: int | None = None
) -> CalibrationRecord:
    """Kappa, accuracy and precision/recall of "supported" on (premise, hypothesis, label) rows.

    The reference is a JSONL of premise/hypothesis/label rows, a filled label queue, or the
    HAGRID CSV (its answer sentences' human ``attributable`` flags against the quotes they
    cite); ``sample`` draws a
    seeded subset of that many rows.
    """
    from ragtrail.judges.reference_files import entailment_examples

    judge = entailment_judge(rt, name)
    examples = entailment_examples(reference_path)
    if sample is not None and sample < len(examples):
        examples = random.Random(rt.settings.seed).sample(examples, sample)
    calibration, verdicts = calibrate_categorical(
        judge,
        [JudgeInput(premise=e.premise, hypothesis=e.hypothesis) for e in examples],
        [e.label for e in examples],
        positive=SUPPORTED,
        n_resamples=rt.settings.judges.bootstrap_samples,
        seed=rt.settings.seed,
        item_ids=[e.source_id for e in examples],
    )
    details = [
        {"item": e.source_id, "reference": e.label, **v.as_dict()}
        for e, v in zip(examples, verdicts, strict=True)
    ]
    reference = reference_id("entailment", [(e.source_id, e.label) for e in examples])
    return store_calibration_run(rt, judge, calibration, reference, details)


# --------------------------------------------------------------------------- the nightly


def golden_items(rt: Runtime, corpus: str) -> tuple[list[QAItem], list[str]]:
    """The items of every golden set's latest version for ``corpus`` (one copy of each question),
    and those versions."""
    from ragtrail.testset.golden import GoldenSetStore

    store = GoldenSetStore(rt.engine)
    versions = store.latest(corpus)
    items: dict[str, QAItem] = {}
    for version in versions:
        for item in store.items(version.version):
            items.setdefault(text_key(item.question), item)
    return list(items.values()), [v.version for v in versions]


def accepted_items(rt: Runtime, corpus: str) -> list[Any]:
    """The items of the corpus's latest generated test-set version (none before the first)."""
    from ragtrail.testset.store import TestSetStore

    store = TestSetStore(rt.engine)
    latest = store.latest_version(corpus)
    return store.version_items(latest["version"]) if latest else []


def uncalibrated_judges(rt: Runtime) -> list[str]:
    """The generation judges with no calibration for their version yet (what
    :func:`calibrate_missing` would calibrate), by name; no model is called."""
    store = JudgeStore(rt.engine)
    return [
        j.spec.name
        for j in generation_judges(rt)
        if store.latest(j.spec.name, j.spec.version) is None
    ]


def calibrate_missing(rt: Runtime, corpus: str) -> dict[str, JsonObject]:
    """Calibrate each generation judge that has no calibration for its version yet.

    References: the corpus's golden sets (labeller and contrasts) and its accepted test-set items
    (contrasts). A judge that cannot be calibrated (no golden set, too few items) is reported with
    the reason and advises. Model calls go through the cache, so a rerun costs nothing.
    """
    store = JudgeStore(rt.engine)
    items, versions = golden_items(rt, corpus)
    report: dict[str, JsonObject] = {}
    todo: list[Judge] = []
    for judge in generation_judges(rt):
        spec = judge.spec
        if store.latest(spec.name, spec.version) is not None:
            report[spec.name] = {"status": "cached", "judge": spec.ref}
        else:
            report[spec.name] = {}  # keeps the judges' order
            todo.append(judge)
    building = threading.Lock()
    built: list[list[ContrastSource] | ValueError] = []

    def sources() -> list[ContrastSource]:
        """The critiques' contrast sources, built once by the first critique that needs them
        (the labeller's calibration does not wait for them)."""
        with building:
            if not built:
                try:
                    built.append(contrast_sources(rt, corpus, items, accepted_items(rt, corpus)))
                except ValueError as exc:  # reported on each critique, as the labeller goes on
                    built.append(exc)
        if isinstance(built[0], ValueError):
            raise built[0]
        return built[0]

    def calibrate(judge: Judge) -> JsonObject:
        spec = judge.spec
        try:
            if spec.role is JudgeRole.LABELLER:
                if not items:
                    raise CalibrationError(
                        f"corpus {corpus!r} has no golden QA set (ragtrail qaset add)"
                    )
                record = calibrate_labeller(rt, corpus, items)
            else:
                record = calibrate_critique(rt, str(criterion_of(spec.name)), sources())
        except ValueError as exc:  # CalibrationError included
            log.warning("%s not calibrated: %s", spec.ref, exc)
            return {"status": "not calibrated", "judge": spec.ref, "reason": str(exc)}
        log.info("%s calibrated: %s %s on n=%d", spec.ref, record.metric, record.value, record.n)
        return {
            "status": "calibrated",
            "judge": spec.ref,
            "metric": record.metric,
            "value": record.value,
            "n": record.n,
            "golden_versions": versions,
        }

    # The judges' calibrations are independent: on an HTTP endpoint they run at once.
    entries = together(
        [partial(calibrate, judge) for judge in todo],
        concurrent=bool(todo) and rt.llm(ModelRole.CRITIC).concurrent,
    )
    for judge, entry in zip(todo, entries, strict=True):
        report[judge.spec.name] = entry
    return report


# ---------------------------------------------------------------------------- registrations


def _labeller(rt: Runtime, name: str) -> Judge:
    return LlmLabellerJudge(rt.llm(ModelRole.LABELLER), judge_params(rt))


def _critique(rt: Runtime, name: str) -> Judge:
    return critique_judge(rt, str(criterion_of(name)))


def _calibrate_labeller(
    rt: Runtime, names: Sequence[str], request: CalibrationRequest
) -> list[CalibrationRecord]:
    from ragtrail.judges.label_queue import is_label_queue, read_label_queue
    from ragtrail.judges.trained import TRAINED_KINDS

    kind = TRAINED_KINDS["labeller"]
    if is_label_queue(request.reference, kind):
        examples = [
            LabelledExample(p.item_id, p.second, p.first, p.label)
            for p in read_label_queue(request.reference, kind).pairs
        ]
        return [calibrate_labeller_on(rt, JUDGES.build(rt, n), examples) for n in names]
    items, _ = load_qa_set(request.reference)
    return [
        calibrate_labeller(
            rt, request.corpus, items, per_label=request.per_label, judge=JUDGES.build(rt, name)
        )
        for name in names
    ]


def _calibrate_critiques(
    rt: Runtime, names: Sequence[str], request: CalibrationRequest
) -> list[CalibrationRecord]:
    items, _ = load_qa_set(request.reference)
    sources = contrast_sources(rt, request.corpus, items)
    return [calibrate_critique(rt, str(criterion_of(n)), sources, n=request.pairs) for n in names]


def calibrate_on_entailment_pairs(
    rt: Runtime, names: Sequence[str], request: CalibrationRequest
) -> list[CalibrationRecord]:
    """The calibrator of judges that read (premise, hypothesis) pairs: the entailment judges, and
    any judge of that role registered later (see :func:`calibrate_entailment`)."""
    return [calibrate_entailment(rt, n, request.reference, sample=request.sample) for n in names]


register_judge(LABELLER, JudgeRole.LABELLER, _labeller, calibrate=_calibrate_labeller, listed=True)
register_judge(TRAINED_LABELLER, JudgeRole.LABELLER, build_trained, calibrate=_calibrate_labeller)
register_judge(
    critique_judge_name("<criterion>"),
    JudgeRole.CRITIQUE,
    _critique,
    calibrate=_calibrate_critiques,
    members=CRITERIA,
    group="critiques",
    listed=True,
)
register_judge(
    EntailmentJudgeName.CONFIGURED,
    JudgeRole.ENTAILMENT,
    _configured_entailment_judge,
    calibrate=calibrate_on_entailment_pairs,
    listed=True,
    optional=True,
)
for _name, _build in (
    (EntailmentJudgeName.NLI, _nli_judge),
    (EntailmentJudgeName.EMBEDDING, _embedding_judge),
    (EntailmentJudgeName.LLM, _llm_entailment_judge),
    (EntailmentJudgeName.TRAINED, build_trained),
):
    register_judge(_name, JudgeRole.ENTAILMENT, _build, calibrate=calibrate_on_entailment_pairs)
