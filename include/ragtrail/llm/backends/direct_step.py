"""Decoding steps of a Llama-family model computed straight from its packed weights.

A decoding step of SmolLM2-135M on the night's 2-core CPU spent about a third of its time outside
the matrix products and attention: transformers' per-layer modules, masks, output records and
hooks, a dozen small tensor operations for the rotary embedding of each of q and k, and each
packed sibling's hand-off of its part of the stacked product. :class:`DirectDecodingStep` runs the
same step as one loop over the layers:

* the stacked q/k/v product is split by views, and the rotary embedding is applied to q and k
  together: ``rotate_half(x) * sin`` is ``roll(x, half) * [-sin_1, sin_2]`` element for element
  (negation is exact), so four operations replace fourteen;
* the gate/up product is split by views, the other products are called directly;
* attention is :func:`prefix_attention.grouped_decode`, as the model's own steps use.

Every arithmetic operation is the one transformers performs, on the same values and in the same
order, so the logits are the model's bit for bit. :meth:`DirectDecodingStep.build` also checks
that on probe steps (with and without padding, with and without a shared prefix) and returns
None, leaving the model's own forward pass in use, for any model it does not cover or whose probe
differs. BENCHMARKS.md, "Direct decoding steps", has the measured steps side by side.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from ragtrail.llm.backends import prefix_attention
from ragtrail.llm.backends.kv_cache import growing_cache_layers, stack_batches
from ragtrail.llm.backends.packed_weights import PackedLinear

_PROBE_SEED = 20261128
_PROBE_TOKENS = (9, 6)
"""Prompt lengths of the two probe rows (different, so the batch is padded)."""


def forward_step(
    model: Any,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    mask: torch.Tensor,
    cache: Any,
    shared: Any = None,
    *,
    grouped: bool = True,
    **kwargs: Any,
) -> torch.Tensor:
    """The model's own decoding step, through its forward pass: the logits (rows x vocabulary)
    of one token per row, arguments as for :meth:`DirectDecodingStep.__call__` (``kwargs`` go to
    the forward pass). With ``grouped`` the step runs under shared-prefix attention's decoding
    plan (:func:`prefix_attention.decoding_over`), else with the model's attention as it is."""
    with prefix_attention.decoding_over(shared) if grouped else nullcontext():
        out = model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            **kwargs,
        )
    return out.logits[:, -1, :]


def _packed(module: Any, parts: int) -> Any:
    """The packed matrix behind ``module`` if it is a :class:`PackedLinear` whose matrix stacks
    ``parts`` siblings, starting with it; else None."""
    if type(module) is not PackedLinear or module._index != 0:
        return None
    matrix = module._matrix
    return matrix if len(matrix.sizes) == parts else None


def _rms_norm(norm: Any, hidden: torch.Tensor) -> torch.Tensor:
    """transformers' ``LlamaRMSNorm.forward``, operation for operation."""
    x = hidden.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + norm.variance_epsilon)
    return norm.weight * x.to(hidden.dtype)


class DirectDecodingStep:
    """One decoding step (one new token per row) of a supported model; see the module
    docstring. Build it with :meth:`build`."""

    def __init__(self, model: Any, layers: list[tuple[Any, ...]], head: Any) -> None:
        config = model.config
        self.model = model
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.intermediate = int(config.intermediate_size)
        self.layers = layers
        self.head = head

    @classmethod
    def build(cls, model: Any) -> DirectDecodingStep | None:
        """The direct step of ``model``, or None where it does not apply: a model other than a
        plain ``LlamaForCausalLM`` with SiLU MLPs on shared-prefix attention, linear layers not
        all packed (q/k/v and gate/up stacked), or probe steps whose logits differ from the
        model's own by a single bit."""
        if type(model).__name__ != "LlamaForCausalLM":
            return None
        config = model.config
        if (
            config._attn_implementation != prefix_attention.ATTENTION
            or config.hidden_act != "silu"
            or type(model.model.norm).__name__ != "LlamaRMSNorm"
        ):
            return None
        layers = []
        for layer in model.model.layers:
            attention, mlp = layer.self_attn, layer.mlp
            parts = (
                _packed(attention.q_proj, 3),
                _packed(attention.o_proj, 1),
                _packed(mlp.gate_proj, 2),
                _packed(mlp.down_proj, 1),
            )
            if any(p is None for p in parts) or type(layer).__name__ != "LlamaDecoderLayer":
                return None
            layers.append((layer, attention.scaling, *parts))
        head = _packed(model.lm_head, 1)
        if head is None:
            return None
        step = cls(model, layers, head)
        return step if step.same_as_model() else None

    @torch.inference_mode()
    def __call__(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        cache: Any,
        shared: Any = None,
    ) -> torch.Tensor:
        """The logits (rows x vocabulary) of one token per row: ``input_ids`` and
        ``position_ids`` (rows x 1), ``mask`` (rows x columns, True: attend; the new token's
        column included) over ``cache`` (the rows' own keys and values, extended in place) and,
        when given, the ``shared`` prefix cache that the rows' caches leave out."""
        model = self.model.model
        rows = input_ids.shape[0]
        dim, heads = self.head_dim, self.heads
        hidden = model.embed_tokens(input_ids.view(rows))
        cos, signed_sin = self._rotary(hidden, position_ids)
        wide = mask[:, None, None]  # rows x 1 x 1 x columns, as the flash op takes it
        additive = None if bool(mask.all()) else prefix_attention.additive_mask(wide, hidden)
        prefix = prefix_attention.prefix_layers(shared)
        for index, (layer, scaling, qkv, out, gate_up, down) in enumerate(self.layers):
            qk, value = self._projected(layer, qkv, hidden, cos, signed_sin)
            query = qk[:, :heads].view(rows, heads, 1, dim)
            key = qk[:, heads:].reshape(rows, self.kv_heads, 1, dim)
            value = value.reshape(rows, self.kv_heads, 1, dim)
            key, value = cache.layers[index].update(key, value)
            attended, _ = prefix_attention.grouped_decode(
                query, key, value, additive, None if prefix is None else prefix[index], scaling
            )
            hidden = self._feed_forward(
                layer, out, gate_up, down, hidden, attended.view(rows, heads * dim)
            )
        return self.head.product(_rms_norm(model.norm, hidden))

    @torch.inference_mode()
    def with_drafts(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        valid: torch.Tensor,
        mask: torch.Tensor,
        cache: Any,
        shared: Any = None,
    ) -> torch.Tensor:
        """The logits of several tokens per row, for checking drafts (:mod:`prompt_lookup`):
        ``input_ids`` and ``position_ids`` are rows x width, ``valid`` (rows x width) marks
        each row's tokens (a prefix of its width), ``mask`` (rows x width x columns, the step's
        new columns included) the columns each token attends to. The rows' keys and values of
        all ``width`` new columns are written to ``cache`` (those of the padding are zeros, for
        masks to hide). Returns the logits of the valid tokens, row by row (tokens x
        vocabulary).

        The products run over the valid tokens only; attention runs on the padded rows (the
        query heads of a key/value head and the row's tokens as its query positions)."""
        model = self.model.model
        rows, width = input_ids.shape
        dim, heads, kv_heads = self.head_dim, self.heads, self.kv_heads
        groups, rotated = heads // kv_heads, heads + kv_heads
        flat = valid.reshape(-1).nonzero().squeeze(1)
        tokens = len(flat)
        hidden = model.embed_tokens(input_ids.reshape(-1)[flat])
        cos, signed_sin = self._rotary(hidden, position_ids.reshape(1, -1)[:, flat])
        columns = mask.shape[-1]
        # query position (group, token) of a row attends as its token does
        wide = mask[:, None, None].expand(rows, 1, groups, width, columns)
        additive = prefix_attention.additive_mask(
            wide.reshape(rows, 1, groups * width, columns), hidden
        )
        prefix = prefix_attention.prefix_layers(shared)
        padded = hidden.new_zeros((rows * width, (rotated + kv_heads) * dim))
        for index, (layer, scaling, qkv, out, gate_up, down) in enumerate(self.layers):
            qk, value = self._projected(layer, qkv, hidden, cos, signed_sin)
            padded[flat, : rotated * dim] = qk.view(tokens, rotated * dim)
            padded[flat, rotated * dim :] = value
            spread = padded.view(rows, width, rotated + kv_heads, dim)
            query = (
                spread[:, :, :heads]
                .reshape(rows, width, kv_heads, groups, dim)
                .permute(0, 2, 3, 1, 4)
                .reshape(rows, kv_heads, groups * width, dim)
            )
            key, value = cache.layers[index].update(
                spread[:, :, heads:rotated].transpose(1, 2), spread[:, :, rotated:].transpose(1, 2)
            )
            attended = prefix_attention.grouped_queries(
                query, key, value, additive, None if prefix is None else prefix[index], scaling
            )
            attended = (
                attended.reshape(rows, kv_heads, groups, width, dim)
                .permute(0, 3, 1, 2, 4)
                .reshape(rows * width, heads * dim)[flat]
            )
            hidden = self._feed_forward(layer, out, gate_up, down, hidden, attended)
        return self.head.product(_rms_norm(model.norm, hidden))

    def _rotary(
        self, hidden: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary embedding's cos and signed sin of each token (tokens x 1 x dim):
        ``rotate_half(x) * sin`` is ``roll(x, half) * [-sin_1, sin_2]`` element for element."""
        tokens, dim, half = hidden.shape[0], self.head_dim, self.head_dim // 2
        cos, sin = self.model.model.rotary_emb(hidden, position_ids)
        cos, sin = cos.view(tokens, 1, dim), sin.view(tokens, 1, dim)
        return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)

    def _projected(
        self,
        layer: Any,
        qkv: Any,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A layer's queries and keys, rotated (tokens x heads + key/value heads x dim), and
        its values (tokens x key/value heads * dim), from one stacked product."""
        rotated, dim, half = self.heads + self.kv_heads, self.head_dim, self.head_dim // 2
        product = qkv.product(_rms_norm(layer.input_layernorm, hidden))
        qk = product[:, : rotated * dim].view(hidden.shape[0], rotated, dim)
        qk = (qk * cos) + (torch.roll(qk, half, -1) * signed_sin)
        return qk, product[:, rotated * dim :]

    def _feed_forward(
        self,
        layer: Any,
        out: Any,
        gate_up: Any,
        down: Any,
        hidden: torch.Tensor,
        attended: torch.Tensor,
    ) -> torch.Tensor:
        """The rest of a layer after attention: the output projection and the SiLU MLP, each
        added to the residual stream."""
        hidden = hidden + out.product(attended)
        both = gate_up.product(_rms_norm(layer.post_attention_layernorm, hidden))
        gated = F.silu(both[:, : self.intermediate]) * both[:, self.intermediate :]
        return hidden + down.product(gated)

    def same_as_model(self) -> bool:
        """Whether probe steps give the model's own logits bit for bit: two rows of seeded
        random tokens (padded), and one row, each with and without a shared prefix."""
        generator = torch.Generator().manual_seed(_PROBE_SEED)
        vocab = int(self.model.config.vocab_size)
        layers = growing_cache_layers(self.model)
        if layers is None:
            return False

        def tokens(count: int) -> list[int]:
            return torch.randint(0, vocab, (count,), generator=generator).tolist()

        with torch.inference_mode():
            shared_ids = tokens(5)
            shared = self.model(input_ids=torch.tensor([shared_ids]), use_cache=True)
            for lengths in (_PROBE_TOKENS, _PROBE_TOKENS[:1]):
                for prefix in (None, shared.past_key_values):
                    start = len(shared_ids) if prefix is not None else 0
                    prompts = [tokens(n) for n in lengths]
                    parts = [self._probe_row(prompt[:-1], prefix, start) for prompt in prompts]
                    width = start + max(n - 1 for n in lengths)
                    cache, mask = stack_batches(parts, width + 2, layers, len(prompts))
                    mask = torch.cat([mask, mask.new_ones((len(prompts), 1))], dim=1)
                    ids = torch.tensor([[p[-1]] for p in prompts])
                    positions = torch.tensor([[start + len(p) - 1] for p in prompts])
                    theirs = copy.deepcopy(cache)
                    expected = forward_step(self.model, ids, positions, mask, theirs, prefix)
                    got = self(ids, positions, mask, cache, prefix)
                    if not torch.equal(expected, got):
                        return False
        return True

    def _probe_row(self, prompt: list[int], prefix: Any, start: int) -> tuple[Any, torch.Tensor]:
        """A probe row's cache and mask, as the backend prefills a row: after ``prefix`` (of
        ``start`` tokens) when given, whose columns the mask leaves out."""
        ids = torch.tensor([prompt])
        mask = torch.ones((1, start + len(prompt)), dtype=torch.bool)
        if prefix is None:
            return self.model(input_ids=ids, use_cache=True).past_key_values, mask
        cache = copy.deepcopy(prefix)
        with prefix_attention.prefilling_after(start):
            self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        mask[:, :start] = False
        return cache, mask
