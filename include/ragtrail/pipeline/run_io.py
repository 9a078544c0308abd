"""Run I/O that every evaluation step shares: QA sets in, run records and artifacts out.

Below every feature step of the pipeline (retrieval, citations, sufficiency, drift, retraining)
and above nothing of it: the steps import from here, never from each other, so that the
pipeline's import graph has no cycle. Artifact keys live in :mod:`ragtrail.artifact_keys`.

- :func:`load_items` reads a QA set by its typed reference (:class:`~ragtrail.records.QASetRef`:
  a golden version, a generated version or a file; None: the sample set); :func:`sample_items` spreads a seeded sample over
  the labels;
- :func:`open_set_run` starts (or reopens) the stored run of one QA set of the night, and
  :func:`held_run` holds it while a step writes to it: heartbeats on progress, and ``failed``
  with the reason when the step raises (:func:`check_step_failures`: most model calls failed);
- :func:`settle_runs` marks runs whose process is gone (or silent) ``abandoned``;
- :func:`put_parquet` / :func:`get_parquet` / :func:`stored_json` / :func:`load_run_summary`
  read and write a run's artifacts; :func:`report_dir` is where its report is rendered;
- :func:`best_text_weight` is the hybrid weight the answer-side steps retrieve with.
"""

from __future__ import annotations

import io
import json
import logging
import random
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from ragtrail.artifact_keys import run_summary_key
from ragtrail.failures import FailureCount, check_failures, one_line
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.budget import BudgetExhausted
from ragtrail.paths import sample_qa_set
from ragtrail.records import INCLUSIVE, QAItem, QASetRef, QuestionLabel, SetKind
from ragtrail.runtime import Runtime
from ragtrail.storage.corpus_store import SnapshotRecord
from ragtrail.storage.runs_store import (
    ABANDONED,
    FAILED,
    RUNNING,
    SUCCESS,
    RunOwner,
    RunRecord,
    RunStore,
)
from ragtrail.summaries.retrieval_summary import RetrievalSummary
from ragtrail.testset.qaset import load_qa_set

log = logging.getLogger(__name__)


def put_parquet(rt: Runtime, key: str, frame: pd.DataFrame) -> str:
    """Store ``frame`` as Parquet under ``key``; returns its URI."""
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return rt.artifacts.put_bytes(key, buf.getvalue())


def get_parquet(rt: Runtime, key: str) -> pd.DataFrame:
    """The frame :func:`put_parquet` stored under ``key``."""
    return pd.read_parquet(io.BytesIO(rt.artifacts.get_bytes(key)))


def evaluated_snapshot(rt: Runtime, corpus: str, snapshot_id: str | None) -> SnapshotRecord:
    """The given snapshot, else the corpus's latest completed one; an error when there is none."""
    snapshot = (
        rt.store.get_snapshot(snapshot_id) if snapshot_id else rt.store.latest_snapshot(corpus)
    )
    if snapshot is None:
        raise ValueError(f"corpus {corpus!r} has no completed snapshot: ingest it first")
    return snapshot


def producing_models(
    index_backend: str, embedding_model: str, backends: Mapping[str, str]
) -> dict[str, str]:
    """What produced a retrieval metric, stored with every point (``metrics_history.models``)."""
    return {**backends, "index_backend": index_backend, "embedding_model": embedding_model}


def run_owner(rt: Runtime) -> RunOwner:
    """This process as the owner of the runs it writes (with its pid when it holds them
    whole: see :attr:`Runtime.holds_runs`)."""
    return RunOwner.this_process(holds_run=rt.holds_runs)


def settle_runs(rt: Runtime) -> list[RunRecord]:
    """Mark the runs left running by a process that is gone from this host, or silent for
    ``runs.stale_after_s``, ``abandoned``; returns them (each is logged)."""
    stale_after = timedelta(seconds=rt.settings.runs.stale_after_s)
    settled = RunStore(rt.engine).settle_stale_runs(stale_after)
    for run in settled:
        log.warning("run %s abandoned: %s", run.run_id, run.status_detail)
    return settled


def night_of_set(run_id: str, set_name: str | None) -> str | None:
    """The night a set's run ``<night>.<set name>`` belongs to (None for a lone run)."""
    if set_name and run_id.endswith(f".{set_name}"):
        return run_id[: -len(set_name) - 1]
    return None


@contextmanager
def held_run(rt: Runtime, run_id: str, night: str | None = None) -> Iterator[None]:
    """While a step writes to ``run_id``: heartbeats on progress (for its night's runs too), and
    when the step raises, the run ends ``failed`` with the error as its reason (then the error
    goes on). A killed process leaves it running, for :func:`settle_runs` to abandon. A step a
    budget stopped (:class:`~ragtrail.llm.budget.BudgetExhausted`) does not fail the run."""
    rt.hold_run(run_id, night)
    try:
        yield
    except BudgetExhausted:
        raise  # a budget stopped the step: the run keeps what earlier steps stored
    except Exception as exc:
        # whole: the run store hides credentials in it, then bounds it
        reason = one_line(str(exc), limit=None) or type(exc).__name__
        RunStore(rt.engine).fail_run(run_id, reason)
        raise
    finally:
        rt.release_run(run_id)


def check_step_failures(
    run_id: str,
    evaluation: str,
    counts: Iterable[FailureCount],
    *,
    max_share: float,
    setting: str,
) -> None:
    """Raise :class:`~ragtrail.failures.EvaluationFailedError` when more than ``max_share`` of
    one kind of items failed (inside :func:`held_run`, which stores the run as failed)."""
    check_failures(evaluation, counts, max_share=max_share, setting=setting, run_id=run_id)


def resume_runs(rt: Runtime, run_ids: Iterable[str]) -> None:
    """The night's later steps (drift, publishing) take its set runs back: a run still running
    (or abandoned while it waited for a worker) is this step's again, a complete one stays as
    it is, and a failed one is refused (ValueError): what it measured is not to be used."""
    store, owner = RunStore(rt.engine), run_owner(rt)
    for run_id in run_ids:
        run = store.get_run(run_id)
        if run is None:
            continue
        if run.status == FAILED:
            raise ValueError(f"run {run_id} {run.state_text()}: it is not published or checked")
        if run.status in (RUNNING, ABANDONED):
            if run.status == ABANDONED:
                log.warning("run %s was abandoned (%s); resumed", run_id, run.status_detail)
            store.claim_run(run_id, owner)


def complete_run(rt: Runtime, run_id: str) -> None:
    """End as ``success`` a run that a command ran by itself (``ragtrail eval citations``, ``eval
    retrieval --no-report``: nothing publishes it), when it is still running."""
    store = RunStore(rt.engine)
    run = store.get_run(run_id)
    if run is not None and run.status == RUNNING:
        store.finish_run(run_id, SUCCESS)


@dataclass(frozen=True)
class SetRun:
    """One QA set opened for an answer-side evaluation under a set's run id: its items, the
    snapshot they are evaluated on and the run's parameters."""

    run_id: str
    corpus: str
    snapshot_id: str
    items: list[QAItem]
    qa_version: str
    params: JsonObject
    night: str | None = None

    def record(self, rt: Runtime, **models: Any) -> JsonObject:
        """The keyword arguments of ``RunStore.record_evaluation`` (the producing models plus
        ``models``, e.g. the answerer)."""
        produced = producing_models(rt.settings.index_backend, rt.embedder_identity, rt.backends())
        return {
            "corpus": self.corpus,
            "corpus_snapshot": self.snapshot_id,
            "qa_set_version": self.qa_version,
            "models": {**produced, **models},
        }


def open_set_run(
    rt: Runtime,
    corpus: str,
    run_id: str,
    task: str,
    *,
    qa_set: QASetSource,
    set_name: str | None,
    snapshot_id: str | None,
) -> SetRun:
    """Load the QA set, fix the snapshot and start the run ``run_id`` (as ``task``) unless the
    set's retrieval step already did; either way this process owns it now (running again when
    a retried or added step reopens it). Hold it with :func:`held_run` while writing."""
    snapshot = evaluated_snapshot(rt, corpus, snapshot_id)
    items, qa_version, qa_source = load_items(rt, qa_set)
    params = {
        "corpus": corpus,
        "snapshot_id": snapshot.snapshot_id,
        "qa_set": qa_source,
        "qa_set_version": qa_version,
        "qa_set_name": set_name,
    }
    settle_runs(rt)
    runs = RunStore(rt.engine)
    if runs.get_run(run_id) is None:
        runs.start_run(run_id, task, params, owner=run_owner(rt))
    else:
        runs.claim_run(run_id, run_owner(rt))
    night = night_of_set(run_id, set_name)
    return SetRun(run_id, corpus, snapshot.snapshot_id, items, qa_version, params, night)


QASetSource = QASetRef | str | Path | None
"""A QA set as callers name it: a typed reference, its string form (``golden:<version>``,
``testset:<version>`` or a path), a path, or None for the shipped sample set."""


def qa_set_ref(qa_set: QASetSource) -> QASetRef:
    """The typed reference of ``qa_set`` (None: the shipped sample set's file)."""
    if isinstance(qa_set, QASetRef):
        return qa_set
    if qa_set is None or qa_set == "":
        return QASetRef(SetKind.FILE, str(sample_qa_set()))
    ref = QASetRef.parse(str(qa_set))
    return QASetRef(SetKind.FILE, str(Path(ref.value))) if ref.kind is SetKind.FILE else ref


def load_items(rt: Runtime, qa_set: QASetSource) -> tuple[list[QAItem], str, str]:
    """Items, version and reference (its string form) of a QA set (see :data:`QASetSource`)."""
    ref = qa_set_ref(qa_set)
    if ref.kind is SetKind.GOLDEN:
        from ragtrail.testset.golden import GoldenSetStore

        try:
            return GoldenSetStore(rt.engine).items(ref.value), ref.value, str(ref)
        except KeyError:
            raise ValueError(f"unknown golden set version {ref.value!r}") from None
    if ref.kind is SetKind.GENERATED:
        from ragtrail.testset.store import TestSetStore

        store = TestSetStore(rt.engine)
        if store.get_version(ref.value) is None:
            raise ValueError(f"unknown test-set version {ref.value!r}")
        qids = store.version_qids(ref.value)
        items = [
            QAItem(
                qid=qids[c.candidate_id],
                question=c.question,
                label=c.effective_label,
                answer=c.answer,
                ground_doc_ids=(c.context.doc_id,),
                ground_chunk_ids=(c.context.chunk_id,),
            )
            for c in store.version_items(ref.value)
        ]
        return items, ref.value, str(ref)
    items, version = load_qa_set(Path(ref.value))
    return items, version, ref.value


def load_run_summary(rt: Runtime, run_id: str) -> RetrievalSummary:
    """The retrieval summary stored with a set's run."""
    return RetrievalSummary.from_json(rt.artifacts.get_bytes(run_summary_key(run_id)))


def report_dir(rt: Runtime, run_id: str) -> Path:
    return rt.settings.home / "reports" / run_id


DEFAULT_TEXT_WEIGHT = 0.5
"""Hybrid weight when the set has no retrieval run to take the best weight from."""


def sample_items(items: Sequence[QAItem], n: int, seed: int) -> list[QAItem]:
    """``n`` items spread over the labels (round robin over seeded shuffles; 0 = all items)."""
    if n <= 0 or n >= len(items):
        return list(items)
    rng = random.Random(seed)
    pools = []
    for label in QuestionLabel:
        pool = sorted((i for i in items if i.label == label), key=lambda i: i.qid)
        rng.shuffle(pool)
        if pool:
            pools.append(pool)
    picked: list[QAItem] = []
    while len(picked) < n:
        for pool in pools:
            if pool and len(picked) < n:
                picked.append(pool.pop())
    return picked


def best_text_weight(rt: Runtime, run_id: str) -> tuple[float, str]:
    """The best text weight of the set's latest retrieval run (its inclusive row), and where the
    choice came from; the default weight when the run has no retrieval summary."""
    key = run_summary_key(run_id)
    if not rt.artifacts.exists(key):
        return DEFAULT_TEXT_WEIGHT, f"default {DEFAULT_TEXT_WEIGHT} (no retrieval run {run_id})"
    row = load_run_summary(rt, run_id).best_of(INCLUSIVE)
    if row is None or row.best_weight is None:
        return DEFAULT_TEXT_WEIGHT, f"default {DEFAULT_TEXT_WEIGHT} (no inclusive best weight)"
    return row.best_weight, f"best inclusive Recall@5 weight of run {run_id}"


def stored_json(rt: Runtime, key: str) -> Any:
    """The JSON document stored under ``key``, or None when there is none."""
    return json.loads(rt.artifacts.get_bytes(key)) if rt.artifacts.exists(key) else None


class StageClock:
    """Wall seconds and model calls of each stage of a step (what its summary records)."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._start = time.perf_counter()
        self._calls = rt.llm_usage.totals().calls
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def lap(self, stage: str) -> None:
        now, calls = time.perf_counter(), self._rt.llm_usage.totals().calls
        self.seconds[stage] = round(now - self._start, 3)
        self.calls[stage] = calls - self._calls
        self._start, self._calls = now, calls
