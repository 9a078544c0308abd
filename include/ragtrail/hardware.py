"""What this machine's processor can compute fast, asked once per process.

The embedder's ``auto`` precision and the local LLMs' ``auto`` dtype both turn into bfloat16 only
where the CPU has bf16 units (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slower than
float32, so ``auto`` stays float32 there.
"""

from __future__ import annotations

import functools
from pathlib import Path

BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""/proc/cpuinfo flags of CPUs that compute in bf16 natively."""


@functools.cache
def cpu_has_bf16() -> bool:
    """True when the CPU has bf16 units: as OpenVINO reports them, else from /proc/cpuinfo."""
    try:
        import openvino as ov
    except ImportError:
        return _cpuinfo_has_bf16(Path("/proc/cpuinfo"))
    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _cpuinfo_has_bf16(cpuinfo: Path) -> bool:
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return bool(BF16_CPU_FLAGS & set(line.partition(":")[2].split()))
    return False


def resolve_model_dtype(setting: str) -> str:
    """The dtype a local model runs in: ``auto`` is bfloat16 on a CPU with bf16 units and
    float32 elsewhere; an explicit dtype is kept as asked."""
    if setting != "auto":
        return setting
    return "bfloat16" if cpu_has_bf16() else "float32"
