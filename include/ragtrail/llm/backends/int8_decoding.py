"""Int8 weights for the decoding steps of a local causal model on the CPU (opt-in).

A decoding step feeds the model one token per row, a handful of rows, so its linear layers are
bound by reading their weights from memory: on SmolLM2-135M in bf16 the 210 decoder-layer
matrices (about 210 MB) are read once per step, however many rows share it. Each such layer
keeps, beside its weight, a copy quantised to int8 per output channel (symmetric, one scale per
row of the weight), and multiplies inputs of at most :data:`INT8_MAX_ROWS` rows with torch's
int8-weight kernel (``aten._weight_int8pack_mm``), which reads half the bytes. Larger inputs
(prompts' prefill, scoring, anything batched wide) keep the original weight, where the kernel
would be slower than the bf16 matmul.

The output embedding (the vocabulary projection) stays in its own precision: in int8 too, it
raised the share of next tokens that differ from the native model's from 3.9% to 4.3% on the
sample corpus (BENCHMARKS.md, "Int8 decoding weights"). Even without it the outputs change more
than bf16 changes them from float32 (3.9% against 2.4% there), so the option is off by default
and part of a backend's model id (``+decode:int8``): cached completions of one setting are never
served for the other.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

INT8_MAX_ROWS = 12
"""Inputs of at most this many rows (tokens) use the int8 copy. Measured on the night's 2-core
CPU with the model's 30 layers of weights cycled out of cache: int8 took 0.4-0.8x the bf16 time
from 1 to 12 rows, about the same at 16 and 1.2x at 24."""

_KERNEL = "_weight_int8pack_mm"


def int8_kernel_available() -> bool:
    """Whether this torch build has the int8-weight matmul the option needs."""
    return hasattr(torch.ops.aten, _KERNEL)


class Int8DecodingLinear(nn.Linear):
    """An ``nn.Linear`` that also holds its weight in int8 and uses it for narrow inputs.

    Shares the original module's ``weight`` and ``bias`` parameters (tied weights stay tied);
    the int8 copy and its scales are buffers that are not saved with the model.
    """

    def __init__(self, linear: nn.Linear, max_rows: int = INT8_MAX_ROWS) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.register_parameter("bias", linear.bias)
        self.max_rows = max_rows
        quantised, scales = quantise_per_channel(linear.weight.detach())
        self.register_buffer("weight_int8", quantised, persistent=False)
        self.register_buffer("weight_scales", scales, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if 0 < rows <= self.max_rows and x.dtype == self.weight_scales.dtype:
            flat = x.reshape(rows, x.shape[-1]).contiguous()
            out = getattr(torch.ops.aten, _KERNEL)(flat, self.weight_int8, self.weight_scales)
            out = out.reshape(*x.shape[:-1], self.out_features)
            return out if self.bias is None else out + self.bias
        return super().forward(x)


def quantise_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` (out x in) as int8 values and one scale per output row, ``weight ~= values *
    scales[:, None]``. The scales are in the weight's dtype (the kernel's contract), and the
    values are rounded against those very scales, so a bf16 scale's rounding is not left as an
    error of the whole row."""
    wide = weight.float()
    tiny = torch.finfo(weight.dtype).tiny
    scales = (wide.abs().amax(dim=1) / 127.0).clamp(min=tiny).to(weight.dtype)
    values = torch.round(wide / scales.float()[:, None]).clamp(-127, 127)
    return values.to(torch.int8).contiguous(), scales


def use_int8_for_decoding(model: Any, max_rows: int = INT8_MAX_ROWS) -> int:
    """Swap every plain ``nn.Linear`` of ``model`` but its output embedding and any LoRA
    matrices for an :class:`Int8DecodingLinear`; the number swapped.

    Raises:
        RuntimeError: this torch build lacks the int8-weight kernel.
    """
    if not int8_kernel_available():
        raise RuntimeError(
            f"llm_decode_weights=int8 needs torch's aten.{_KERNEL}, which this torch build "
            "lacks; use llm_decode_weights=native"
        )
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is nn.Linear and module is not head and "lora_" not in name
    ]
    for name, module in targets:
        model.set_submodule(name, Int8DecodingLinear(module, max_rows))
    return len(targets)
