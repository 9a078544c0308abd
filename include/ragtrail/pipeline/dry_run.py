"""``ragtrail nightly --dry-run``: what the next night's LLM steps would cost, without a model.

For each budgeted step instance the night would run (the judges' calibration, test-set
generation, and citations / sufficiency / evidence on each QA set the night evaluates) it makes
the :class:`~ragtrail.pipeline.budgets.StepEstimate` the step itself makes before it runs, then
walks the night in order, taking each instance's estimate off the night's and the step's budgets,
so each instance shows the n the budgets would leave it. The steps that call no model (ingest,
retrieval, drift, report) are estimated from the previous night's wall time less its LLM steps.

Assumptions, said in the output: the source is unchanged since the last ingest (so the snapshot
and the QA-set versions are the current ones, and generation reuses the current test-set version
when it was built on the current snapshot); no model is loaded and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ragtrail.config import BUDGETED_STEPS, BudgetLimits
from ragtrail.jsonsafe import JsonObject
from ragtrail.pipeline.budgets import (
    Remaining,
    StepEstimate,
    affordable_items,
    binding_reason,
    estimate_step,
    generation_fingerprint,
    step_fingerprint,
    step_models,
)
from ragtrail.pipeline.evaluation_sets import plan_sets
from ragtrail.pipeline.run_io import load_items, sample_items
from ragtrail.pipeline.sample_size import mde_at, sized_items, step_spread
from ragtrail.records import LABELS, QASetRef, SetKind
from ragtrail.runtime import Runtime
from ragtrail.storage.budget_store import BudgetStore

DRY_RUN_NIGHT = "dry-run"
"""The night id the estimates are made for (no such night exists: all history counts)."""


@dataclass(frozen=True)
class PlannedStep:
    """One budgeted step instance of the estimated night: its estimate and the n the budgets
    leave it (``reason`` when fewer than asked)."""

    estimate: StepEstimate
    n: int
    reason: str | None = None
    note: str | None = None
    spread: tuple[float, str] | None = None

    @property
    def mde(self) -> float | None:
        """What a paired comparison on this n could detect (QA-set steps; None otherwise)."""
        return None if self.spread is None else mde_at(self.spread[0], self.n)

    def to_json(self) -> JsonObject:
        out = {**self.estimate.to_json(), "planned_items": self.estimate.items}
        out.update(self.estimate.for_items(self.n))
        out["n"] = self.n
        out["bounded_by_budget"] = self.reason
        out["note"] = self.note
        out["mde"] = self.mde
        out["mde_spread"] = None if self.spread is None else self.spread[1]
        return out


@dataclass
class NightEstimate:
    """The dry run's answer: every instance in night order, and the other steps' minutes."""

    corpus: str
    steps: list[PlannedStep] = field(default_factory=list)
    other_minutes: float | None = None
    other_source: str = ""
    assumptions: list[str] = field(default_factory=list)

    @property
    def calls(self) -> float:
        return sum(float(s.to_json()["calls"]) for s in self.steps)

    @property
    def llm_minutes(self) -> float:
        return sum(float(s.to_json()["minutes"]) for s in self.steps)

    @property
    def minutes(self) -> float | None:
        """The whole night's minutes (None when the other steps have no history)."""
        if self.other_minutes is None:
            return None
        return self.llm_minutes + self.other_minutes

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "corpus": self.corpus,
            "steps": [s.to_json() for s in self.steps],
            "totals": {
                "calls": round(self.calls, 1),
                "llm_minutes": round(self.llm_minutes, 3),
                "other_minutes": None
                if self.other_minutes is None
                else round(self.other_minutes, 3),
                "minutes": None if self.minutes is None else round(self.minutes, 3),
            },
            "other_source": self.other_source,
            "assumptions": self.assumptions,
        }
        if self.other_minutes is None:
            out["undefined"] = {
                "other_minutes": "no finished night in the history",
                "minutes": "no finished night in the history",
            }
        return out


def estimate_night(
    rt: Runtime, *, corpus: str, qa_set: str | None = None, generate: bool = True
) -> NightEstimate:
    """The estimate of the next night on ``corpus`` (see the module docstring)."""
    night = NightEstimate(
        corpus,
        assumptions=[
            "the source is unchanged since the last ingest",
            "no model is called; estimates come from the run history and the cache",
        ],
    )
    instances: list[Instance] = []
    snapshot = rt.store.latest_snapshot(corpus)
    snapshot_id = snapshot.snapshot_id if snapshot else None
    generated: str | None = None
    if generate:
        instances += _generation(rt, corpus, snapshot_id)
        generated = _current_version(rt, corpus)
    sets_ref = str(QASetRef.generated(generated)) if generated else qa_set
    for planned in plan_sets(rt, corpus, DRY_RUN_NIGHT, sets_ref):
        instances += _set_steps(rt, corpus, snapshot_id, planned.name, planned.qa_set)
    night.steps = _apply_budgets(rt, instances)
    _other_steps(rt, corpus, night)
    return night


Instance = tuple[StepEstimate, str | None, tuple[float, str] | None]
"""A step instance to walk: its estimate, a note, and (QA-set steps) the spread behind its MDE."""


def _generation(rt: Runtime, corpus: str, snapshot_id: str | None) -> list[Instance]:
    from ragtrail.pipeline.night_judges import uncalibrated_night_judges

    missing = uncalibrated_night_judges(rt)
    out = [
        (
            estimate_step(
                rt, "calibration", corpus=corpus, scope="calibration", items=len(missing)
            ),
            f"{len(missing)} judges without calibration" if missing else "every judge calibrated",
            None,
        )
    ]
    version = _current_version(rt, corpus)
    reused = version is not None and _version_snapshot(rt, corpus) == snapshot_id
    per_label = rt.settings.generation.per_label
    items = 0 if reused else per_label * len(LABELS)
    out.append(
        (
            estimate_step(
                rt,
                "generation",
                corpus=corpus,
                scope="generation",
                items=items,
                fingerprint=generation_fingerprint(rt, corpus, snapshot_id, None),
            ),
            f"corpus unchanged: version {version} is reused" if reused else None,
            None,
        )
    )
    return out


def _current_version(rt: Runtime, corpus: str) -> str | None:
    from ragtrail.testset.store import TestSetStore

    latest = TestSetStore(rt.engine).latest_version(corpus)
    return None if latest is None else str(latest["version"])


def _version_snapshot(rt: Runtime, corpus: str) -> str | None:
    from ragtrail.testset.store import TestSetStore

    latest = TestSetStore(rt.engine).latest_version(corpus)
    return None if latest is None else str(latest["snapshot_id"])


def _set_steps(
    rt: Runtime, corpus: str, snapshot_id: str | None, name: str, ref: QASetRef
) -> list[Instance]:
    """The citations, sufficiency and evidence instances of one QA set (the ones its settings
    enable), each with the fingerprint the step will compute, its n sized as the step sizes it
    (``target_mde``) and the history's spread of its primary metric."""
    items, version, _ = load_items(rt, ref)
    seed = rt.settings.seed
    cs, ss, es = rt.settings.citations, rt.settings.sufficiency, rt.settings.evidence
    golden = ref.kind is SetKind.GOLDEN
    out = []
    specs = [
        (
            "citations",
            cs.enabled,
            cs.max_items,
            {
                **cs.model_dump(mode="json"),
                "mixture": cs.mixture,
                "scenarios": list(cs.scenarios),
                "scenario_items": cs.scenario_items,
            },
        ),
        (
            "sufficiency",
            ss.enabled and (golden or ss.qa_sets != "golden"),
            ss.max_items,
            {**ss.model_dump(mode="json"), "selective": rt.settings.selective.enabled},
        ),
        (
            "evidence",
            es.enabled and (golden or es.qa_sets != "golden"),
            es.max_items,
            {
                **es.model_dump(mode="json"),
                "noise_ratios": sorted(set(es.noise_ratios) | {0.0}),
            },
        ),
    ]
    for step, enabled, max_items, settings in specs:
        if not enabled:
            continue
        target = getattr(rt.settings, step).target_mde
        sized, _ = sized_items(
            rt, corpus, step, target_mde=target, max_items=max_items, available=len(items)
        )
        planned = len(sample_items(items, sized, seed))
        fingerprint = step_fingerprint(
            step,
            corpus=corpus,
            snapshot=snapshot_id,
            qa_set_version=version,
            seed=seed,
            models=step_models(rt, step),
            settings={k: v for k, v in settings.items() if k != "max_items"},
        )
        estimate = estimate_step(
            rt, step, corpus=corpus, scope=name, items=planned, fingerprint=fingerprint
        )
        out.append((estimate, None, step_spread(rt, corpus, step)))
    return out


def _apply_budgets(rt: Runtime, instances: Sequence[Instance]) -> list[PlannedStep]:
    """Walk the instances in night order, each taking its estimate off what the night's and its
    step's budgets leave."""
    bs = rt.settings.budgets
    used: dict[str, dict[str, float]] = {}
    out = []
    for estimate, note, spread in instances:
        left = _left(bs.night, used.get("night", {}), "night", bs.reserve_minutes)
        step_limits: BudgetLimits = (
            getattr(bs.steps, estimate.step) if estimate.step in BUDGETED_STEPS else BudgetLimits()
        )
        step_left = _left(step_limits, used.get(estimate.step, {}), f"step {estimate.step}", 0.0)
        remaining = _tighter(left, step_left)
        fits = affordable_items(estimate, remaining)
        n = estimate.items if fits is None else max(0, min(estimate.items, fits))
        reason = binding_reason(estimate, remaining, n) if n < estimate.items else None
        totals = estimate.for_items(n)
        for scope in ("night", estimate.step):
            acc = used.setdefault(scope, {})
            for key in ("calls", "tokens", "cost_usd", "minutes"):
                acc[key] = acc.get(key, 0.0) + float(totals[key] or 0.0)
        out.append(PlannedStep(estimate, n, reason, note, spread))
    return out


def _left(limits: BudgetLimits, used: dict[str, float], scope: str, reserve: float) -> Remaining:
    values = {
        "calls": limits.max_calls,
        "tokens": limits.max_tokens,
        "cost_usd": limits.max_cost_usd,
        "minutes": None if limits.max_minutes is None else limits.max_minutes - reserve,
    }
    left = {k: None if v is None else v - used.get(k, 0.0) for k, v in values.items()}
    return Remaining(**left, source={k: scope for k, v in left.items() if v is not None})


def _tighter(a: Remaining, b: Remaining) -> Remaining:
    out: dict[str, float | None] = {}
    source: dict[str, str] = {}
    for key in ("calls", "tokens", "cost_usd", "minutes"):
        va, vb = getattr(a, key), getattr(b, key)
        if va is None and vb is None:
            out[key] = None
        elif vb is None or (va is not None and va <= vb):
            out[key], source[key] = va, a.source.get(key, "")
        else:
            out[key], source[key] = vb, b.source.get(key, "")
    return Remaining(**out, source=source)


def _other_steps(rt: Runtime, corpus: str, night: NightEstimate) -> None:
    """The previous night's wall minutes less its LLM steps' (ingest, retrieval, report)."""
    store = BudgetStore(rt.engine)
    last = store.last_closed_night(corpus)
    if last is None:
        night.other_source = "no finished night in the history"
        return
    llm_seconds = sum(r.seconds for r in store.night_rows(last.night))
    night.other_minutes = max(0.0, (last.seconds - llm_seconds) / 60.0)
    night.other_source = f"night {last.night}: {last.seconds / 60:.2f} min, LLM steps aside"
