"""bf16 linear layers of a local model on the CPU, with their weights pre-packed for oneDNN.

torch's bf16 ``nn.Linear`` on the CPU hands the weight to oneDNN in its plain layout on every
call, and oneDNN lays it out again into the blocked form its kernel reads. A decoding step of
SmolLM2-135M multiplies 1 to 8 rows by 211 matrices (about 270 MB), so it pays that on every
matrix of every step. With the weights packed once (``mkldnn._reorder_linear_weight``, multiplied
by ``mkldnn._linear_pointwise``, the ops ``torch.compile`` uses for frozen CPU models) the same
products take less time (:data:`PACKED_MAX_ROWS`), and siblings that multiply the same input
(the query, key and value projections; the MLP's gate and up projections: :data:`FUSED`) are
packed as one stacked matrix and multiplied in one call. BENCHMARKS.md, "Packed bf16 weights",
has the decoding steps side by side.

The packed product is the same kernel's arithmetic: on this CPU its results equal the plain
layer's bit for bit at every row count tried, so outputs, cache keys and model ids do not change.
That is checked for every layer when it is swapped (a layer whose probe products differ keeps
its plain form), and only bf16 layers are swapped: in float32 the two paths round differently.
The packed copy is rebuilt if a weight or bias is changed in place, and inputs that need
gradients take the plain path.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch import nn

PACKED_MAX_ROWS = 256
"""Inputs of at most this many rows (tokens) use the packed weight; longer ones (a long prompt's
prefill, wide scoring batches) the plain one. On the night's 2-core CPU (SmolLM2-135M's 211
layers, siblings stacked) the packed products took 0.5-0.77x the plain ones' time at 1 to 8
rows, 0.66-0.87x from 32 to 256, and as long at 400 and 600 rows, over two runs on different days
(BENCHMARKS.md, "Packed bf16 weights")."""

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


FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Sibling layers that a decoder layer multiplies by the same input, one after the other (the
attention's query, key and value projections; the MLP's gate and up projections). Their weights
are packed as one stacked matrix, and the first of them to see an input computes all of their
products in one call (the others take theirs from it): on SmolLM2-135M's 30 layers, 0.68-0.73x
the time of the siblings' separate packed products at 1 to 8 rows, with the same bits."""


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def _packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> Any:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class _PackedMatrix:
    """The packed weight of one linear layer, or of several siblings of one input stacked (see
    :data:`FUSED`), packed again when a weight or bias changes in place. Products for several
    siblings are computed once per input and handed out to each sibling as it asks."""

    def __init__(self, linears: list[nn.Linear]) -> None:
        self.tensors = [
            t for linear in linears for t in (linear.weight, linear.bias) if t is not None
        ]
        self.weights = [linear.weight for linear in linears]
        self.biases = [linear.bias for linear in linears]
        self.sizes = [linear.out_features for linear in linears]
        self._pending = threading.local()
        self._pack()

    def _pack(self) -> None:
        self.packed = _pack(torch.cat([w.detach() for w in self.weights]))
        present = [b for b in self.biases if b is not None]
        self.bias = torch.cat([b.detach() for b in present]) if present else None
        self.versions = [t._version for t in self.tensors]

    def product(self, flat: torch.Tensor) -> Any:
        """``flat`` (rows x inputs) times the stacked weight, plus the biases."""
        if [t._version for t in self.tensors] != self.versions:  # changed in place
            self._pack()
        return _packed_product(flat, self.packed, self.bias)

    def part(self, x: torch.Tensor, flat: torch.Tensor, index: int) -> torch.Tensor:
        """Sibling ``index``'s product of ``x`` (``flat`` its rows): from the product its
        siblings asked for with this very input, else from a new one whose other parts wait for
        them (per thread)."""
        if len(self.sizes) == 1:
            return self.product(flat)
        pending = getattr(self._pending, "parts", None)
        if pending is not None and pending[0] is x and pending[1] == _version(x):
            part = pending[2].pop(index, None)
            if not pending[2]:
                self._pending.parts = None
            if part is not None:
                return part
        parts = self.product(flat).split(self.sizes, dim=-1)
        others = {i: p.contiguous() for i, p in enumerate(parts) if i != index}
        self._pending.parts = (x, _version(x), others)
        return parts[index].contiguous()


def _version(x: torch.Tensor) -> int | None:
    """``x``'s in-place change counter; None for inference tensors, which have none (a decoder
    layer hands its siblings the input without changing it)."""
    return None if x.is_inference() else x._version


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` that multiplies bf16 inputs of at most :data:`PACKED_MAX_ROWS` rows by
    a pre-packed copy of its weight, alone or stacked with its siblings' (see the module
    docstring and :data:`FUSED`).

    Shares the original module's ``weight`` and ``bias`` parameters (tied weights stay tied);
    the packed copy is not a parameter or buffer, so it is never saved with the model.
    """

    def __init__(
        self, linear: nn.Linear, matrix: _PackedMatrix | None = None, index: int = 0
    ) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.register_parameter("bias", linear.bias)
        self._matrix = matrix or _PackedMatrix([linear])
        self._index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if (
            0 < rows <= PACKED_MAX_ROWS
            and x.dtype == self.weight.dtype
            and x.device.type == "cpu"
            and not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
        ):
            out = self._matrix.part(x, x.reshape(rows, x.shape[-1]), self._index)
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


def _plain_bf16(module: Any) -> bool:
    return type(module) is nn.Linear and module.weight.dtype == torch.bfloat16


def _fusable(members: list[Any]) -> bool:
    """Plain bf16 linears of one input size, all with a bias or none."""
    return (
        len(members) > 1
        and all(_plain_bf16(m) for m in members)
        and len({m.in_features for m in members}) == 1
        and len({m.bias is None for m in members}) == 1
    )


def _swap_if_same(model: Any, swaps: list[tuple[str, nn.Linear, PackedLinear]]) -> int:
    """Put every packed layer of ``swaps`` (name, plain, packed) in place if all of them give
    their plain layer's products bit for bit; how many were put."""
    if not all(same_products(plain, packed) for _, plain, packed in swaps):
        return 0
    for name, _, packed in swaps:
        model.set_submodule(name, packed)
    return len(swaps)


def use_packed_weights(model: Any) -> int:
    """Swap every plain bf16 ``nn.Linear`` of ``model`` (the output embedding included, LoRA
    matrices not) whose packed products equal its own for a :class:`PackedLinear`, siblings of
    :data:`FUSED` sharing one stacked matrix; the number swapped. Nothing is swapped where
    :func:`packing_available` says no."""
    if not packing_available(model):
        return 0
    swapped = 0
    fused: set[str] = set()
    for parent_name, parent in list(model.named_modules()):
        if "lora_" in parent_name:
            continue
        for names in FUSED:
            members = [getattr(parent, name, None) for name in names]
            if not _fusable(members):
                continue
            matrix = _PackedMatrix(members)
            full = [f"{parent_name}.{name}" if parent_name else name for name in names]
            swaps = [(full[i], m, PackedLinear(m, matrix, i)) for i, m in enumerate(members)]
            if _swap_if_same(model, swaps):
                swapped += len(swaps)
                fused.update(full)
    for name, module in list(model.named_modules()):
        if name not in fused and _plain_bf16(module) and "lora_" not in name:
            swapped += _swap_if_same(model, [(name, module, PackedLinear(module))])
    return swapped
