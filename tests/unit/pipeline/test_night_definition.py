"""The night is bound to its task functions by name: every name must resolve, and every function
must take exactly what its step hands it (the flow's state, the mapped element)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from ragtrail.pipeline.night import NIGHT, Flow, Step

STEPS = [(f, s) for f in NIGHT for s in f.steps]


def _ids() -> list[str]:
    return [f"{f.dag_id}.{s.name}" for f, s in STEPS]


@pytest.mark.parametrize(("flow_", "step"), STEPS, ids=_ids())
def test_step_function_takes_what_the_step_gives(flow_: Flow, step: Step) -> None:
    function = step.function()
    assert callable(function), f"{step.task} is not a function of the tasks module"
    params = inspect.signature(function).parameters
    names = list(params)
    assert names[0] == "rt", f"{step.task} must take the Runtime first"
    given = set(step.inputs) | ({step.map_as} if step.map_as else set())
    keywords = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert given <= keywords, f"{step.task} does not accept {sorted(given - keywords)}"
    required = {n for n in keywords if params[n].default is inspect.Parameter.empty}
    assert required <= given, f"{step.task} needs {sorted(required - given)}, never given"


@pytest.mark.parametrize("flow_", NIGHT, ids=[f.dag_id for f in NIGHT])
def test_every_input_is_provided_before_its_step(flow_: Flow) -> None:
    """Resolved state plus the outputs of earlier unmapped steps cover each step's inputs."""
    available = set(flow_.resolve({}, [], flow_.run_id("manual__test")))
    for step in flow_.steps:
        missing = set(step.inputs) - available
        assert not missing, f"{flow_.dag_id}.{step.name} reads {sorted(missing)} nobody provides"
        if step.map_over:
            assert step.map_over in available and step.map_as
        else:
            available |= set(step.outputs) | ({step.output_as} if step.output_as else set())


def _flow(*steps: Step) -> Flow:
    return Flow(
        dag_id="test_flow",
        doc="",
        run_prefix="t",
        steps=steps,
        params={},
        resolver=lambda params, extra, run_id: {},
    )


def _remote_runtime(home: Any) -> Any:
    from ragtrail.config import load_settings
    from ragtrail.runtime import Runtime

    settings = load_settings(home=home)
    settings.generation.llm = "openai:some-model@http://127.0.0.1:9/v1"
    rt = Runtime(settings)
    assert rt.llm_calls_overlap()
    return rt


def test_ingest_state_carries_the_mass_removal_guard_and_the_owner() -> None:
    """The Param (validated boolean, off by default) reaches the plan step; ``in_process`` is
    only set by ``ragtrail nightly``, which runs every step in its own process."""
    from ragtrail.pipeline.night import INGEST

    spec = INGEST.params["allow_mass_removal"]
    assert spec.default is False and spec.schema == {"type": "boolean"}
    run_id = INGEST.run_id("manual__x")
    default = INGEST.resolve({}, [], run_id)
    assert (default["allow_mass_removal"], default["in_process"]) == (False, False)
    assert default["run_id"] == run_id
    nightly = INGEST.resolve({"allow_mass_removal": True, "in_process": True}, [], run_id)
    assert (nightly["allow_mass_removal"], nightly["in_process"]) == (True, True)
    plan = next(s for s in INGEST.steps if s.name == "plan")
    assert {"allow_mass_removal", "run_id", "in_process"} <= set(plan.inputs)


def test_a_failed_evaluation_of_one_set_lets_the_others_run_then_stops_the_flow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As Airflow runs every instance of a mapped task, and none of the tasks after a failed
    one: ``ragtrail nightly`` evaluates the other sets, then stops with every failure."""
    from ragtrail.failures import EvaluationFailedError, FailedStepsError, FailureCount
    from ragtrail.pipeline.night import run_flow

    calls: list[str] = []

    def evaluate(rt: object, *, item: str) -> dict[str, str]:
        calls.append(f"evaluate {item}")
        if item in ("a", "c"):
            raise EvaluationFailedError(
                "citation evaluation",
                [FailureCount("answers", 4, 4, "connection refused")],
                max_share=0.5,
                setting="citations.max_failed_share",
                run_id=f"night.{item}",
            )
        return {}

    def publish(rt: object) -> dict[str, str]:
        calls.append("publish")
        return {}

    functions = {"evaluate": evaluate, "publish": publish}
    monkeypatch.setattr(Step, "function", lambda self: functions[self.task])
    flow_ = _flow(
        Step("evaluate", "evaluate", "", map_over="items", map_as="item"),
        Step("publish", "publish", "", after_mapped=True),
    )
    with pytest.raises(FailedStepsError) as failed:
        run_flow(None, flow_, {"items": ["a", "b", "c"]})
    assert calls == ["evaluate a", "evaluate b", "evaluate c"]  # no publish
    message = str(failed.value)
    assert "\n" not in message
    assert "run night.a failed: 4 of 4 answers failed" in message
    assert "run night.c failed" in message
    assert [e.run_id for e in failed.value.errors] == ["night.a", "night.c"]

    calls.clear()  # a single failure is raised as it is
    with pytest.raises(EvaluationFailedError) as single:
        run_flow(None, flow_, {"items": ["b", "a"]})
    assert not isinstance(single.value, FailedStepsError) and calls[-1] == "evaluate a"
    calls.clear()
    run_flow(None, flow_, {"items": ["b"]})
    assert calls == ["evaluate b", "publish"]


def test_llm_steps_of_remote_endpoints_run_their_instances_at_once(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every role on an OpenAI-compatible endpoint, a mapped ``llm_api`` step's instances
    run on threads at once, each on its own sibling runtime (its own usage meter); a failed
    instance lets the others finish, and the flow stops after the step with every failure. With
    a local model they run one after another on the runtime itself."""
    import threading

    from ragtrail.config import load_settings
    from ragtrail.failures import EvaluationFailedError, FailedStepsError, FailureCount
    from ragtrail.pipeline.night import run_flow
    from ragtrail.runtime import Runtime

    barrier = threading.Barrier(3, timeout=10)  # breaks unless all three wait at once
    seen: dict[str, object] = {}

    def evaluate(rt: Runtime, *, item: str) -> dict[str, str]:
        seen[item] = rt
        barrier.wait()
        if item == "c":
            raise EvaluationFailedError(
                "citation evaluation",
                [FailureCount("answers", 4, 4, "connection refused")],
                max_share=0.5,
                setting="citations.max_failed_share",
                run_id="night.c",
            )
        return {}

    monkeypatch.setattr(Step, "function", lambda self: evaluate)
    flow_ = _flow(Step("evaluate", "evaluate", "", pool="llm_api", map_over="xs", map_as="item"))
    rt = _remote_runtime(tmp_path / "remote")
    remote = rt.settings
    progress: list[int] = []
    with pytest.raises(EvaluationFailedError) as failed:
        run_flow(
            rt, flow_, {"xs": ["a", "b", "c"]}, progress=lambda s, done, n: progress.append(done)
        )
    assert not isinstance(failed.value, FailedStepsError) and failed.value.run_id == "night.c"
    assert sorted(seen) == ["a", "b", "c"] and progress == [1, 2, 3]
    children = list(seen.values())
    assert rt not in children and len({id(c) for c in children}) == 3
    assert len({id(c.llm_usage) for c in children}) == 3  # each instance counts its own calls
    assert all(c.settings is remote and c.budget_night == rt.budget_night for c in children)

    local = Runtime(load_settings(home=tmp_path / "local"))  # the bundled SmolLM2
    assert not local.llm_calls_overlap()
    barrier.reset()
    seen.clear()
    with pytest.raises(threading.BrokenBarrierError):
        barrier_short = threading.Barrier(3, timeout=0.2)
        monkeypatch.setattr(barrier, "wait", barrier_short.wait)
        run_flow(local, flow_, {"xs": ["a", "b", "c"]})
    assert list(seen.values()) == [local]  # one after another, on the runtime itself
    rt.close()
    local.close()


def test_a_flow_refuses_wiring_that_cannot_run() -> None:
    with pytest.raises(ValueError, match="waits for 'b', which is not a step before it"):
        _flow(Step("a", "a", "", after=("b",)), Step("b", "b", ""))
    with pytest.raises(ValueError, match="step names repeat"):
        _flow(Step("a", "a", ""), Step("a", "b", ""))
    # c reads x, which b writes, but c waits for a only: which x it got would depend on timing
    with pytest.raises(ValueError, match=r"test_flow.c reads \['x'\], which 'b' writes"):
        _flow(
            Step("a", "a", ""),
            Step("b", "b", "", outputs=("x",)),
            Step("c", "c", "", inputs=("x",), after=("a",)),
        )
    chain = _flow(Step("a", "a", ""), Step("b", "b", "", outputs=("x",)), Step("c", "c", ""))
    assert chain.upstream(chain.step("a")) == () and chain.upstream(chain.step("c")) == ("b",)
    assert chain.ancestors(chain.step("c")) == {"a", "b"}
    assert not any(chain.side_by_side(s) for s in chain.steps)


def test_the_evaluations_of_a_night_are_parallel_branches() -> None:
    """Citations, sufficiency and evidence wait for retrieval only; drift for all three."""
    from ragtrail.pipeline.night import EVALUATE

    branches = {"cite", "sufficiency", "evidence"}
    for name in branches:
        step = EVALUATE.step(name)
        assert EVALUATE.upstream(step) == ("evaluate",)
        assert EVALUATE.side_by_side(step)
        assert not branches & EVALUATE.ancestors(step)
    drift = EVALUATE.ancestors(EVALUATE.step("drift"))
    assert branches | {"announce_citations", "announce_sufficiency", "announce_evidence"} <= drift
    for name in ("plan", "evaluate", "drift", "publish", "announce_drift"):
        assert not EVALUATE.side_by_side(EVALUATE.step(name)), name


def _headlines(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "corpus": "k", "snapshot_id": "s", "sets": {}, "metrics_uri": "m"}


def _branching_flow() -> Flow:
    """a, then b and c side by side (c announces), then d after both."""
    return _flow(
        Step("a", "a", "", outputs=("x",)),
        Step("b", "b", "", inputs=("x",), outputs=("y",)),
        Step("c", "c", "", inputs=("x",), after=("a",), emits="citation_metrics"),
        Step("d", "d", "", inputs=("y",), after=("b", "c"), emits="sufficiency_metrics"),
    )


def test_independent_steps_run_side_by_side_on_endpoints(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every model on an endpoint, b and c run at once (the barrier breaks otherwise),
    each on its own sibling runtime; a and d, which overlap nothing, on the runtime itself; each
    step sees what the steps it waits for wrote; the flow's event is its last emitting step's.
    With a local model the steps run one after another on the runtime."""
    import threading

    from ragtrail.config import load_settings
    from ragtrail.pipeline.night import run_flow
    from ragtrail.runtime import Runtime

    barrier = threading.Barrier(2, timeout=10)
    seen: dict[str, Any] = {}
    order: list[str] = []

    def step_function(name: str) -> Any:
        def run(rt: Any, **kwargs: Any) -> dict[str, Any]:
            seen[name] = (rt, dict(kwargs))
            if name in ("b", "c"):
                barrier.wait()
            order.append(name)
            return {
                "a": {"x": 1},
                "b": {"y": 2},
                "c": {"event": _headlines("c")},
                "d": {"event": None},
            }[name]

        return run

    monkeypatch.setattr(Step, "function", lambda self: step_function(self.task))
    flow_ = _branching_flow()
    rt = _remote_runtime(tmp_path / "remote")
    run = run_flow(rt, flow_, {})
    assert order[0] == "a" and order[-1] == "d" and set(order[1:3]) == {"b", "c"}
    assert seen["a"][0] is rt and seen["d"][0] is rt
    assert len({id(seen["b"][0]), id(seen["c"][0]), id(rt)}) == 3  # a sibling each
    assert seen["b"][1] == {"x": 1} and seen["c"][1] == {"x": 1} and seen["d"][1] == {"y": 2}
    assert run.event is None  # d's (the last emitting step), not c's
    assert list(run.seconds) == ["a", "b", "c", "d"]  # in step order, however they ended

    local = Runtime(load_settings(home=tmp_path / "local"))
    order.clear()
    monkeypatch.setattr(barrier, "wait", lambda: None)
    run_flow(local, flow_, {})
    assert order == ["a", "b", "c", "d"]
    assert all(seen[name][0] is local for name in "abcd")
    rt.close()
    local.close()


def test_a_failed_branch_stops_only_what_waits_for_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b's evaluation fails: c, on the other branch, still runs; d, which waits for b, does not;
    the flow raises b's failure. Any other error stops every step not yet started."""
    from ragtrail.failures import EvaluationFailedError, FailureCount
    from ragtrail.pipeline.night import run_flow

    ran: list[str] = []
    error: dict[str, BaseException] = {}

    def step_function(name: str) -> Any:
        def run(rt: Any, **kwargs: Any) -> dict[str, Any]:
            if name in error:
                raise error[name]
            ran.append(name)
            return {"x": 1, "y": 2}

        return run

    monkeypatch.setattr(Step, "function", lambda self: step_function(self.task))
    flow_ = _flow(
        Step("a", "a", "", outputs=("x",)),
        Step("b", "b", "", inputs=("x",), outputs=("y",)),
        Step("c", "c", "", inputs=("x",), after=("a",)),
        Step("c2", "c2", "", after=("c",)),
        Step("d", "d", "", inputs=("y",), after=("b", "c2")),
    )
    rt = _remote_runtime(tmp_path / "remote")
    error["b"] = EvaluationFailedError(
        "citation evaluation",
        [FailureCount("answers", 4, 4, "connection refused")],
        max_share=0.5,
        setting="citations.max_failed_share",
        run_id="night.b",
    )
    with pytest.raises(EvaluationFailedError) as failed:
        run_flow(rt, flow_, {})
    assert failed.value is error["b"]
    assert sorted(ran) == ["a", "c", "c2"]  # the other branch ran to its end; d did not

    ran.clear()
    error.clear()
    error["a"] = RuntimeError("bug")
    with pytest.raises(RuntimeError, match="bug"):
        run_flow(rt, flow_, {})
    assert ran == []
    rt.close()
