"""``auto`` precision: bf16 only where the CPU computes in it, and the runtime passes it on."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragtrail import hardware
from ragtrail.config import load_settings
from ragtrail.runtime import Runtime


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("fpu sse avx2 avx512f", False),
        ("fpu avx512f avx512_bf16", True),
        ("fpu amx_tile amx_bf16", True),
    ],
)
def test_cpuinfo_flags_decide_bf16(tmp_path: Path, flags: str, expected: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n", encoding="utf-8")
    assert hardware._cpuinfo_has_bf16(cpuinfo) is expected
    assert hardware._cpuinfo_has_bf16(tmp_path / "missing") is False


@pytest.mark.parametrize(("has_bf16", "expected"), [(True, "bfloat16"), (False, "float32")])
def test_auto_dtype_follows_the_cpu(
    monkeypatch: pytest.MonkeyPatch, has_bf16: bool, expected: str
) -> None:
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: has_bf16)
    assert hardware.resolve_model_dtype("auto") == expected
    assert hardware.resolve_model_dtype("float16") == "float16"  # an explicit choice is kept


def test_the_runtime_resolves_auto_and_names_it_in_backends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: True)
    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM_DTYPE", "auto")
    rt = Runtime(load_settings(home=tmp_path / "home"))
    assert rt.settings.generation.llm_dtype == "auto"
    assert rt.llm_dtype == "bfloat16"
    assert rt.backends()["local model dtype"] == "bfloat16"
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: False)
    pinned = Runtime(load_settings(home=tmp_path / "other"))
    assert pinned.llm_dtype == "float32" and "local model dtype" not in pinned.backends()
    rt.close()
    pinned.close()


def test_the_default_is_auto_outside_the_test_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGTRAIL_GENERATION__LLM_DTYPE", raising=False)
    assert load_settings(home=tmp_path).generation.llm_dtype == "auto"
