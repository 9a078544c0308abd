"""Attention that treats a prompt prefix shared by a call's requests apart, for local causal models.

The cited-answer prompt is ~500 tokens of instructions and worked example shared by every request,
then ~800-1,500 tokens of numbered passages. Plain SDPA on a CPU does avoidable work twice:

* **Decoding a batch**: every row attends to the shared prefix through its own copy of it, so
  the prefix is read once per row and step. With :func:`decoding_over`, the rows' caches hold
  only what follows the prefix; the queries of all rows attend to the one prefix cache in one
  call, each row to its own tokens in another, and the two partial results are merged by their
  log-sum-exp (exact up to rounding).
* **Decoding with grouped-query heads**: transformers' SDPA copies every key/value head once
  per query head sharing it and runs one query row per head, which the CPU kernel serves
  slowly (a single row over 660 cached tokens: 0.32 ms a layer). In a decoding step (also
  without a shared prefix: ``decoding_over(None)``) the query heads of a key/value head are
  that head's query positions instead, with no copies (0.05 ms).
* **Prefilling a row after the prefix**: the causal mask over [prefix | rest] is explicit, and
  SDPA's CPU kernel computes every block of it, masked or not. With :func:`prefilling_after`,
  the prefix part runs unmasked and the rest with ``is_causal`` (which skips the blocks above
  the diagonal), merged the same way.

Both need the log-sum-exp of each part, which only torch's flash-attention op returns
(``aten._scaled_dot_product_flash_attention_for_cpu``); :func:`install` registers the attention
with transformers only where that op is there, the model uses SDPA and runs on the CPU. Outside
those two contexts, and for anything they do not cover, it is transformers' SDPA attention.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

ATTENTION = "ragtrail_prefix_sdpa"

_Plan = tuple[str, Any]
_PLAN: ContextVar[_Plan | None] = ContextVar("ragtrail_prefix_attention", default=None)


def _flash() -> Any:
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def install(model: Any) -> bool:
    """Switch ``model`` to this attention when it can run it (SDPA, CPU, the flash op present);
    whether it did. Outputs change only by rounding."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    config = getattr(model, "config", None)
    if (
        config is None
        or getattr(config, "_attn_implementation", None) != "sdpa"
        or model.device.type != "cpu"
        or _flash() is None
    ):
        return False
    AttentionInterface.register(ATTENTION, prefix_sdpa_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)
    model.set_attn_implementation(ATTENTION)
    return model.config._attn_implementation == ATTENTION


@contextmanager
def decoding_over(prefix_cache: Any | None) -> Iterator[None]:
    """Single-token steps inside this context attend to ``prefix_cache`` (a cache of the shared
    prefix, one row) before the rows' own keys and values, which must not contain it; with
    None, to their own keys and values only."""
    token = _PLAN.set(("decode", _Decoding(prefix_layers(prefix_cache))))
    try:
        yield
    finally:
        _PLAN.reset(token)


def prefix_layers(prefix_cache: Any | None) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """The keys and values of each layer of a shared prefix's cache (None: no prefix)."""
    if prefix_cache is None:
        return None
    return [(layer.keys, layer.values) for layer in prefix_cache.layers]


def additive_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A boolean mask (True: attend) as the additive mask of ``like``'s dtype that the flash op
    takes, of the same shape (0 where attended, -inf elsewhere)."""
    additive = torch.zeros(mask.shape, dtype=like.dtype, device=like.device)
    return additive.masked_fill_(~mask, float("-inf"))


@contextmanager
def prefilling_after(prefix_length: int) -> Iterator[None]:
    """A single row's prompt tokens run inside this context over a cache holding exactly the
    first ``prefix_length`` tokens: its attention is split at the prefix."""
    token = _PLAN.set(("prefill", prefix_length))
    try:
        yield
    finally:
        _PLAN.reset(token)


def prefix_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: (batch, heads, tokens, dim) in, (batch,
    tokens, heads, dim) out."""
    plan = _PLAN.get()
    if plan is not None and not dropout and kwargs.get("softcap") is None:
        kind, detail = plan
        if kind == "decode" and query.shape[2] == 1:
            prefix = None if detail.layers is None else detail.layers[module.layer_idx]
            mask = detail.additive(attention_mask, query)
            return grouped_decode(query, key, value, mask, prefix, scaling)
        if kind == "prefill" and query.shape[0] == 1 and key.shape[2] - query.shape[2] == detail:
            return _prefill(query, key, value, detail, scaling)
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


def grouped_decode(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    prefix: tuple[torch.Tensor, torch.Tensor] | None,
    scaling: float | None,
) -> tuple[torch.Tensor, None]:
    """One new token per row: its own keys (masked) and, when given, the shared prefix's keys
    and values (all rows' queries in one call), merged."""
    rows, heads, _, dim = query.shape
    # The query heads sharing a key/value head act as that head's query positions (no copies
    # of the keys and values for grouped-query attention).
    grouped = query.reshape(rows, key.shape[1], heads // key.shape[1], dim)
    attended = grouped_queries(grouped, key, value, mask, prefix, scaling)
    return attended.reshape(rows, heads, 1, dim).transpose(1, 2).contiguous(), None


def grouped_queries(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    prefix: tuple[torch.Tensor, torch.Tensor] | None,
    scaling: float | None,
) -> torch.Tensor:
    """Attention of ``query`` (rows x key/value heads x query positions x dim: the query heads
    of each key/value head, times the row's new tokens) over the rows' own keys and values
    (``mask``: additive, rows x 1 x query positions x columns) and, when given, the shared
    prefix's (all rows' queries in one call, unmasked), merged; shaped as ``query``."""
    rows, kv_heads, positions, dim = query.shape
    own, own_lse = _flash()(query, key, value, attn_mask=mask, scale=scaling)
    if prefix is None:
        return own
    prefix_keys, prefix_values = prefix
    together = query.transpose(0, 1).reshape(1, kv_heads, rows * positions, dim)
    shared, shared_lse = _flash()(together, prefix_keys, prefix_values, scale=scaling)
    shared = shared.reshape(kv_heads, rows, positions, dim).transpose(0, 1)
    shared_lse = shared_lse.reshape(kv_heads, rows, positions).transpose(0, 1)
    return _merge((own, own_lse), (shared, shared_lse))


def _prefill(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    prefix_length: int,
    scaling: float | None,
) -> tuple[torch.Tensor, None]:
    """One row's new tokens over [prefix | themselves]: the prefix unmasked, themselves
    causally, merged."""
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    head = _flash()(query, key[:, :, :prefix_length], value[:, :, :prefix_length], scale=scaling)
    rest = _flash()(
        query,
        key[:, :, prefix_length:],
        value[:, :, prefix_length:],
        is_causal=True,
        scale=scaling,
    )
    return _merge(head[:2], rest[:2]).transpose(1, 2).contiguous(), None


class _Decoding:
    """The shared prefix's keys and values per layer (None: no shared prefix), and the additive
    form of the step's boolean mask (made once per forward pass: every layer gets the same mask
    tensor)."""

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]] | None) -> None:
        self.layers = layers
        self._mask: tuple[torch.Tensor, torch.Tensor] | None = None

    def additive(self, mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
        """``mask`` (True: attend) as the additive mask of ``like``'s dtype the op wants."""
        if mask is None or mask.dtype != torch.bool:
            return mask
        if self._mask is None or self._mask[0] is not mask:
            self._mask = (mask, additive_mask(mask, like))
        return self._mask[1]


def _merge(
    first: tuple[torch.Tensor, torch.Tensor], second: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """Softmax attention over the union of two parts' keys, from each part's output and
    log-sum-exp: the second output moved toward the first by the first's share of the total
    weight, sigmoid(lse1 - lse2) (in float32)."""
    (out1, lse1), (out2, lse2) = first, second
    share = torch.sigmoid(lse1 - lse2).unsqueeze(-1)
    low = out2.float()
    return low.add_((out1.float() - low).mul_(share)).to(out1.dtype)
