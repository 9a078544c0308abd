"""Airflow adapter: builds each DAG from the core's one definition of the night.

``ragtrail.pipeline.night`` says what the night is (flows, steps, inputs, outputs, pools, Assets,
Params); this module only translates it into Airflow objects:

- a ``resolve`` task turns the Params and the triggering Asset events into the flow's state (the
  newest event wins; the choice itself is core code, shared with ``ragtrail nightly``);
- one task per step, running the step's library function in the worker
  (:func:`~ragtrail.pipeline.night.run_step_in_worker`); its result (strict JSON, checked) is the
  XCom; it is downstream of the steps it waits for (``Step.after``, by default the step before
  it), so steps that do not wait for each other run in parallel;
- a mapped step is expanded over the list an earlier step returned (through a small task that
  publishes that list as a return value: Airflow maps only over those);
- a step that emits an Asset yields its event extras as ``Metadata`` on its outlet; one marked
  ``skip_without_event`` ends skipped when it has no event, so Airflow registers none (a task
  with outlets that succeeds always registers an event, with empty extras if need be), and the
  step after it runs on ``none_failed``;
- before a step runs, the ``ragtrail_*`` Airflow connections become settings
  (``plugins/ragtrail_connections.py``).

Nothing here runs at parse time beyond building the DAG objects: no I/O, no heavy import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from typing import Any

from airflow.sdk import DAG, Metadata, Param, TriggerRule, dag, task
from airflow.sdk.exceptions import AirflowSkipException
from assets import ASSETS_BY_KEY
from dag_defaults import START_DATE, default_args
from ragtrail_connections import airflow_lookup, apply_connections

from ragtrail.pipeline.night import Flow, Step, flow, flow_state, run_step_in_worker

# tqdm reads its settings when first imported: disabled here, before any task imports it, so
# model loading never draws progress bars into task logs (where stderr reads as errors).
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _events(flow_: Flow, triggering_asset_events: Any) -> list[dict[str, Any]]:
    """The triggering events of the Asset the flow listens to, as plain data."""
    if not flow_.listens_to or not triggering_asset_events:
        return []
    asset = ASSETS_BY_KEY[flow_.listens_to]
    return [
        {"timestamp": event.timestamp.isoformat(), "extra": dict(event.extra or {})}
        for event in triggering_asset_events.get(asset, [])
    ]


def _step_callable(flow_: Flow, step: Step) -> Callable[..., Any]:
    """A fresh task callable for ``step`` (one per task, so names and docs are the step's)."""

    def state_of(state: dict[str, Any], upstream: dict[str, Any]) -> dict[str, Any]:
        apply_connections(airflow_lookup)  # credentials from Airflow connections, at run time
        return flow_state(flow_, state, {name: dict(result) for name, result in upstream.items()})

    if step.emits:
        asset = ASSETS_BY_KEY[step.emits]

        def run_emitting(
            state: dict[str, Any], upstream: dict[str, Any]
        ) -> Generator[Metadata, None, dict[str, Any]]:
            result = run_step_in_worker(flow_, step, state_of(state, upstream), {})
            if result.get("event") is not None:
                yield Metadata(asset, result["event"])
            elif step.skip_without_event:
                # A successful task with outlets always registers an event; a skipped one none.
                raise AirflowSkipException(f"{step.name}: nothing to announce")
            return result

        function: Callable[..., Any] = run_emitting
    elif step.map_over:

        def run_mapped(state: dict[str, Any], upstream: dict[str, Any], item: Any) -> Any:
            assert step.map_as is not None
            return run_step_in_worker(flow_, step, state_of(state, upstream), {step.map_as: item})

        function = run_mapped
    else:

        def run_plain(state: dict[str, Any], upstream: dict[str, Any]) -> Any:
            return run_step_in_worker(flow_, step, state_of(state, upstream), {})

        function = run_plain
    function.__name__ = step.name
    function.__doc__ = step.doc
    return function


def _resolve_callable(flow_: Flow) -> Callable[..., dict[str, Any]]:
    def resolve(
        params: dict[str, Any] | None = None,
        triggering_asset_events: Any = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """The flow's state from the Params and the newest triggering Asset event."""
        assert params is not None and run_id is not None  # injected by Airflow
        events = _events(flow_, triggering_asset_events)
        return flow_.resolve(dict(params), events, flow_.run_id(run_id))

    return resolve


def _doc(flow_: Flow) -> str:
    rows = "\n".join(
        f"| `{s.name}` | `{s.task}` | {s.doc}"
        + (f"; mapped over `{s.map_over}`" if s.map_over else "")
        + (f"; pool `{s.pool}`" if s.pool else "")
        + (f"; queue `{s.queue}`" if s.queue else "")
        + (f"; emits the **{s.emits} asset**" if s.emits else "")
        + " |"
        for s in flow_.steps
    )
    trigger = f"the **{flow_.listens_to} asset**" if flow_.listens_to else f"`{flow_.cron}`"
    return (
        f"### {flow_.dag_id}\n\n{flow_.doc}\n\nScheduled on {trigger}; built from "
        f"`ragtrail.pipeline.night` (the same steps `ragtrail nightly` runs).\n\n"
        f"| task | library call (`ragtrail.pipeline.tasks`) | notes |\n|---|---|---|\n"
        f"| `resolve` | `Flow.resolve` | state from the Params and the newest triggering event |\n"
        f"{rows}\n"
    )


def build_dag(dag_id: str) -> DAG:
    """The DAG of the night's flow ``dag_id``."""
    flow_ = flow(dag_id)

    @dag(
        dag_id=flow_.dag_id,
        schedule=ASSETS_BY_KEY[flow_.listens_to] if flow_.listens_to else flow_.cron,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=["ragtrail", *flow_.tags],
        doc_md=_doc(flow_),
        default_args=default_args(),
        params={
            name: Param(spec.default, **spec.schema, title=spec.title, description=spec.description)
            for name, spec in flow_.params.items()
        },
    )
    def build() -> None:
        state = task(task_id="resolve")(_resolve_callable(flow_))()
        upstream: dict[str, Any] = {}  # the XComs of the unmapped steps, by step name
        tasks: dict[str, Any] = {}
        for step in flow_.steps:
            waits_for = flow_.upstream(step)
            options: dict[str, Any] = {"task_id": step.name}
            if step.pool:
                options["pool"] = step.pool
            if step.queue:
                options["queue"] = step.queue
            if step.emits:
                options["outlets"] = [ASSETS_BY_KEY[step.emits]]
            if step.after_mapped or any(flow_.step(n).skip_without_event for n in waits_for):
                # A run with nothing to map (no changed files, quotas already met) or with
                # nothing to announce (a skipped announcement) goes on.
                options["trigger_rule"] = TriggerRule.NONE_FAILED
            if step.one_at_a_time:
                options["max_active_tis_per_dagrun"] = 1
            operator = task(**options)(_step_callable(flow_, step))
            # Only the results of the steps it waits for: any other XCom would make it wait.
            ancestors = flow_.ancestors(step)
            given = {name: xcom for name, xcom in upstream.items() if name in ancestors}
            if step.map_over:
                items = task(task_id=f"list_{step.map_over}_for_{step.name}")(
                    _list_getter(flow_, step.map_over)
                )(state=state, upstream=given)
                current = operator.partial(state=state, upstream=given).expand(item=items)
            else:
                current = operator(state=state, upstream=given)
                upstream[step.name] = current
            for name in waits_for:
                tasks[name] >> current
            if not waits_for:
                state >> current
            tasks[step.name] = current

    return build()


def _list_getter(flow_: Flow, key: str) -> Callable[..., list[Any]]:
    def list_items(state: dict[str, Any], upstream: dict[str, Any]) -> list[Any]:
        """Re-publish a list from an earlier step as a return value to map over."""
        results = {name: dict(result) for name, result in upstream.items()}
        return list(flow_state(flow_, state, results).get(key) or [])

    return list_items
