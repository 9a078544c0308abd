"""Key/value caches for local causal decoding that grow in place, and batches assembled from parts.

transformers' default cache (``DynamicLayer``) appends each step's keys and values with
``torch.cat``, which copies the whole cache every step: for a batch of 8 prompts of ~1,700 tokens
on SmolLM2-135M that is ~660 MB copied per generated token, about a third of a batched decoding
step on a 2-core CPU. :class:`GrowingLayer` writes into storage allocated once for the whole
generation and hands the model views of it; the values the attention reads are the same, so
outputs are unchanged (tested against the default cache).

A batch is a cache and a boolean mask (rows x cache columns: which columns a row attends to).
:func:`stack_batches` lays several batches (a single row prefilled alone is a batch of one) side
by side in one cache: rows right-aligned, the columns before a row zeros hidden by its mask.
Continuous batching uses it to add waiting requests to the rows being decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of storage sized for the generation.

    The storage has room for ``row_capacity`` rows and ``capacity`` tokens; :attr:`keys` and
    :attr:`values` view its first rows, from a start column on. Rows leaving move down in place,
    leading padding is dropped by moving the start (:meth:`trim_front`), and rows joining take
    the free rows (:meth:`add_rows`), so continuous batching copies no cache to change its rows.

    Args:
        capacity: tokens the storage holds (prompt plus new tokens); outgrowing it still works,
            by one copy into storage twice the size.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(1, capacity)
        self._key_store: torch.Tensor | None = None
        self._value_store: torch.Tensor | None = None
        self._rows = 0
        self._start = 0

    def reserve(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        rows: int,
        length: int,
        row_capacity: int = 0,
    ) -> None:
        """Storage shaped like ``keys`` / ``values`` (batch, heads, tokens, dim) for
        ``max(rows, row_capacity)`` rows, of which ``rows`` are in the cache with ``length``
        tokens: zeros, to be written through :attr:`keys` / :attr:`values`. The rest is left
        uninitialised (never read before it is written)."""
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        size = max(self.capacity, length)
        shape = (max(rows, row_capacity), keys.shape[1], size, keys.shape[-1])
        self._key_store = keys.new_empty(shape)
        self._value_store = values.new_empty((*shape[:3], values.shape[-1]))
        self._rows, self._start = rows, 0
        self._set_length(length)
        self.keys.zero_()
        self.values.zero_()

    def _set_length(self, length: int) -> None:
        assert self._key_store is not None and self._value_store is not None
        columns = slice(self._start, self._start + length)
        self.keys = self._key_store[: self._rows, :, columns]
        self.values = self._value_store[: self._rows, :, columns]
        self._views = (self.keys, self.values)

    def _in_storage(self) -> bool:
        """Whether :attr:`keys` / :attr:`values` are still views of the storage (a base-class
        method such as crop or batch_repeat_interleave replaces them by tensors of its own)."""
        return self._key_store is not None and self.keys is self._views[0]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        store = self._key_store
        # New storage when there is none yet, when it is full, or when a base-class method
        # (crop, batch selection, ...) replaced the views by tensors of its own.
        if (
            store is None
            or self._start + end > store.shape[-2]
            or self._rows != key_states.shape[0]
            or (length > 0 and not self._in_storage())
        ):
            kept_keys, kept_values = self.keys, self.values
            full = store is not None and self._start + end > store.shape[-2]
            self.capacity = max(self.capacity, 2 * end if full else end)
            self.reserve(key_states, value_states, key_states.shape[0], length)
            if length:
                self.keys.copy_(kept_keys)
                self.values.copy_(kept_values)
        assert self._key_store is not None and self._value_store is not None
        columns = slice(self._start + length, self._start + end)
        self._key_store[: self._rows, :, columns] = key_states
        self._value_store[: self._rows, :, columns] = value_states
        self._set_length(end)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices``: with ascending indices (rows leaving a batch), the kept
        rows move down within the storage instead of into new storage."""
        order = indices.tolist()
        if not self._in_storage() or order != sorted(set(order)):
            super().batch_select_indices(indices)
            return
        assert self._key_store is not None and self._value_store is not None
        length = self.get_seq_length()
        columns = slice(self._start, self._start + length)
        for target, source in enumerate(order):
            if target != source:
                self._key_store[target, :, columns] = self._key_store[source, :, columns]
                self._value_store[target, :, columns] = self._value_store[source, :, columns]
        self._rows = len(order)
        self._set_length(length)

    def trim_front(self, columns: int) -> None:
        """Forget the first ``columns`` tokens of every row (padding no row attends to any
        more), without copying: the views start after them."""
        if columns <= 0 or self._key_store is None:
            return
        length = self.get_seq_length()
        self._start += columns
        self._set_length(length - columns)

    def free_rows(self) -> int:
        """Rows the storage holds beyond the cache's (0 when the views are not its own)."""
        if not self._in_storage():
            return 0
        return self._key_store.shape[0] - self._rows

    def add_rows(self, count: int) -> bool:
        """Append ``count`` rows of zeros, in free rows of the storage; False (and nothing done)
        when the storage has too few of them."""
        if count > self.free_rows() or self._value_store is None:
            return False
        assert self._key_store is not None
        length = self.get_seq_length()
        columns = slice(self._start, self._start + length)
        self._key_store[self._rows : self._rows + count, :, columns] = 0
        self._value_store[self._rows : self._rows + count, :, columns] = 0
        self._rows += count
        self._set_length(length)
        return True


def growing_cache_layers(model: Any) -> int | None:
    """The number of cache layers of ``model`` when every layer of its default cache is a plain
    ``DynamicLayer`` (full attention: no sliding window, no linear-attention state), which
    :class:`GrowingLayer` can replace; else None."""
    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:
        return None
    if layers and all(type(layer) is DynamicLayer for layer in layers):
        return len(layers)
    return None


def growing_cache(num_layers: int, capacity: int) -> Cache:
    """An empty cache of :class:`GrowingLayer` s."""
    return Cache(layers=[GrowingLayer(capacity) for _ in range(num_layers)])


def attended_from(mask: torch.Tensor) -> int:
    """The first column of ``mask`` (rows x columns) that some row attends to (the width when
    none does): the columns before it are padding every row ignores."""
    attended = mask.any(dim=0).nonzero()
    return int(attended[0]) if len(attended) else mask.shape[1]


def stack_batches(
    parts: Sequence[tuple[Cache | None, torch.Tensor]],
    capacity: int,
    num_layers: int,
    row_capacity: int = 0,
) -> tuple[Cache, torch.Tensor]:
    """One batch of the rows of ``parts``, in order, and its mask.

    Each part is a cache (None: no tokens cached yet) with its mask (rows x the cache's length).
    Columns no row of a part attends to are left out; the rest of each part is right-aligned in
    the new width (the longest part), after zeros its rows' masks hide. The storage holds
    ``capacity`` tokens (at least the width) and ``row_capacity`` rows (at least the rows), so
    :func:`join_batch` can add rows later without a copy.
    """
    kept = _kept_columns(parts)
    width = max((mask.shape[1] - start for _, mask, start in kept), default=0)
    rows = sum(mask.shape[0] for _, mask, _ in kept)
    device = kept[0][1].device
    out_mask = _stacked_masks(kept, width, torch.zeros((0, width), dtype=torch.bool, device=device))
    template = next(
        (c for c, _, _ in kept if c is not None and c.get_seq_length() > 0 and width), None
    )
    if template is None:
        return growing_cache(num_layers, max(capacity, width)), out_mask
    layers = []
    for index in range(num_layers):
        sample = template.layers[index]
        layer = GrowingLayer(max(capacity, width))
        layer.reserve(sample.keys, sample.values, rows, width, row_capacity)
        _write_parts(layer, index, kept, 0, width)
        layers.append(layer)
    return Cache(layers=layers), out_mask


def join_batch(
    cache: Cache, mask: torch.Tensor, parts: Sequence[tuple[Cache | None, torch.Tensor]]
) -> torch.Tensor | None:
    """Add the rows of ``parts`` to the batch ``cache`` / ``mask`` in place, in the free rows
    of its storage, right-aligned as :func:`stack_batches` does; the batch's new mask. None,
    with nothing changed, when the storage lacks free rows or a part is wider than the batch
    (then stack them into a new batch)."""
    kept = _kept_columns(parts)
    width = mask.shape[1]
    rows = sum(part_mask.shape[0] for _, part_mask, _ in kept)
    layers = cache.layers
    if (
        any(part_mask.shape[1] - start > width for _, part_mask, start in kept)
        or not all(isinstance(layer, GrowingLayer) for layer in layers)
        or cache.get_seq_length() != width
        or not all(layer.free_rows() >= rows for layer in layers)  # type: ignore[attr-defined]
    ):
        return None
    first = mask.shape[0]
    for index, layer in enumerate(layers):
        assert isinstance(layer, GrowingLayer) and layer.add_rows(rows)
        _write_parts(layer, index, kept, first, width)
    return _stacked_masks(kept, width, mask)


def _kept_columns(
    parts: Sequence[tuple[Cache | None, torch.Tensor]],
) -> list[tuple[Cache | None, torch.Tensor, int]]:
    """Each part with the first column one of its rows attends to."""
    return [(cache, mask, attended_from(mask)) for cache, mask in parts]


def _stacked_masks(
    kept: Sequence[tuple[Cache | None, torch.Tensor, int]], width: int, above: torch.Tensor
) -> torch.Tensor:
    """``above`` (rows x ``width``) followed by the parts' masks, right-aligned in ``width``."""
    masks = [above]
    for _, mask, start in kept:
        span = mask.shape[1] - start
        padded = mask.new_zeros((mask.shape[0], width))
        padded[:, width - span :] = mask[:, start:]
        masks.append(padded)
    return torch.cat(masks, dim=0)


def _write_parts(
    layer: GrowingLayer,
    index: int,
    kept: Sequence[tuple[Cache | None, torch.Tensor, int]],
    first_row: int,
    width: int,
) -> None:
    """Copy layer ``index`` of every part into ``layer`` from row ``first_row`` on,
    right-aligned in ``width`` columns."""
    row = first_row
    for cache, mask, start in kept:
        span = mask.shape[1] - start
        if cache is not None and span:
            source, rows = cache.layers[index], slice(row, row + mask.shape[0])
            layer.keys[rows, :, width - span :] = source.keys[:, :, start:]
            layer.values[rows, :, width - span :] = source.values[:, :, start:]
        row += mask.shape[0]
