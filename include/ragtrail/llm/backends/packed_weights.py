"""bf16 linear layers of a local model on the CPU, with their weights pre-packed for oneDNN.

torch's bf16 ``nn.Linear`` on the CPU hands the weight to oneDNN in its plain layout on every
call, and oneDNN re-lays it out into the blocked form its kernel reads. For a decoding step of
SmolLM2-135M (1 to 8 rows against 211 matrices, about 270 MB) that is most of the step's matmul
time: the same products with weights packed once (``mkldnn._reorder_linear_weight``, multiplied by
``mkldnn._linear_pointwise``, the ops ``torch.compile`` uses for frozen CPU models) take about
0.7x the time of a decoding step's products (:data:`PACKED_MAX_ROWS`; BENCHMARKS.md, "Packed
bf16 weights").

The packed product is the same kernel's arithmetic: on this CPU its results equal the plain
layer's bit for bit at every row count tried, so outputs, cache keys and model ids do not change.
That is checked for every layer when it is swapped (a layer whose probe products differ keeps
its plain form), and only bf16 layers are swapped: in float32 the two paths round differently.
The packed copy is rebuilt if the weight is changed in place, and inputs that need gradients
take the plain path.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

PACKED_MAX_ROWS = 256
"""Inputs of at most this many rows (tokens) use the packed weight; longer ones (a long prompt's
prefill, wide scoring batches) the plain one. On the night's 2-core CPU (SmolLM2-135M's 211
matrices) the packed product took 0.6-0.85x the plain one's time at 1 to 8 rows, 0.86-0.95x from
32 to 256, and about the same at 400 and 600 rows (1.05-1.2x in some runs at 600;
BENCHMARKS.md, "Packed bf16 weights")."""

_PROBE_ROWS = (1, 7, 64)
_PROBE_SEED = 20261128


def packing_available(model: Any) -> bool:
    """Whether ``model`` can use packed weights: a bf16 model on the CPU, in a torch build
    with oneDNN and its packed linear ops."""
    try:
        weight = next(model.parameters())
    except StopIteration:
        return False
    mkldnn = torch.ops.mkldnn
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.bfloat16
        and torch.backends.mkldnn.is_available()
        and hasattr(mkldnn, "_reorder_linear_weight")
        and hasattr(mkldnn, "_linear_pointwise")
    )


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def _packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> Any:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` that multiplies bf16 inputs of at most :data:`PACKED_MAX_ROWS` rows by
    a pre-packed copy of its weight (see the module docstring).

    Shares the original module's ``weight`` and ``bias`` parameters (tied weights stay tied);
    the packed copy is not a parameter or buffer, so it is never saved with the model.
    """

    def __init__(self, linear: nn.Linear) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.register_parameter("bias", linear.bias)
        self._packed = _pack(linear.weight)
        self._packed_version = linear.weight._version

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if (
            0 < rows <= PACKED_MAX_ROWS
            and x.dtype == self.weight.dtype
            and x.device.type == "cpu"
            and not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
        ):
            if self.weight._version != self._packed_version:  # changed in place: pack again
                self._packed = _pack(self.weight)
                self._packed_version = self.weight._version
            flat = x.reshape(rows, x.shape[-1])
            out = _packed_product(flat, self._packed, self.bias)
            return out.reshape(*x.shape[:-1], self.out_features)
        return super().forward(x)


def same_products(linear: nn.Linear, packed: PackedLinear) -> bool:
    """Whether ``packed`` gives ``linear``'s products bit for bit on seeded random inputs of a
    few row counts."""
    generator = torch.Generator().manual_seed(_PROBE_SEED)
    with torch.inference_mode():
        for rows in _PROBE_ROWS:
            probe = torch.randn(rows, linear.in_features, generator=generator)
            probe = probe.to(linear.weight.dtype)
            if not torch.equal(linear(probe), packed(probe)):
                return False
    return True


def use_packed_weights(model: Any) -> int:
    """Swap every plain bf16 ``nn.Linear`` of ``model`` (the output embedding included, LoRA
    matrices not) whose packed products equal its own for a :class:`PackedLinear`; the number
    swapped. Nothing is swapped where :func:`packing_available` says no."""
    if not packing_available(model):
        return 0
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is nn.Linear
        and module.weight.dtype == torch.bfloat16
        and "lora_" not in name
    ]
    swapped = 0
    for name, module in targets:
        packed = PackedLinear(module)
        if not same_products(module, packed):
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, packed)
        swapped += 1
    return swapped
