"""One definition of the night, as data: flows of steps, their inputs, outputs, pools and Assets.

Both ways of running the night are built from :data:`NIGHT` and nothing else:

- ``ragtrail nightly`` runs the flows in process with :func:`run_flow` (mapped steps as loops, each
  flow's announcement handed to the next flow as its triggering event);
- the Airflow adapter (``plugins/ragtrail_dags.py``) turns each :class:`Flow` into a DAG: one task
  per step, downstream of the steps it waits for (:attr:`Step.after`; by default the step before
  it), mapped steps expanded over their list, pools and outlets from the step, the schedule
  from the Asset the flow listens to, Params from :attr:`Flow.params`.

This module is light on purpose (stdlib and ragtrail's bottom layer only): DAG files import it at
parse time, and each step names its function in ``ragtrail.pipeline.tasks``, imported only when
the step runs. A step reads its keyword arguments from the flow's *state*: the values :meth:`Flow.resolve` made
from the Params and the triggering event, merged with the outputs of the (unmapped) steps it
waits for. Mapped steps keep their results in the stores, not in the state. Adding a step (citations,
sufficiency, drift) is one :class:`Step` in one flow here.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, cast

from ragtrail import jsonsafe
from ragtrail.failures import EvaluationFailedError, combined
from ragtrail.jsonsafe import JsonObject
from ragtrail.paths import safe_name, sample_corpus_dir
from ragtrail.pipeline.events import (
    CITATION_MODEL,
    EVENT_TYPES,
    AssetKey,
    CorpusEvent,
    DriftEvent,
    TestsetEvent,
)
from ragtrail.records import DEFAULT_TEXT_WEIGHTS, LABELS, RLAlgorithm

log = logging.getLogger(__name__)

StepFunction = Callable[..., JsonObject]
TASKS_MODULE = "ragtrail.pipeline.tasks"


@dataclass(frozen=True)
class Step:
    """One unit of work: an Airflow task, or one stage of the in-process run.

    ``ragtrail.pipeline.tasks.<task>(rt, **inputs)`` returns a strict-JSON dict; ``outputs`` are the keys of it that later
    steps may read, or ``output_as`` names the whole result for them. A mapped step runs once per element of the state list ``map_over``, which it
    receives as the argument ``map_as``. ``emits`` names the Asset the step announces: it returns
    the event extras under ``"event"`` (None: no event). Airflow registers an Asset event for
    every successful task with outlets, extras or not; a step whose announcement is conditional
    (the drift decision: only a fired one may trigger retraining; a metrics announcement when no
    set was rated) sets ``skip_without_event`` and its task ends *skipped* when there is no
    event, which registers none; the step after it still runs. ``queue`` routes the
    task to a worker queue (``gpu`` for training: the Celery worker with CUDA torch in docker/);
    None is the default queue.
    """

    name: str
    task: str
    doc: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    output_as: str | None = None
    pool: str | None = None
    queue: str | None = None
    map_over: str | None = None
    map_as: str | None = None
    one_at_a_time: bool = False
    after_mapped: bool = False
    emits: AssetKey | None = None
    skip_without_event: bool = False
    after: tuple[str, ...] | None = None
    """The steps this one waits for (every instance of a mapped one); None: the step before it.
    Steps neither of which waits for the other, directly or not, may run side by side: as
    parallel tasks in Airflow, and in ``ragtrail nightly`` when every model is a remote endpoint
    (:func:`run_flow`)."""

    def function(self) -> StepFunction:
        """The step's function, imported on first use (never at DAG-parse time)."""
        return cast(StepFunction, getattr(importlib.import_module(TASKS_MODULE), self.task))

    def run(self, rt: Any, **kwargs: Any) -> JsonObject:
        return self.function()(rt, **kwargs)


@dataclass(frozen=True)
class ParamSpec:
    """A DAG Param as plain data: default, JSON schema keywords, title and description."""

    default: Any
    schema: Mapping[str, Any]
    title: str
    description: str


Resolver = Callable[[Mapping[str, Any], Mapping[str, Any] | None, str], JsonObject]


@dataclass(frozen=True)
class Flow:
    """A chain of steps run together: one DAG, scheduled by cron or by an Asset."""

    dag_id: str
    doc: str
    run_prefix: str
    steps: tuple[Step, ...]
    params: Mapping[str, ParamSpec]
    resolver: Resolver
    cron: str | None = None
    listens_to: AssetKey | None = None
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse wiring that cannot run: a step waiting for one that is not before it, or
        reading a value that a step it does not wait for may write (which value it got would
        depend on timing once steps run side by side)."""
        names = [step.name for step in self.steps]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.dag_id}: step names repeat: {names}")
        for index, step in enumerate(self.steps):
            for name in step.after or ():
                if name not in names[:index]:
                    raise ValueError(
                        f"{self.dag_id}.{step.name} waits for {name!r}, which is not a step "
                        "before it"
                    )
            ancestors = self.ancestors(step)
            for other in self.steps[:index]:
                racing = set(step.inputs) & _writes(other)
                if racing and other.name not in ancestors:
                    raise ValueError(
                        f"{self.dag_id}.{step.name} reads {sorted(racing)}, which "
                        f"{other.name!r} writes, but does not wait for it"
                    )

    def step(self, name: str) -> Step:
        return next(step for step in self.steps if step.name == name)

    def upstream(self, step: Step) -> tuple[str, ...]:
        """The steps ``step`` waits for directly (see :attr:`Step.after`)."""
        if step.after is not None:
            return step.after
        index = self.steps.index(step)
        return (self.steps[index - 1].name,) if index else ()

    def ancestors(self, step: Step) -> frozenset[str]:
        """Every step ``step`` waits for, directly or through others."""
        seen: set[str] = set()
        todo = list(self.upstream(step))
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self.upstream(self.step(name)))
        return frozenset(seen)

    def side_by_side(self, step: Step) -> bool:
        """Whether some other step may run at the same time as ``step`` (neither waits for
        the other)."""
        mine = self.ancestors(step)
        return any(
            other is not step and other.name not in mine and step.name not in self.ancestors(other)
            for other in self.steps
        )

    def run_id(self, scheduler_run_id: str) -> str:
        """A path- and key-safe run id, stable across retries of one scheduler run."""
        return f"{self.run_prefix}-{safe_name(scheduler_run_id)}"

    def resolve(
        self, params: Mapping[str, Any], events: Sequence[Mapping[str, Any]], run_id: str
    ) -> JsonObject:
        """The flow's initial state from its Params and the events that triggered it.

        ``events`` are ``{"timestamp": ..., "extra": {...}}``; the newest one wins, so a run
        triggered by several queued events works on the latest corpus or test set.
        """
        merged = {name: spec.default for name, spec in self.params.items()} | dict(params)
        return self.resolver(merged, newest_extra(events), run_id)


def _writes(step: Step) -> set[str]:
    """The state keys ``step`` writes (a mapped step writes none: its results stay in stores)."""
    if step.map_over:
        return set()
    return set(step.outputs) | ({step.output_as} if step.output_as else set())


def newest_extra(events: Iterable[Mapping[str, Any]]) -> JsonObject | None:
    """The extras of the newest event (by timestamp), or None without events."""
    ordered = sorted(events, key=lambda e: str(e["timestamp"]))
    return dict(ordered[-1].get("extra") or {}) if ordered else None


# --------------------------------------------------------------------------------- the flows

_CORPUS_PARAM = ParamSpec(
    "handbook",
    {"type": "string", "pattern": r"^[a-z0-9_-]+$", "maxLength": 64},
    "Corpus",
    "Corpus name: lower-case letters, digits, '_' and '-' (asset events override it).",
)
_SNAPSHOT_PARAM = ParamSpec(
    None,
    {"type": ["null", "string"]},
    "Snapshot id",
    "Corpus snapshot to work on for manual runs; empty = the latest complete one.",
)

_TEXT_WEIGHTS_PARAM = ParamSpec(
    list(DEFAULT_TEXT_WEIGHTS),
    {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "minItems": 1},
    "Text weights",
    "BM25 weights to scan, each in [0, 1] (0 = dense only, 1 = BM25 only).",
)


def _resolve_ingest(
    params: Mapping[str, Any], _event: Mapping[str, Any] | None, run_id: str
) -> JsonObject:
    return {
        "source": params["source"],
        "corpus": params["corpus"],
        "shard_size": int(params["shard_size"]),
        "allow_mass_removal": bool(params.get("allow_mass_removal", False)),
        "golden": [str(path) for path in params.get("golden") or []],
        # Not a Param: ``ragtrail nightly`` sets it, as it runs every step in its own process.
        "in_process": bool(params.get("in_process", False)),
        "run_id": run_id,
    }


def _on_snapshot(
    params: Mapping[str, Any], event: CorpusEvent | TestsetEvent | None, run_id: str
) -> JsonObject:
    """What every flow after the ingest resolves alike: the corpus and snapshot it works on
    (the event's, else the Params'), its run id and where they came from."""
    return {
        "corpus": event.corpus if event else params["corpus"],
        "snapshot_id": (event.snapshot_id if event else None) or params.get("snapshot_id") or None,
        "run_id": run_id,
        "origin": "asset_event" if event else "params",
    }


def _text_weights(params: Mapping[str, Any]) -> list[float] | None:
    weights = params.get("text_weights")
    return [float(w) for w in weights] if weights else None


def _resolve_generation(
    params: Mapping[str, Any], extra: Mapping[str, Any] | None, run_id: str
) -> JsonObject:
    event = CorpusEvent.from_extra(extra) if extra is not None else None
    return {
        **_on_snapshot(params, event, run_id),
        "changed": event.changed if event else True,
        "per_label": params.get("per_label"),
        "seed": params.get("seed"),
        "labels": list(params.get("labels") or []),
        "doc_ids": list(params.get("doc_ids") or []),
    }


def _resolve_golden_evaluation(
    params: Mapping[str, Any], extra: Mapping[str, Any] | None, run_id: str
) -> JsonObject:
    event = CorpusEvent.from_extra(extra) if extra is not None else None
    return {**_on_snapshot(params, event, run_id), "text_weights": _text_weights(params)}


def _resolve_evaluation(
    params: Mapping[str, Any], extra: Mapping[str, Any] | None, run_id: str
) -> JsonObject:
    event = TestsetEvent.from_extra(extra) if extra is not None else None
    return {
        **_on_snapshot(params, event, run_id),
        # A test-set event names its version; without one (none accepted, or a corpus event)
        # the QA set from the Params applies (empty = the project's default set).
        "qa_set": (event.qa_set if event else None) or params.get("qa_set"),
        "text_weights": _text_weights(params),
    }


_SET_STEPS = {
    "evaluate": (
        "evaluate_set",
        "hybrid retrieval per text weight with bootstrap CIs on one QA set, stored as the run "
        "<run id>.<set name> (embeds the queries)",
    ),
    "cite": (
        "evaluate_set_citations",
        "the answering model on relevance mixtures (model vs random citations) and the "
        "attributed-answer scenarios of one QA set, stored in the set's run",
    ),
    "sufficiency": (
        "evaluate_set_sufficiency",
        "sufficiency raters (calibrated) on retrieved and gold contexts, Correct / Abstain / "
        "Hallucinate per setting, confidence and the selective-generation policy of one QA set",
    ),
    "evidence": (
        "evaluate_set_evidence",
        "the evidence extractor (in service, its base, the extractive baseline) on one QA "
        "set's retrieved passages with 0-400% noise: compression, faithfulness, helpfulness, "
        "conciseness, and the answerer's correctness from evidence vs full passages vs no "
        "context; stored in the set's run",
    ),
}
"""The steps of one QA set, by name: their task and description (the same whichever flow
evaluates the set)."""


def _set_step(name: str, *, after: tuple[str, ...]) -> Step:
    """The step ``name`` of :data:`_SET_STEPS`, mapped over the flow's ``sets``: the retrieval
    scan in the ``embedding`` pool, the answer-side steps in ``llm_api``."""
    task, doc = _SET_STEPS[name]
    scan = name == "evaluate"
    return Step(
        name,
        task,
        doc,
        inputs=("corpus", "text_weights", "snapshot_id") if scan else ("corpus", "snapshot_id"),
        pool="embedding" if scan else "llm_api",
        map_over="sets",
        map_as="qa_set_entry",
        after=after,
    )


INGEST = Flow(
    dag_id="ingest_corpus",
    doc="Nightly incremental ingestion: only added or changed files are parsed, chunked and "
    "embedded; an unchanged source makes no new snapshot (the corpus event says "
    "`changed: false`).",
    run_prefix="ingest",
    cron="0 1 * * *",
    tags=("ingest",),
    params={
        "source": ParamSpec(
            str(sample_corpus_dir()),
            {"type": "string", "minLength": 1},
            "Source",
            "Folder path or s3://bucket/prefix holding the documents.",
        ),
        "corpus": _CORPUS_PARAM,
        "shard_size": ParamSpec(
            25,
            {"type": "integer", "minimum": 1, "maximum": 1000},
            "Shard size",
            "Changed files per mapped ingest_shard task.",
        ),
        "allow_mass_removal": ParamSpec(
            False,
            {"type": "boolean"},
            "Allow mass removal",
            "Let this run remove more than ingest.max_removal_share of the corpus, or all of "
            "it. Off: such a run fails in the plan task and nothing changes (an empty or wrong "
            "source must not empty the live corpus).",
        ),
        "golden": ParamSpec(
            [],
            {"type": "array", "items": {"type": "string", "minLength": 1}},
            "Golden sets",
            "Golden-set files or folders to register as well as the configured golden_sets of "
            "the corpus (the shipped sample set is registered on the shipped sample corpus).",
        ),
    },
    resolver=_resolve_ingest,
    steps=(
        Step(
            "plan",
            "plan_ingest",
            "hashes every file, diffs it against the published snapshot, refuses mass removals, "
            "takes the corpus's ingest lock, writes the manifest, shards changes",
            inputs=("source", "corpus", "shard_size", "allow_mass_removal", "run_id", "in_process"),
            outputs=("snapshot_id", "shards", "manifest_uri", "changed"),
        ),
        Step(
            "ingest_shard",
            "ingest_shard",
            "parses, chunks, embeds and indexes one shard (the index has one writer)",
            inputs=("corpus", "snapshot_id"),
            pool="embedding",
            map_over="shards",
            map_as="rel_paths",
            one_at_a_time=True,
        ),
        Step(
            "finalize",
            "finalize_ingest",
            "removes deleted documents, reconciles the index, closes the snapshot",
            inputs=("corpus", "snapshot_id", "changed"),
            output_as="summary",
            after_mapped=True,
        ),
        Step(
            "golden",
            "register_golden_sets",
            "registers the corpus's golden sets (configured golden_sets, the `golden` Param, "
            "the sample set on the sample corpus): judges calibrate and drift has a baseline",
            inputs=("corpus", "source", "golden"),
        ),
        Step(
            "quality",
            "check_corpus",
            "Great Expectations on documents, chunks, quarantine; only a passing corpus is "
            "announced",
            inputs=("corpus", "snapshot_id", "summary"),
            emits="corpus",
        ),
    ),
)

GENERATE = Flow(
    dag_id="generate_testset",
    doc="Balanced, critiqued test-set generation on each announced corpus (reuses the current "
    "version when the corpus did not change), or on manual trigger for chosen labels/documents.",
    run_prefix="generate",
    listens_to="corpus",
    tags=("generation",),
    params={
        "corpus": _CORPUS_PARAM,
        "snapshot_id": _SNAPSHOT_PARAM,
        "per_label": ParamSpec(
            None,
            {"type": ["null", "integer"], "minimum": 1, "maximum": 100000},
            "Items per label",
            "Target accepted items per label; empty = the configured quota.",
        ),
        "seed": ParamSpec(
            None, {"type": ["null", "integer"]}, "Seed", "Empty = the configured seed."
        ),
        "labels": ParamSpec(
            [],
            {"type": "array", "items": {"type": "string", "enum": list(LABELS)}},
            "Labels",
            "Regenerate only these labels (manual runs).",
        ),
        "doc_ids": ParamSpec(
            [],
            {"type": "array", "items": {"type": "string", "minLength": 1}},
            "Documents",
            "Regenerate only from these documents (manual runs).",
        ),
    },
    resolver=_resolve_generation,
    steps=(
        Step(
            "calibrate",
            "calibrate_judges",
            "calibrates the generation judges (labeller, critiques) on golden sets when their "
            "version has none; fixes their gates",
            inputs=("corpus",),
            outputs=("gates",),
            pool="llm_api",
        ),
        Step(
            "plan",
            "plan_generation",
            "retires items of changed documents, orders and shards contexts (changed first); "
            "beside the calibration",
            inputs=(
                "corpus",
                "run_id",
                "snapshot_id",
                "changed",
                "per_label",
                "seed",
                "labels",
                "doc_ids",
            ),
            outputs=("shards", "reuse"),
            after=(),
        ),
        Step(
            "draft_shard",
            "draft_shard",
            "statements and questions for one shard of contexts (no judge needed)",
            inputs=("corpus", "run_id"),
            pool="llm_api",
            map_over="shards",
            map_as="chunk_ids",
            after=("plan",),
        ),
        Step(
            "baseline",
            "generation_baseline",
            "the single-prompt baseline on a sample of the drafted contexts, labelled",
            inputs=("corpus", "run_id", "reuse"),
            pool="llm_api",
            after=("plan",),
        ),
        Step(
            "judge_shard",
            "judge_shard",
            "model-free checks, labels and critiques of one shard's drafts under the gates",
            inputs=("corpus", "run_id", "gates"),
            pool="llm_api",
            map_over="shards",
            map_as="chunk_ids",
            after=("calibrate", "draft_shard"),
        ),
        Step(
            "finalize",
            "finalize_generation",
            "unanswerable pairs, dedup, quotas, top-up rounds, immutable version, GX",
            inputs=("corpus", "run_id", "reuse", "gates"),
            pool="llm_api",
            after_mapped=True,
            emits="testset",
            after=("judge_shard", "baseline"),
        ),
    ),
)

EVALUATE_GOLDEN = Flow(
    dag_id="evaluate_golden_sets",
    doc="The corpus's golden sets evaluated on each announced corpus, beside the test-set "
    "generation (they do not need it): retrieval across the text-weight scan, then sufficiency "
    "and the evidence extractor, as `evaluate_retrieval` evaluates a set, each set its own stored "
    "run. The runs are handed over to `evaluate_retrieval`, which, on the same snapshot and "
    "settings, skips their retrieval, sufficiency and evidence steps, cites them beside the test "
    "set and checks and publishes them with it (without a hand-over it evaluates the golden sets "
    "itself). The citations wait for the night's evaluation, where every set is cited in one "
    "wave of requests: the scenarios' first round, which their answers build on, is asked "
    "ahead (`ragtrail.pipeline.citations.ask_ahead`), the golden sets' here and the test "
    "set's when the generation versions it.",
    run_prefix="golden",
    listens_to="corpus",
    tags=("evaluation",),
    params={
        "corpus": _CORPUS_PARAM,
        "snapshot_id": _SNAPSHOT_PARAM,
        "text_weights": _TEXT_WEIGHTS_PARAM,
    },
    resolver=_resolve_golden_evaluation,
    steps=(
        Step(
            "calibrate",
            "calibrate_evaluation_judges",
            "calibrates the evaluation's judges (sufficiency raters, correctness) on the golden "
            "sets when their version has none",
            inputs=("corpus",),
            pool="llm_api",
        ),
        Step(
            "plan",
            "plan_golden_evaluation",
            "lists the golden sets (each one's latest version) and records their runs as "
            "started, for the night's evaluation to wait for; fixes the snapshot",
            inputs=("corpus", "run_id", "snapshot_id", "text_weights"),
            outputs=("sets", "snapshot_id"),
            after=(),
        ),
        _set_step("evaluate", after=("plan",)),
        Step(
            "ask_citations",
            "ask_golden_citations_ahead",
            "the golden sets' citation scenarios' first round asked into the call cache on an "
            "endpoint night, for the night's citations to find; after the sets' retrieval, so "
            "that its requests join the night's first waves rather than open the endpoint's "
            "work alone",
            inputs=("corpus", "sets"),
            pool="llm_api",
            after=("evaluate",),
        ),
        _set_step("sufficiency", after=("evaluate", "calibrate")),
        _set_step("evidence", after=("evaluate", "calibrate")),
        Step(
            "hand_over",
            "hand_over_golden_runs",
            "records the golden sets' runs, retrieval, sufficiency and evidence done, for the "
            "night's evaluation of the same snapshot and settings (which cites them)",
            inputs=("corpus", "sets", "snapshot_id", "text_weights"),
            after_mapped=True,
            after=("sufficiency", "evidence"),
        ),
    ),
)

EVALUATE = Flow(
    dag_id="evaluate_retrieval",
    doc="Recall@k per question label across the text-weight scan on every QA set of the corpus "
    "(each golden set's latest version and the announced test set, each its own stored run), "
    "then, in three parallel branches, the answering model's citation quality on each set, "
    "whether it answers when the context suffices and abstains when it does not (golden sets by "
    "default) and the evidence extractor, and whether any primary metric drifted below its "
    "baseline (a fired decision emits the drift asset).",
    run_prefix="retrieval",
    listens_to="testset",
    tags=("evaluation",),
    params={
        "corpus": _CORPUS_PARAM,
        "snapshot_id": _SNAPSHOT_PARAM,
        "qa_set": ParamSpec(
            None,
            {"type": ["null", "string"]},
            "QA set",
            "A QA set file or testset:<version>; empty = the project's sample set.",
        ),
        "text_weights": _TEXT_WEIGHTS_PARAM,
    },
    resolver=_resolve_evaluation,
    steps=(
        Step(
            "plan",
            "plan_evaluation",
            "lists the QA sets: every golden set's latest version (the run the golden sets' "
            "evaluation handed over, waited for while it runs), then the generated (or given) "
            "set; fixes the snapshot",
            inputs=("corpus", "run_id", "qa_set", "snapshot_id", "text_weights"),
            outputs=("sets", "snapshot_id"),
        ),
        _set_step("evaluate", after=("plan",)),
        _set_step("cite", after=("evaluate",)),
        Step(
            "announce_citations",
            "announce_citations",
            "collects every set's citation metrics into the night's citation summary",
            inputs=("corpus", "run_id", "sets", "snapshot_id"),
            after_mapped=True,
            emits="citation_metrics",
            skip_without_event=True,
        ),
        _set_step("sufficiency", after=("evaluate",)),
        Step(
            "announce_sufficiency",
            "announce_sufficiency",
            "collects every rated set's C/A/H and selective-generation headline into one summary",
            inputs=("corpus", "run_id", "sets", "snapshot_id"),
            after_mapped=True,
            emits="sufficiency_metrics",
            skip_without_event=True,
        ),
        _set_step("evidence", after=("evaluate",)),
        Step(
            "announce_evidence",
            "announce_evidence",
            "collects every evaluated set's evidence headline into one summary",
            inputs=("corpus", "run_id", "sets", "snapshot_id"),
            after_mapped=True,
            emits="evidence_metrics",
            skip_without_event=True,
        ),
        Step(
            "drift",
            "check_drift",
            "every set's run against its baseline (pinned, champion or first): paired tests of "
            "the primary metrics with a practical threshold and Holm, corpus changes, retired "
            "QA items; every decision stored",
            inputs=("corpus", "run_id", "sets", "snapshot_id"),
            output_as="drift",
            after=("announce_citations", "announce_sufficiency", "announce_evidence"),
        ),
        Step(
            "publish",
            "publish_report",
            "GX on every set's metrics, change since the previous run per set, one HTML report "
            "with corpus, test-set and drift sections, upload",
            inputs=("corpus", "run_id", "sets", "snapshot_id"),
            after_mapped=True,
            emits="retrieval_metrics",
        ),
        Step(
            "announce_drift",
            "announce_drift",
            "announces a fired drift decision (the retraining trigger); skipped when none fired",
            inputs=("corpus", "run_id", "snapshot_id", "drift"),
            emits="drift",
            skip_without_event=True,
        ),
    ),
)


def _resolve_retraining(
    params: Mapping[str, Any], extra: Mapping[str, Any] | None, run_id: str
) -> JsonObject:
    event = DriftEvent.from_extra(extra) if extra is not None else None
    return {
        "corpus": event.corpus if event else params["corpus"],
        "snapshot_id": (event.snapshot_id if event else None) or params.get("snapshot_id") or None,
        # The night whose drift decision fired: its set runs become the champion's baseline
        # when the challenger is promoted (manual runs: the Param, else the newest night).
        "drift_run_id": (event.night_run_id if event else None) or params.get("drift_run") or None,
        "drift_decision_id": event.decision_id if event else None,
        "base_model": params.get("base_model") or None,
        "rl_algorithm": params.get("rl_algorithm") or None,
        # the models whose metrics drifted (the event), else the Param's choice
        "models": list(event.models) if event else list(params.get("models", [CITATION_MODEL])),
        "run_id": run_id,
        "origin": "asset_event" if event else "params",
    }


RETRAIN = Flow(
    dag_id="retrain_models",
    doc="Retrains the models whose nightly metrics drifted (or those asked for): the citation "
    "answerer (a split of the corpus's QA sets by question and document, SFT targets, SFT then "
    "RL on the citation reward) and the evidence extractor (self-sampling, three experts, "
    "LPO), each with LoRA, registered in the model registry and put through its "
    "champion/challenger gate on frozen held-out items.",
    run_prefix="retrain",
    listens_to="drift",
    tags=("training",),
    params={
        "corpus": _CORPUS_PARAM,
        "snapshot_id": _SNAPSHOT_PARAM,
        "base_model": ParamSpec(
            None,
            {"type": ["null", "string"]},
            "Base model",
            "Model the adapters are trained on (builtin:..., hf:<id or path>); empty = the "
            "champion's base, else the configured answerer.",
        ),
        "rl_algorithm": ParamSpec(
            None,
            {"type": ["null", "string"], "enum": [None, *(a.value for a in RLAlgorithm)]},
            "RL algorithm",
            "The citation model's RL stage after SFT: ppo, grpo or rloo; empty = "
            "citation_training.rl_algorithm.",
        ),
        "models": ParamSpec(
            [CITATION_MODEL],
            {
                "type": "array",
                "items": {"type": "string", "enum": ["citation", "extractor"]},
                "uniqueItems": True,
            },
            "Models",
            "Models a manual run trains (a drift event names its own): citation, extractor.",
        ),
        "drift_run": ParamSpec(
            None,
            {"type": ["null", "string"]},
            "Accepted on",
            "Night (or set run) a promoted model is accepted on, i.e. the new drift baseline; "
            "empty = the corpus's newest night.",
        ),
    },
    resolver=_resolve_retraining,
    steps=(
        Step(
            "prepare",
            "prepare_citation_training",
            "splits the corpus's QA sets by question and document into training prompts and "
            "frozen evaluation mixtures (stored with the run)",
            inputs=("corpus", "run_id", "snapshot_id", "models"),
            outputs=("split_version",),
        ),
        Step(
            "train",
            "train_citation_challenger",
            "SFT targets, SFT and RL (LoRA; PPO, GRPO or RLOO) on the split, the bundle "
            "registered as a new version",
            inputs=("corpus", "run_id", "base_model", "rl_algorithm", "models"),
            outputs=("version",),
            pool="gpu",
            queue="gpu",
        ),
        Step(
            "gate",
            "gate_citation_challenger",
            "model in service vs the new version on the same frozen mixtures and seeds; promote "
            "(champion) or keep (challenger) with the reason, in the registry",
            inputs=("corpus", "run_id", "version", "drift_run_id"),
            pool="gpu",
            queue="gpu",
        ),
        Step(
            "prepare_evidence",
            "prepare_evidence_training",
            "splits the QA sets for the extractor by question and document into training "
            "prompts and frozen held-out questions (stored with the run)",
            inputs=("corpus", "run_id", "snapshot_id", "models"),
            outputs=("evidence_split_version",),
        ),
        Step(
            "train_evidence",
            "train_evidence_challenger",
            "self-sampling from the extractor in service, three experts with CoV weights, LPO "
            "(LoRA); the bundle registered as a new extractor version",
            inputs=("corpus", "run_id", "base_model", "models"),
            outputs=("evidence_version",),
            pool="gpu",
            queue="gpu",
        ),
        Step(
            "gate_evidence",
            "gate_evidence_challenger",
            "extractor in service vs the new version on the held-out questions: end-to-end "
            "correctness (paired CI) guarded by faithfulness and compression; promote or keep",
            inputs=("corpus", "run_id", "evidence_version"),
            pool="gpu",
            queue="gpu",
        ),
    ),
)

NIGHT: tuple[Flow, ...] = (INGEST, GENERATE, EVALUATE_GOLDEN, EVALUATE, RETRAIN)
"""The night in order; each flow after the first listens to an Asset an earlier one emits."""


def flow(dag_id: str) -> Flow:
    return next(f for f in NIGHT if f.dag_id == dag_id)


# --------------------------------------------------------------------- running the steps


def step_arguments(step: Step, state: Mapping[str, Any]) -> JsonObject:
    """The keyword arguments ``step`` takes from the state (missing inputs are an error)."""
    missing = [name for name in step.inputs if name not in state]
    if missing:
        raise KeyError(f"step {step.name!r} needs {missing}, which nothing before it provides")
    return {name: state[name] for name in step.inputs}


def step_outputs(step: Step, result: Mapping[str, Any]) -> JsonObject:
    """What later steps may read of ``step``'s result."""
    if step.output_as:
        return {step.output_as: dict(result)}
    return {key: result[key] for key in step.outputs if key in result}


def flow_state(
    flow_: Flow, state: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]
) -> JsonObject:
    """The initial state plus the outputs of the steps that ran (``results`` by step name)."""
    merged = dict(state)
    for step in flow_.steps:
        if step.name in results and not step.map_over:
            merged.update(step_outputs(step, results[step.name]))
    return merged


def checked_result(flow_: Flow, step: Step, result: Mapping[str, Any]) -> JsonObject:
    """The step's result, refused if it holds NaN/infinity or if an emitting step's event is not
    its Asset's event type (:data:`~ragtrail.pipeline.events.EVENT_TYPES`)."""
    jsonsafe.check_finite(result, f"{flow_.dag_id}.{step.name} result")
    if step.emits and result.get("event") is not None:
        try:
            EVENT_TYPES[step.emits].from_extra(result["event"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{step.name}'s {step.emits} event: {exc}") from exc
    return dict(result)


def run_step_in_worker(
    flow_: Flow, step: Step, state: Mapping[str, Any], extra: Mapping[str, Any]
) -> JsonObject:
    """Run ``step`` as a worker does: on a fresh Runtime built from the ``RAGTRAIL_*`` environment
    (a worker has no state from the DAG file), closed afterwards; the result is checked."""
    from ragtrail.library_logs import quiet_library_logs
    from ragtrail.runtime import Runtime

    quiet_library_logs()
    with Runtime() as rt:
        rt.holds_runs = False  # the next task of a run is another process: only heartbeats count
        result = step.run(rt, **step_arguments(step, state), **extra)
    return checked_result(flow_, step, result)


@dataclass
class FlowRun:
    """What an in-process flow run produced: each unmapped step's result and the event."""

    flow: Flow
    state: JsonObject
    results: dict[str, JsonObject] = field(default_factory=dict)
    event: JsonObject | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time per step (a mapped step's instances together), in step order; steps run side
    by side overlap."""


Progress = Callable[[str, int, int], None]
"""``(step name, done, total)`` after each element of a mapped step."""


def run_flow(
    rt: Any,
    flow_: Flow,
    state: Mapping[str, Any],
    *,
    progress: Progress | None = None,
) -> FlowRun:
    """Run every step of ``flow_`` on one runtime, as the DAG would.

    As Airflow runs every instance of a mapped step whatever the others do, an instance whose
    evaluation failed (:class:`~ragtrail.failures.EvaluationFailedError`: most of its model calls
    failed) does not stop the other instances of its step; the flow stops after that step, as
    the DAG's later tasks do not run after a failed one, raising every failure in one error.
    Any other error stops the flow at once (after the instances already running, when they run
    at once). When every model is a remote endpoint (:meth:`Runtime.llm_calls_overlap`), a
    mapped LLM step runs its instances at once, as Airflow's pool slots do, and steps that do
    not wait for each other (:attr:`Step.after`) run side by side, as the DAG's parallel tasks
    do (:func:`_run_side_by_side`): the endpoint then gets every set's and every evaluation's
    requests together instead of one at a time. Otherwise the steps run one after another, in
    their order.
    """
    run = FlowRun(flow_, dict(state))
    if _overlapping_steps(rt, flow_):
        _run_side_by_side(rt, flow_, run, progress)
        return run
    for step in flow_.steps:
        started = time.perf_counter()
        try:
            _run_step(rt, flow_, step, run, progress)
        finally:
            run.seconds[step.name] = round(time.perf_counter() - started, 3)
    return run


def _llm_calls_overlap(rt: Any) -> bool:
    """Whether ``rt``'s model calls may run at once (:meth:`Runtime.llm_calls_overlap`; a
    runtime without that method, as in tests, says no)."""
    return bool(getattr(rt, "llm_calls_overlap", lambda: False)())


def _overlapping_steps(rt: Any, flow_: Flow) -> bool:
    """Whether ``flow_``'s independent steps run side by side in this process (see
    :func:`run_flow`)."""
    return any(flow_.side_by_side(step) for step in flow_.steps) and _llm_calls_overlap(rt)


def _run_side_by_side(rt: Any, flow_: Flow, run: FlowRun, progress: Progress | None) -> None:
    """Every step of ``flow_`` on threads, each as soon as the steps it waits for have ended.

    A step that may overlap others runs on its own sibling runtime (its own usage meter and
    budget checks, as on its own worker); the others on ``rt``. Each step sees the outputs of
    the steps it waits for only. As in Airflow, a failed step's followers do not run while
    independent branches go on, after an evaluation failure; any other error lets only the
    steps already running end. Errors are raised as :func:`run_flow` raises them, in step
    order; the flow's event is that of its last emitting step, as when run in order.
    """
    lock = threading.Lock()
    told = _serialised(progress, threading.Lock())
    done: set[str] = set()
    never: set[str] = set()
    failed: dict[str, BaseException] = {}
    pending = list(flow_.steps)
    with ThreadPoolExecutor(len(flow_.steps), thread_name_prefix=f"{flow_.dag_id}-") as pool:
        running: dict[Future[None], Step] = {}
        while pending or running:
            stopping = any(not isinstance(e, EvaluationFailedError) for e in failed.values())
            for step in list(pending):  # in step order: what a step waits for comes first
                waits_for = flow_.upstream(step)
                if stopping or any(name in failed or name in never for name in waits_for):
                    never.add(step.name)
                    pending.remove(step)
                elif all(name in done for name in waits_for):
                    pending.remove(step)
                    future = pool.submit(_run_branch_step, rt, flow_, step, run, told, lock)
                    running[future] = step
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                step = running.pop(future)
                error = future.exception()
                if error is None:
                    done.add(step.name)
                else:
                    failed[step.name] = error
    run.seconds = {s.name: run.seconds[s.name] for s in flow_.steps if s.name in run.seconds}
    for step in flow_.steps:
        if step.emits and step.name in run.results:
            run.event = run.results[step.name].get("event")
    errors = [failed[step.name] for step in flow_.steps if step.name in failed]
    other = next((e for e in errors if not isinstance(e, EvaluationFailedError)), None)
    if other is not None:
        raise other
    if errors:
        raise combined(cast(list[EvaluationFailedError], errors))


def _run_branch_step(
    rt: Any,
    flow_: Flow,
    step: Step,
    run: FlowRun,
    progress: Progress | None,
    lock: threading.Lock,
) -> None:
    """One step of :func:`_run_side_by_side`: on a sibling runtime when it may overlap
    others, with the outputs of the steps it waits for; its result joins ``run``."""
    ancestors = flow_.ancestors(step)
    with lock:
        view = FlowRun(flow_, run.state, {k: v for k, v in run.results.items() if k in ancestors})
    started = time.perf_counter()
    try:
        with rt.sibling() if flow_.side_by_side(step) else nullcontext(rt) as own:
            _run_step(own, flow_, step, view, progress)
    finally:
        with lock:
            run.seconds[step.name] = round(time.perf_counter() - started, 3)
            if step.name in view.results:
                run.results[step.name] = view.results[step.name]


def _serialised(progress: Progress | None, lock: threading.Lock) -> Progress | None:
    """``progress``, told by one thread at a time."""
    if progress is None:
        return None

    def told(step: str, done: int, total: int) -> None:
        with lock:
            progress(step, done, total)

    return told


def _overlapping(rt: Any, step: Step, instances: int) -> bool:
    """Whether a mapped step's instances run at once, as Airflow runs them in their pool's
    slots: LLM-bound steps (pool ``llm_api``) whose every model is a remote endpoint."""
    return (
        instances > 1
        and step.pool == "llm_api"
        and not step.one_at_a_time
        and _llm_calls_overlap(rt)
    )


def _run_instances_at_once(
    rt: Any,
    flow_: Flow,
    step: Step,
    args: Mapping[str, Any],
    map_as: str,
    items: Sequence[Any],
    progress: Progress | None,
) -> list[Exception]:
    """Every instance of ``step`` on its own thread and its own sibling runtime (its own usage
    meter and budget checks, as on separate workers); their errors, in item order. As in
    Airflow, one instance's error does not stop the others."""

    def one(item: Any) -> None:
        with rt.sibling() as child:
            checked_result(flow_, step, step.run(child, **args, **{map_as: item}))

    errors: dict[int, Exception] = {}
    with ThreadPoolExecutor(len(items), thread_name_prefix=f"{step.name}-") as pool:
        futures = {pool.submit(one, item): i for i, item in enumerate(items)}
        for done, future in enumerate(as_completed(futures), start=1):
            exc = future.exception()
            if isinstance(exc, Exception):
                errors[futures[future]] = exc
            elif exc is not None:  # KeyboardInterrupt, SystemExit: not an instance's failure
                raise exc
            if progress:
                progress(step.name, done, len(items))
    return [errors[i] for i in sorted(errors)]


def _run_step(rt: Any, flow_: Flow, step: Step, run: FlowRun, progress: Progress | None) -> None:
    """One step of :func:`run_flow` (every instance of a mapped step)."""
    current = flow_state(flow_, run.state, run.results)
    args = step_arguments(step, current)
    if step.map_over:
        assert step.map_as is not None
        items = list(current[step.map_over] or [])
        map_as = step.map_as
        if _overlapping(rt, step, len(items)):
            errors = _run_instances_at_once(rt, flow_, step, args, map_as, items, progress)
        else:
            errors = []
            for done, item in enumerate(items, start=1):
                try:
                    checked_result(flow_, step, step.run(rt, **args, **{map_as: item}))
                except EvaluationFailedError as exc:
                    errors.append(exc)
                if progress:
                    progress(step.name, done, len(items))
        failed = [exc for exc in errors if isinstance(exc, EvaluationFailedError)]
        for exc in failed:
            log.error("%s.%s failed: %s", flow_.dag_id, step.name, exc)
        other = next((exc for exc in errors if exc not in failed), None)
        if other is not None:
            raise other
        if failed:
            raise combined(failed)
        return
    result = checked_result(flow_, step, step.run(rt, **args))
    if step.emits:
        run.event = result.get("event")
    run.results[step.name] = result
