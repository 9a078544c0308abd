"""The judge registry: one registration per judge or family, one lookup, no silent overwrite.

The last tests register a scripted judge under a new name and calibrate it through the pipeline's
lookup and through ``ragtrail judge calibrate``: a new judge is one :func:`register_judge` call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ragtrail.judges.contract import NOT_SUPPORTED, SUPPORTED, Judge, JudgeRole
from ragtrail.judges.registry import (
    JUDGES,
    CalibrationRequest,
    DuplicateJudgeError,
    JudgeRegistration,
    JudgeRegistry,
    UnknownJudgeError,
    register_judge,
)
from ragtrail.records import ENTAILMENT_JUDGES, SUFFICIENCY_RATERS, EntailmentJudgeName
from tests.unit.judges._scripted_judges import ScriptedJudge

NEW_JUDGE = "faithfulness.scripted"


def _build(rt: Any, name: str) -> Judge:
    return ScriptedJudge({}, name=name)


def _other_build(rt: Any, name: str) -> Judge:
    return ScriptedJudge({}, name=f"other:{name}")


def _calibrate(rt: Any, names: Sequence[str], request: CalibrationRequest) -> list[Any]:
    return [("calibrated", name, request.corpus) for name in names]


@pytest.fixture
def registry() -> JudgeRegistry:
    reg = JudgeRegistry()
    reg.register(JudgeRegistration("labeller", JudgeRole.LABELLER, _build, _calibrate))
    reg.register(
        JudgeRegistration(
            "critique.<criterion>",
            JudgeRole.CRITIQUE,
            _build,
            _calibrate,
            members=("clarity", "grounded"),
            group="critiques",
        )
    )
    reg.register(JudgeRegistration("sufficiency.llm", JudgeRole.SUFFICIENCY, _build))
    return reg


def test_names_expand_families_in_registration_order(registry: JudgeRegistry) -> None:
    assert registry.names() == [
        "labeller",
        "critique.clarity",
        "critique.grounded",
        "sufficiency.llm",
    ]
    assert registry.names(groups=True)[3] == "critiques"
    assert registry.names(JudgeRole.CRITIQUE) == ["critique.clarity", "critique.grounded"]
    assert "critique.grounded" in registry and "critiques" in registry
    assert "critique.other" not in registry and "critique.<criterion>" not in registry


def test_build_passes_the_asked_name(registry: JudgeRegistry) -> None:
    assert registry.build(None, "critique.clarity").spec.name == "critique.clarity"
    assert registry.build(None, "labeller", role=JudgeRole.LABELLER).spec.name == "labeller"


def test_unknown_names_list_the_known_ones(registry: JudgeRegistry) -> None:
    with pytest.raises(UnknownJudgeError, match=r"unknown judge 'bogus'; known: labeller, crit"):
        registry.build(None, "bogus")
    with pytest.raises(UnknownJudgeError, match="unknown critique 'bogus'; known: clarity, gr"):
        registry.build(None, "critique.bogus")
    with pytest.raises(
        UnknownJudgeError, match=r"unknown sufficiency rater 'labeller'; known: sufficiency\.llm$"
    ):
        registry.build(None, "labeller", role=JudgeRole.SUFFICIENCY)
    with pytest.raises(UnknownJudgeError, match="unknown critique judge 'labeller'"):
        registry.build(None, "labeller", role=JudgeRole.CRITIQUE)
    with pytest.raises(UnknownJudgeError, match=r"known: .*critique\.grounded, critiques, suff"):
        registry.calibrate(None, "bogus", CalibrationRequest(Path("x"), "c"))
    assert issubclass(UnknownJudgeError, ValueError)  # the CLI's clear error, exit code 2


def test_calibrate_one_judge_or_a_whole_group(registry: JudgeRegistry) -> None:
    request = CalibrationRequest(Path("ref.jsonl"), "hb")
    assert registry.calibrate(None, "labeller", request) == [("calibrated", "labeller", "hb")]
    assert registry.calibrate(None, "critiques", request) == [
        ("calibrated", "critique.clarity", "hb"),
        ("calibrated", "critique.grounded", "hb"),
    ]
    with pytest.raises(ValueError, match=r"'sufficiency\.llm' has no calibration"):
        registry.calibrate(None, "sufficiency.llm", request)


def test_taken_names_are_never_silently_replaced(registry: JudgeRegistry) -> None:
    again = JudgeRegistration("labeller", JudgeRole.LABELLER, _build, _calibrate)
    assert registry.register(again) == again  # the same registration (module re-imported): fine
    other = JudgeRegistration("labeller", JudgeRole.LABELLER, _other_build)
    with pytest.raises(DuplicateJudgeError, match="already registered"):
        registry.register(other)
    registry.register(other, replace=True)
    assert registry.build(None, "labeller").spec.name == "other:labeller"
    for clash in ("critique.new", "critiques"):  # a family's namespace and its group are taken
        with pytest.raises(DuplicateJudgeError):
            registry.register(JudgeRegistration(clash, JudgeRole.CRITIQUE, _build))
    family = JudgeRegistration("sufficiency.<kind>", JudgeRole.SUFFICIENCY, _build, members=("x",))
    with pytest.raises(DuplicateJudgeError, match=r"\['sufficiency\.llm'\]"):
        registry.register(family)  # would take over the exact name sufficiency.llm


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("", {}),
        ("has space", {}),
        ("critique.<criterion>", {}),  # a family without members
        ("labeller", {"members": ("a",)}),  # members without a family
        ("labeller", {"group": "all"}),
    ],
)
def test_malformed_registrations_are_refused(name: str, fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        JudgeRegistration(name, JudgeRole.LABELLER, _build, **fields)


def test_enum_names_register_as_plain_strings() -> None:
    entry = JudgeRegistration(EntailmentJudgeName.NLI, JudgeRole.ENTAILMENT, _build)
    assert type(entry.name) is str and entry.names == ("entailment.nli",)


# ------------------------------------------------------------------ the platform's judges


def test_every_judge_of_the_platform_is_registered() -> None:
    from ragtrail.generate.critiques import CRITERIA
    from ragtrail.judges.correctness import JUDGE_NAME
    from ragtrail.pipeline.registered_judges import registered_judges

    registry = registered_judges()
    names = registry.names()
    assert names[0] == "labeller"
    assert {f"critique.{c}" for c in CRITERIA} <= set(names)
    assert {"entailment", *ENTAILMENT_JUDGES, *SUFFICIENCY_RATERS, JUDGE_NAME} <= set(names)
    listed = [n for entry in registry.listed() for n in entry.names]
    assert listed == ["labeller", *(f"critique.{c}" for c in CRITERIA), "entailment"]
    assert registry.names(JudgeRole.SUFFICIENCY) == list(SUFFICIENCY_RATERS)


# ------------------------------------------------------------------- a new judge, end to end


@pytest.fixture
def isolated_judges(monkeypatch: pytest.MonkeyPatch) -> JudgeRegistry:
    """The platform registry with every judge in it, restored after the test."""
    from ragtrail.pipeline.registered_judges import registered_judges

    registry = registered_judges()
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    return registry


def _faithfulness(rt: Any, name: str) -> Judge:
    """A scripted premise/hypothesis judge: supported when the hypothesis says "27 days"."""
    script = {"Staff get 27 days of leave.": SUPPORTED, "The office closes at noon.": NOT_SUPPORTED}
    return ScriptedJudge(
        script,
        name=name,
        role=JudgeRole.ENTAILMENT,
        categories=(SUPPORTED, NOT_SUPPORTED),
        key=lambda item: item.hypothesis,
    )


def _pairs(tmp_path: Path) -> Path:
    rows = [
        ("Staff get 27 days of annual leave.", "Staff get 27 days of leave.", SUPPORTED),
        ("Staff get 27 days of annual leave.", "The office closes at noon.", NOT_SUPPORTED),
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "".join(
            json.dumps({"premise": p, "hypothesis": h, "label": lb}) + "\n" for p, h, lb in rows
        )
    )
    return path


def _register_new_judge() -> None:
    from ragtrail.pipeline.judges import calibrate_on_entailment_pairs

    register_judge(
        NEW_JUDGE, JudgeRole.ENTAILMENT, _faithfulness, calibrate=calibrate_on_entailment_pairs
    )


def test_a_new_judge_is_one_registration(
    isolated_judges: JudgeRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragtrail.config import load_settings
    from ragtrail.pipeline.judges import entailment_judge
    from ragtrail.pipeline.registered_judges import calibrate_judge, judge_by_name
    from ragtrail.runtime import Runtime

    monkeypatch.setenv("RAGTRAIL_JUDGES__BOOTSTRAP_SAMPLES", "0")
    with pytest.raises(UnknownJudgeError):
        judge_by_name(None, NEW_JUDGE)  # type: ignore[arg-type]
    _register_new_judge()
    assert JUDGES is isolated_judges and NEW_JUDGE in isolated_judges
    rt = Runtime(load_settings(home=tmp_path / "home"))
    try:
        assert judge_by_name(rt, NEW_JUDGE).spec.name == NEW_JUDGE
        assert entailment_judge(rt, NEW_JUDGE).spec.role is JudgeRole.ENTAILMENT
        (record,) = calibrate_judge(rt, NEW_JUDGE, CalibrationRequest(_pairs(tmp_path), "hb"))
    finally:
        rt.close()
    assert record.judge == NEW_JUDGE and record.n == 2
    assert record.metrics["accuracy"]["value"] == pytest.approx(1.0)
    with pytest.raises(UnknownJudgeError, match=f"known: .*{NEW_JUDGE}"):
        isolated_judges.build(None, "bogus")


def test_the_cli_calibrates_a_newly_registered_judge(
    isolated_judges: JudgeRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragtrail.cli import app

    monkeypatch.setenv("RAGTRAIL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAGTRAIL_JUDGES__BOOTSTRAP_SAMPLES", "0")
    monkeypatch.delenv("RAGTRAIL_CONFIG", raising=False)
    _register_new_judge()
    args = ["judge", "calibrate", NEW_JUDGE, "--reference", str(_pairs(tmp_path)), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    view = json.loads(result.stdout)
    assert view["judge"] == NEW_JUDGE and view["metrics"]["n"] == 2
    assert view["decision"]["mode"] == "gate"  # perfect agreement meets the entailment bar

    unknown = CliRunner().invoke(app, ["judge", "calibrate", "bogus", "--reference", "x"])
    assert unknown.exit_code == 2
    assert "unknown judge 'bogus'" in unknown.output and NEW_JUDGE in unknown.output
