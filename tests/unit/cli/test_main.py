"""The ``ragtrail`` program sets the cyclic collector for batch work; an import does not."""

from __future__ import annotations

import gc
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from ragtrail.cli.__main__ import COLLECTOR_THRESHOLDS, main


def test_the_program_sets_the_collector_then_runs_the_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = gc.get_threshold()
    monkeypatch.setattr(sys, "argv", ["ragtrail", "--help"])
    try:
        with pytest.raises(SystemExit) as ended:
            main()
        assert gc.get_threshold() == COLLECTOR_THRESHOLDS != before
    finally:
        gc.set_threshold(*before)
    assert ended.value.code == 0
    assert "nightly" in capsys.readouterr().out


def test_the_script_runs_main_and_an_import_leaves_the_collector_alone() -> None:
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "ragtrail"]
    assert script.value == "ragtrail.cli.__main__:main"
    probe = (
        "import gc; d = gc.get_threshold(); import ragtrail.cli.__main__; "
        "print(gc.get_threshold() == d)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
