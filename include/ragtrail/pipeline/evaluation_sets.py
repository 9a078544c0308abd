"""Which QA sets a night evaluates, and how each one changed since its previous run.

Every night evaluates, for the corpus, the latest version of each golden set and the generated
test-set version the test-set event names (or a QA set file given by hand; the shipped sample set
when there is nothing else). Each set is evaluated as its own stored run, ``<night run id>.<set
name>``, so ``ragtrail runs list`` / ``runs compare`` work per set, and each set is compared with
the most recent earlier complete run on the same QA-set version (:meth:`RunStore.previous_run`:
runs that are running, failed or abandoned are skipped) through the paired comparison of
``ragtrail runs compare``.

The golden sets do not wait for the test set: their evaluation (the ``evaluate_golden_sets``
flow, on the corpus event, beside the generation) records the runs it starts
(:func:`golden_evaluation_started`), evaluates them and hands them over (:func:`hand_over`);
the night's evaluation of the same snapshot under the same settings plans those runs as
``reused`` (:func:`handed_over_runs`), skips their retrieval, sufficiency and evidence steps,
cites them beside the test set (the golden evaluation leaves the citations to it: the test set's
come last, and the golden sets' requests fill their waves) and publishes and checks them with the
test set. When the golden evaluation is still running (a scheduler starts the night's
evaluation on the test-set event, whichever ends first), its plan waits for the hand-over
(:func:`await_golden_runs`, at most ``retrieval.golden_wait_s`` after that evaluation started).
Without a hand-over (the golden evaluation not run, failed, too slow, or other settings) it
evaluates the golden sets itself.

Each set is a :class:`~ragtrail.summaries.qa_sets.PlannedSet` (name, kind, typed QA-set
reference, run id); it travels as XCom in its JSON form.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from ragtrail.artifact_keys import golden_runs_key, golden_started_key
from ragtrail.evaluate.comparison.paired import DEFAULT_RESAMPLES
from ragtrail.paths import sample_qa_set
from ragtrail.pipeline.budgets import step_fingerprint
from ragtrail.pipeline.compare import RunComparisonError, compare_stored_runs
from ragtrail.pipeline.golden import golden_name_for
from ragtrail.pipeline.run_io import load_items
from ragtrail.records import QAItem, QASetRef, SetKind
from ragtrail.runtime import Runtime
from ragtrail.storage.db import utcnow
from ragtrail.storage.runs_store import FAILED, RunStore
from ragtrail.summaries.qa_sets import GoldenRuns, PlannedSet
from ragtrail.summaries.retrieval_summary import BestRow, Change, ChangeRow
from ragtrail.testset.golden import GoldenSetStore

GENERATED_SET = "generated"
"""The name of the generated test set among a night's sets (reserved for golden sets)."""
NO_PREVIOUS_RUN = "no previous run on this version"
POLL_S = 5.0
"""How often the night's evaluation looks for a running golden evaluation's hand-over."""


def set_run_id(run_id: str, name: str) -> str:
    """The stored run of one set of the night ``run_id``."""
    return f"{run_id}.{name}"


def golden_sets(
    rt: Runtime, corpus: str, run_id: str, reusable: Mapping[str, PlannedSet] | None = None
) -> list[PlannedSet]:
    """The latest version of each golden set of the corpus, by name, as sets of the night
    ``run_id``; one whose version ``reusable`` holds (:func:`handed_over_runs`) is that run,
    marked ``reused``."""
    sets = []
    for v in GoldenSetStore(rt.engine).latest(corpus):
        planned = _planned(v.name, QASetRef.golden(v.version), run_id)
        done = (reusable or {}).get(v.name)
        if done is not None and done.qa_set == planned.qa_set:
            planned = done.model_copy(update={"reused": True})
        sets.append(planned)
    return sets


def plan_sets(
    rt: Runtime,
    corpus: str,
    run_id: str,
    qa_set: str | None,
    reusable: Mapping[str, PlannedSet] | None = None,
) -> list[PlannedSet]:
    """The sets the night ``run_id`` evaluates: golden sets by name (:func:`golden_sets`), then
    the generated or given set.

    ``qa_set`` is ``testset:<version>`` (the generated set), a QA set file, or None: then only the
    golden sets, or the shipped sample file when the corpus has none.
    """
    sets = golden_sets(rt, corpus, run_id, reusable)
    ref = QASetRef.parse(qa_set) if qa_set else None
    if ref is not None and ref.kind is SetKind.GENERATED:
        sets.append(_planned(GENERATED_SET, ref, run_id))
    elif ref is not None or not sets:
        path = Path(ref.value) if ref is not None else sample_qa_set()
        name = golden_name_for(path)
        if name in {s.name for s in sets} | {GENERATED_SET}:
            name = f"{name}-file"
        sets.append(_planned(name, QASetRef(SetKind.FILE, str(path)), run_id))
    return sets


def evaluation_fingerprint(rt: Runtime, text_weights: Sequence[float] | None) -> str:
    """What a set's evaluation depends on besides its items and the snapshot: the text weights
    scanned and every setting (the models, seeds and each step's settings). A golden run made
    under another fingerprint is not reused; comparing every setting errs on evaluating again."""
    weights = [float(w) for w in text_weights] if text_weights else None
    return step_fingerprint(
        "evaluation", text_weights=weights, settings=rt.settings.model_dump(mode="json")
    )


def _put_golden_runs(
    rt: Runtime,
    key_for: Callable[[str, str, str], str],
    corpus: str,
    snapshot_id: str,
    sets: Sequence[PlannedSet],
    text_weights: Sequence[float] | None,
) -> GoldenRuns:
    """The golden sets' runs, written now at ``key_for(corpus, snapshot, fingerprint)``."""
    runs = GoldenRuns(
        corpus=corpus,
        snapshot_id=snapshot_id,
        fingerprint=evaluation_fingerprint(rt, text_weights),
        sets=list(sets),
        at=utcnow().isoformat(),
    )
    rt.artifacts.put_bytes(key_for(corpus, snapshot_id, runs.fingerprint), runs.dumps().encode())
    return runs


def golden_evaluation_started(
    rt: Runtime,
    corpus: str,
    snapshot_id: str,
    sets: Sequence[PlannedSet],
    text_weights: Sequence[float] | None,
) -> GoldenRuns:
    """Record the golden sets' runs this evaluation starts, so that the night's evaluation of
    the same snapshot under the same settings waits for their hand-over
    (:func:`await_golden_runs`) instead of evaluating the same sets again."""
    return _put_golden_runs(rt, golden_started_key, corpus, snapshot_id, sets, text_weights)


def hand_over(
    rt: Runtime,
    corpus: str,
    snapshot_id: str,
    sets: Sequence[PlannedSet],
    text_weights: Sequence[float] | None,
) -> GoldenRuns:
    """Record the golden sets' runs (retrieval, sufficiency and evidence done; the citations are
    the night's evaluation's) for the night's evaluation of the same snapshot under the same
    settings (:func:`handed_over_runs`)."""
    return _put_golden_runs(rt, golden_runs_key, corpus, snapshot_id, sets, text_weights)


def _stored_golden_runs(rt: Runtime, key: str) -> GoldenRuns | None:
    """The golden sets' runs :func:`_put_golden_runs` wrote at ``key``; None when nothing was."""
    if not rt.artifacts.exists(key):
        return None
    return GoldenRuns.from_json(rt.artifacts.get_bytes(key))


def handed_over_runs(
    rt: Runtime, corpus: str, snapshot_id: str, text_weights: Sequence[float] | None
) -> dict[str, PlannedSet]:
    """The golden sets' runs handed over (:func:`hand_over`) for this snapshot and these
    settings, by set name; a run that failed since, or is gone, is not among them."""
    fingerprint = evaluation_fingerprint(rt, text_weights)
    return _reusable(rt, golden_runs_key(corpus, snapshot_id, fingerprint))


def _reusable(rt: Runtime, handed_key: str) -> dict[str, PlannedSet]:
    """:func:`handed_over_runs`, from the hand-over at ``handed_key``."""
    handed = _stored_golden_runs(rt, handed_key)
    if handed is None:
        return {}
    runs = RunStore(rt.engine)
    reusable = {}
    for planned in handed.sets:
        run = runs.get_run(planned.run_id)
        if run is not None and run.status != FAILED:
            reusable[planned.name] = planned
    return reusable


def await_golden_runs(
    rt: Runtime,
    corpus: str,
    snapshot_id: str,
    text_weights: Sequence[float] | None,
    *,
    clock: Callable[[], datetime] = utcnow,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[dict[str, PlannedSet], float]:
    """:func:`handed_over_runs`, once the golden sets' evaluation of this snapshot under these
    settings has handed its runs over, when it is still running: started at most
    ``retrieval.golden_wait_s`` ago, none of its runs failed. Also the seconds waited."""
    fingerprint = evaluation_fingerprint(rt, text_weights)
    handed_key = golden_runs_key(corpus, snapshot_id, fingerprint)
    started_key = golden_started_key(corpus, snapshot_id, fingerprint)
    begin = clock()
    while True:
        reusable = _reusable(rt, handed_key)
        waited = (clock() - begin).total_seconds()
        left = 0.0 if reusable else _golden_wait_left(rt, started_key, clock())
        if left <= 0.0:
            return reusable, waited
        sleep(min(POLL_S, left))


def _golden_wait_left(rt: Runtime, started_key: str, now: datetime) -> float:
    """Seconds the night's evaluation may still wait for the golden evaluation recorded at
    ``started_key`` (0: none started, started too long ago, or one of its runs failed)."""
    started = _stored_golden_runs(rt, started_key)
    if started is None or started.at is None:
        return 0.0
    runs = RunStore(rt.engine)
    for planned in started.sets:
        run = runs.get_run(planned.run_id)
        if run is not None and run.status == FAILED:
            return 0.0
    deadline = datetime.fromisoformat(started.at) + timedelta(
        seconds=rt.settings.retrieval.golden_wait_s
    )
    return max(0.0, (deadline - now).total_seconds())


def primary_set(sets: Sequence[PlannedSet]) -> PlannedSet:
    """The set the night's event names as its ``qa_set``: the generated one, else the first."""
    return next((s for s in sets if s.kind is SetKind.GENERATED), sets[0])


def _planned(name: str, ref: QASetRef, run_id: str) -> PlannedSet:
    return PlannedSet(name=name, kind=ref.kind, qa_set=ref, run_id=set_run_id(run_id, name))


def change_since_previous(
    rt: Runtime, run_id: str, best: Sequence[BestRow], *, evaluation: str, metric: str
) -> Change:
    """``metric`` per label at this run's best text weight, against the previous run on the same
    QA-set version: previous (A), this run (B), B - A with its paired CI, Holm p-value and MDE.

    Without a previous run ``previous_run`` is null with the reason :data:`NO_PREVIOUS_RUN`; when
    the runs cannot be paired, ``rows`` is empty with the reason.
    """
    seed = rt.settings.seed
    n_resamples = rt.settings.retrieval.bootstrap_samples or DEFAULT_RESAMPLES
    head = {"run": run_id, "metric": metric, "n_resamples": n_resamples, "seed": seed}
    previous = RunStore(rt.engine).previous_run(run_id)
    if previous is None:
        return Change(**head, previous_run=None, undefined={"previous_run": NO_PREVIOUS_RUN})
    head |= {"previous_run": previous.run_id, "previous_snapshot": previous.snapshot_id}
    try:
        comparison = compare_stored_runs(
            rt.engine, previous.run_id, run_id, n_resamples=n_resamples, seed=seed, own=(run_id,)
        )
    except RunComparisonError as exc:
        return Change(**head, rows=[], undefined={"rows": str(exc)})
    cells = {
        (str(row.facets.get("label")), _weight(row.facets.get("text_weight"))): row.as_record()
        for row in comparison.rows
        if row.evaluation == evaluation and row.metric == metric
    }
    rows = []
    for record in best:
        weight = _weight(record.best_weight)
        cell = cells.get((record.label, weight))
        if cell is None:
            reason = (
                "this run has no best weight for the label"
                if weight is None
                else "the previous run has no values for this label and weight"
            )
            undefined = dict.fromkeys(_CHANGE_FIELDS, reason)
            if weight is not None:
                del undefined["text_weight"]
            rows.append(ChangeRow(label=record.label, text_weight=weight, n=0, undefined=undefined))
        else:
            rows.append(
                ChangeRow(
                    label=record.label,
                    text_weight=weight,
                    n=cell["n"],
                    **{k: cell[k] for k in _CHANGE_FIELDS if k != "text_weight"},
                    undefined=dict(cell["undefined"]),
                    ci_method=cell["ci_method"],
                    mde=cell["mde"],
                )
            )
    return Change(**head, rows=rows)


_CHANGE_FIELDS = ("text_weight", "mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_holm")


def _weight(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def items_of_sets(
    rt: Runtime, corpus: str, run_id: str, qa_set: str | None = None
) -> tuple[list[QAItem], list[str]]:
    """Every question of the QA sets a night evaluates (``qa_set``: that set in place of the
    generated one), once per qid (first set wins)."""
    items: dict[str, QAItem] = {}
    names = []
    for entry in plan_sets(rt, corpus, run_id, qa_set):
        loaded, version, _ = load_items(rt, entry.qa_set)
        names.append(f"{entry.name}@{version}")
        for item in loaded:
            items.setdefault(item.qid, item)
    return list(items.values()), names
