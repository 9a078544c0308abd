"""Which QA sets a night evaluates, and how each one changed since its previous run.

Every night evaluates, for the corpus, the latest version of each golden set and the generated
test-set version the test-set event names (or a QA set file given by hand; the shipped sample set
when there is nothing else). Each set is evaluated as its own stored run, ``<night run id>.<set
name>``, so ``ragtrail runs list`` / ``runs compare`` work per set, and each set is compared with
the most recent earlier run on the same QA-set version (:meth:`RunStore.previous_run`) through
the paired comparison of ``ragtrail runs compare``.

The set entries are plain dicts because they travel as XCom: ``name``, ``kind`` (golden /
generated / file), ``qa_set`` (the reference :func:`ragtrail.pipeline.run_io.load_items` reads)
and ``run_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragtrail import jsonsafe
from ragtrail.evaluate.comparison.paired import DEFAULT_RESAMPLES
from ragtrail.paths import sample_qa_set
from ragtrail.pipeline.compare import RunComparisonError, compare_stored_runs
from ragtrail.pipeline.golden import golden_name_for
from ragtrail.pipeline.run_io import GOLDEN_PREFIX, TESTSET_PREFIX
from ragtrail.runtime import Runtime
from ragtrail.storage.runs_store import RunStore
from ragtrail.testset.golden import GoldenSetStore

GOLDEN, GENERATED, FILE = "golden", "generated", "file"
GENERATED_SET = "generated"
"""The name of the generated test set among a night's sets (reserved for golden sets)."""
NO_PREVIOUS_RUN = "no previous run on this version"


def set_run_id(run_id: str, name: str) -> str:
    """The stored run of one set of the night ``run_id``."""
    return f"{run_id}.{name}"


def plan_sets(rt: Runtime, corpus: str, run_id: str, qa_set: str | None) -> list[dict[str, str]]:
    """The sets the night ``run_id`` evaluates: golden sets by name, then the generated or given set.

    ``qa_set`` is ``testset:<version>`` (the generated set), a QA set file, or None: then only the
    golden sets, or the shipped sample file when the corpus has none.
    """
    sets = [
        _entry(v.name, GOLDEN, f"{GOLDEN_PREFIX}{v.version}", run_id)
        for v in GoldenSetStore(rt.engine).latest(corpus)
    ]
    if qa_set and qa_set.startswith(TESTSET_PREFIX):
        sets.append(_entry(GENERATED_SET, GENERATED, qa_set, run_id))
    elif qa_set or not sets:
        path = Path(qa_set) if qa_set else sample_qa_set()
        name = golden_name_for(path)
        if name in {s["name"] for s in sets} | {GENERATED_SET}:
            name = f"{name}-file"
        sets.append(_entry(name, FILE, str(path), run_id))
    return sets


def primary_set(sets: Sequence[Mapping[str, str]]) -> Mapping[str, str]:
    """The set the night's event names as its ``qa_set``: the generated one, else the first."""
    return next((s for s in sets if s["kind"] == GENERATED), sets[0])


def _entry(name: str, kind: str, qa_set: str, run_id: str) -> dict[str, str]:
    return {"name": name, "kind": kind, "qa_set": qa_set, "run_id": set_run_id(run_id, name)}


def change_since_previous(
    rt: Runtime, run_id: str, best: Sequence[Mapping[str, Any]], *, evaluation: str, metric: str
) -> dict[str, Any]:
    """``metric`` per label at this run's best text weight, against the previous run on the same
    QA-set version: previous (A), this run (B), B - A with its paired bootstrap CI, Holm p-value.

    Strict JSON. Without a previous run ``previous_run`` is null with the reason
    :data:`NO_PREVIOUS_RUN`; when the runs cannot be paired, ``rows`` is empty with the reason.
    """
    seed = rt.settings.seed
    n_resamples = rt.settings.retrieval.bootstrap_samples or DEFAULT_RESAMPLES
    out: dict[str, Any] = {
        "run": run_id,
        "metric": metric,
        "n_resamples": n_resamples,
        "seed": seed,
    }
    previous = RunStore(rt.engine).previous_run(run_id)
    if previous is None:
        jsonsafe.mark_undefined(out, "previous_run", NO_PREVIOUS_RUN)
        return out
    out.update(previous_run=previous.run_id, previous_snapshot=previous.snapshot_id, rows=[])
    try:
        comparison = compare_stored_runs(
            rt.engine, previous.run_id, run_id, n_resamples=n_resamples, seed=seed
        )
    except RunComparisonError as exc:
        out.setdefault(jsonsafe.UNDEFINED_KEY, {})["rows"] = str(exc)
        return out
    cells = {
        (str(row.facets.get("label")), _weight(row.facets.get("text_weight"))): row.as_record()
        for row in comparison.rows
        if row.evaluation == evaluation and row.metric == metric
    }
    for record in best:
        label, weight = str(record["label"]), _weight(record.get("best_weight"))
        cell = cells.get((label, weight))
        row: dict[str, Any] = {"label": label, "text_weight": weight}
        if cell is None:
            reason = (
                "this run has no best weight for the label"
                if weight is None
                else "the previous run has no values for this label and weight"
            )
            row["n"] = 0
            for field in ("text_weight", "mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_holm"):
                if row.get(field) is None:
                    jsonsafe.mark_undefined(row, field, reason)
        else:
            row.update({k: cell[k] for k in ("mean_a", "mean_b", "diff", "ci_low", "ci_high")})
            row.update(p_holm=cell["p_holm"], n=cell["n"], undefined=dict(cell["undefined"]))
        out["rows"].append(row)
    return out


def _weight(value: Any) -> float | None:
    return None if value is None else round(float(value), 6)
