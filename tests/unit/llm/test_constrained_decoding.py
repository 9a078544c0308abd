"""Guided JSON, the repeated-span ban and the copy guard of the local transformers backend.

The tiny model has random weights, so unguided it emits gibberish; under a schema every output
must still parse and validate — which is the point of guided decoding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from lmformatenforcer.tokenenforcer import TokenEnforcerTokenizerData
from lmformatenforcer.tokenlist import TokenList
from pydantic import BaseModel, Field

from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.constrained_decoding import (
    DecodingConstraints,
    _token_texts,
    pack_token_ids,
    repeat_bans,
    span_bans,
    span_table,
    tighten_schema,
    unpack_token_masks,
)
from ragtrail.llm.backends.transformers_local import TransformersBackend
from tests.tiny_models import build_tiny_llama, build_tiny_t5

CORPUS = [
    '{"label": "summary", "rating": 4, "items": ["a b c", "d e"]}',
    "the quick brown fox jumps over the lazy dog",
    "employees are reimbursed for reasonable travel costs",
    "how long can i keep a book from the library",
] * 4


class Out(BaseModel):
    label: str = Field(pattern="^(fact_single|summary|reasoning)$")
    rating: int = Field(ge=1, le=5)
    items: list[str] = Field(min_length=1, max_length=3)


SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["fact_single", "summary", "reasoning"]},
        "rating": {"type": "integer", "minimum": 1, "maximum": 5},
        "items": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    },
    "required": ["label", "rating", "items"],
}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("llama"), CORPUS, max_positions=512)


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_t5(tmp_path_factory.mktemp("t5"), CORPUS)


def _requests(n: int, **kw: object) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            messages=({"role": "user", "content": f"rate item {i}: {CORPUS[i % 4]}"},),
            max_new_tokens=100,
            **kw,  # type: ignore[arg-type]
        )
        for i in range(n)
    ]


def test_tighten_schema_caps_free_strings_and_lists_small_integer_ranges() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "string", "maxLength": 10},
            "c": {"type": "string", "enum": ["x"]},
            "d": {"type": "array", "items": {"type": "string"}},
            "r": {"type": "integer", "minimum": 1, "maximum": 5},
            "n": {"type": "integer", "minimum": 0},
        },
    }
    out = tighten_schema(schema, 50)
    props = out["properties"]
    assert props["a"]["maxLength"] == 50 and props["b"]["maxLength"] == 10
    assert "maxLength" not in props["c"] and props["d"]["items"]["maxLength"] == 50
    assert props["r"]["enum"] == [1, 2, 3, 4, 5] and "enum" not in props["n"]
    assert "maxLength" not in schema["properties"]["a"]  # the input is not modified


def test_span_bans_by_hand() -> None:
    table = span_table([[1, 2, 3, 4], [2, 3, 9]], 3)
    assert table == {(1, 2): {3}, (2, 3): {4, 9}}
    assert span_bans([7, 2, 3], table, 3) == {4, 9}
    assert span_bans([7, 1, 2], table, 3) == {3}
    assert span_bans([2], table, 3) == set()
    assert span_bans([1, 2], table, 0) == set()
    # Own output: after 5 6 7 ... 5 6 the token 7 would repeat the span 5 6 7.
    assert repeat_bans([5, 6, 7, 8, 5, 6], 3) == {7}
    assert repeat_bans([5, 6, 5, 6], 3) == {5}
    assert repeat_bans([5, 6], 3) == set() and repeat_bans([5, 6, 5, 6], 0) == set()


@pytest.mark.parametrize("model_fixture", ["tiny_llama", "tiny_t5"])
def test_random_model_output_validates_under_the_schema(
    model_fixture: str, request: pytest.FixtureRequest
) -> None:
    path = request.getfixturevalue(model_fixture)
    unguided = TransformersBackend(str(path), batch_size=4, guided_json=False)
    guided = TransformersBackend(str(path), batch_size=4, max_string_chars=20)
    assert guided.supports_json_schema and not unguided.supports_json_schema
    assert guided.model_id != unguided.model_id  # guided outputs never share a cache entry

    reqs = _requests(4, json_schema=SCHEMA)
    raw = unguided.generate(reqs)
    assert not any(_valid(r.text) for r in raw)  # gibberish without guidance

    results = guided.generate(reqs)
    assert all(r.error is None for r in results)
    for r in results:
        Out.model_validate(json.loads(r.text))
        assert r.finish_reason == "stop"
    # Rows are guided independently: batch composition does not change a row's output.
    alone = [guided.generate([q])[0].text for q in reqs[:3]]
    assert alone == [r.text for r in results[:3]]


def test_guided_and_unguided_rows_share_a_batch(tiny_llama: Path) -> None:
    backend = TransformersBackend(str(tiny_llama), batch_size=4, max_string_chars=20)
    plain = _requests(2)
    schema_reqs = _requests(2, json_schema=SCHEMA)
    mixed = backend.generate([plain[0], schema_reqs[0], plain[1], schema_reqs[1]])
    assert [m.text for m in (mixed[0], mixed[2])] == [r.text for r in backend.generate(plain)]
    for r in (mixed[1], mixed[3]):
        Out.model_validate(json.loads(r.text))


def test_sampled_guided_output_is_seeded_and_valid(tiny_llama: Path) -> None:
    backend = TransformersBackend(str(tiny_llama), batch_size=4, max_string_chars=20)
    reqs = _requests(3, json_schema=SCHEMA, temperature=1.0, seed=3)
    first = backend.generate(reqs)
    assert [r.text for r in first] == [r.text for r in backend.generate(reqs)]
    for r in first:
        Out.model_validate(json.loads(r.text))


def test_copy_guard_bans_the_token_that_would_complete_a_copied_span(tiny_llama: Path) -> None:
    backend = TransformersBackend(str(tiny_llama), batch_size=2)
    tok = backend.tokenizer
    text = "the quick brown fox jumps over the lazy dog"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) >= 6
    constraints = DecodingConstraints(tok, [tok.eos_token_id], len(tok), copy_span=5)
    proc = constraints.processor([None, None], [(text,), ()], prompt_length=2)
    assert proc is not None
    prompt = [tok.pad_token_id, tok.pad_token_id]
    # Both rows have written the first four tokens of the text; the model wants the fifth.
    input_ids = torch.tensor([prompt + ids[:4], prompt + ids[:4]])
    scores = torch.zeros(2, len(tok))
    scores[:, ids[4]] = 10.0
    out = proc(input_ids, scores.clone())
    assert out[0, ids[4]] == float("-inf")  # row 0 avoids the text: the copy is cut
    assert out[1, ids[4]] == 10.0  # row 1 has nothing to avoid
    assert torch.isfinite(out[0]).sum() == len(tok) - 1  # nothing else is banned
    # Writing the fourth token (one short of a span) is still allowed: nothing is banned.
    out3 = proc(torch.tensor([prompt + ids[:3], prompt + ids[:3]]), scores.clone())
    assert torch.isfinite(out3).all()


def test_avoided_words_are_banned_as_whole_tokens(tiny_llama: Path) -> None:
    backend = TransformersBackend(str(tiny_llama), batch_size=2)
    tok = backend.tokenizer
    constraints = DecodingConstraints(tok, [tok.eos_token_id], len(tok))
    # Only spellings that are one token are banned; "the" is one token in this vocabulary.
    ids = constraints.word_tokens(["the", "zzqxj"])
    one_token = {
        t[0]
        for v in ("the", " the", "The", " The")
        if len(t := tok.encode(v, add_special_tokens=False)) == 1
    }
    assert ids == one_token and ids
    proc = constraints.processor([None, SCHEMA], [(), ()], 1, [("the",), ("the",)])
    assert proc is not None
    scores = torch.zeros(2, len(tok))
    out = proc(torch.tensor([[tok.pad_token_id], [tok.pad_token_id]]), scores)
    assert all(out[0, t] == float("-inf") for t in ids)  # unguided row: banned outright
    assert torch.isfinite(out[0]).sum() == len(tok) - len(ids)
    # The guided row may only open the JSON object anyway; the words stay banned after it.
    assert all(out[1, t] == float("-inf") for t in ids)
    # End to end: no banned token in the output of a request that avoids them.
    (res,) = backend.generate(_requests(1, avoid_words=("the",)))
    assert res.text and not set(tok.encode(res.text, add_special_tokens=False)) & ids


def test_repeated_spans_are_banned_in_guided_strings(tiny_llama: Path) -> None:
    backend = TransformersBackend(str(tiny_llama), batch_size=2)
    schema = {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": 120}},
        "required": ["text"],
    }
    (res,) = backend.generate(_requests(1, json_schema=schema))
    ids = backend.tokenizer.encode(json.loads(res.text)["text"], add_special_tokens=False)
    grams = [tuple(ids[i : i + 6]) for i in range(len(ids) - 5)]
    assert len(grams) == len(set(grams))


def _valid(text: str) -> bool:
    try:
        Out.model_validate(json.loads(text))
    except Exception:
        return False
    return True


def test_packed_token_ids_match_lm_format_enforcer_bit_by_bit() -> None:
    ids = [0, 1, 31, 32, 63, 64, 95, 200, 319]  # bit 31 of a word makes it negative
    expected = TokenList(True, 320)
    expected.extend(ids)
    packed = pack_token_ids(ids, expected.allowed_tokens.numel())
    assert torch.equal(packed, expected.allowed_tokens)
    mask = unpack_token_masks(packed.unsqueeze(0), 320)[0]
    assert mask.nonzero().flatten().tolist() == ids
    assert not pack_token_ids([], 3).any()


def test_packed_json_string_lists_equal_the_library_lists(tiny_llama: Path) -> None:
    backend = TransformersBackend(str(tiny_llama), batch_size=1)
    tok = backend.tokenizer
    constraints = DecodingConstraints(tok, [tok.eos_token_id], len(tok))
    packed = constraints._json_data().tokenizer_tree.json_freetext_tokens
    # The library's own data, lists built its way (one bit at a time).
    own = TokenEnforcerTokenizerData(
        _token_texts(tok), lambda ids: tok.decode(ids), tok.eos_token_id, True, len(tok)
    ).tokenizer_tree.json_freetext_tokens
    assert "lookup_allowed_tokens" not in vars(own)
    limit = own.max_token_len + 2
    for min_remaining in range(limit):
        for max_len in range(limit):
            assert torch.equal(
                packed.lookup_allowed_tokens(min_remaining, max_len).allowed_tokens,
                own.lookup_allowed_tokens(min_remaining, max_len).allowed_tokens,
            ), (min_remaining, max_len)


def _row_by_row(proc: Any, generated_rows: list[list[int]], scores: torch.Tensor) -> torch.Tensor:
    """The processor as it was written before batching (one row at a time, each row's mask
    unpacked and applied on its own, parser states of its own enforcers): the reference the
    batched version must equal."""
    vocab = scores.shape[-1]
    bits = torch.arange(32, dtype=torch.int32)
    for row, rule in enumerate(proc.rows):
        if not rule.active:
            continue
        generated = generated_rows[row]
        if any(t in proc.eos_ids for t in generated):
            continue
        banned = set(rule.word_bans)
        if rule.copy_table is not None:
            banned |= span_bans(generated, rule.copy_table, proc.copy_span)
        if rule.enforcer is None:
            if banned:
                scores[row, [t for t in banned if t < vocab]] = float("-inf")
            continue
        banned |= repeat_bans(generated, proc.no_repeat_ngram)
        bitmask = rule.enforcer.get_allowed_tokens(generated).allowed_tokens
        allowed = ((bitmask.unsqueeze(1) >> bits) & 1).flatten()[:vocab].bool()
        if not allowed.any():
            continue
        if banned:
            narrowed = allowed.clone()
            narrowed[[t for t in banned if t < vocab]] = False
            if narrowed.any():
                allowed = narrowed
        scores[row] = scores[row].masked_fill(~allowed, float("-inf"))
    return scores


class _Compared:
    """Runs the batched processor and the row-by-row reference (own parser states) on the same
    scores at every step of the rows being decoded and checks they agree."""

    def __init__(self, batched: Any, reference: Any, steps: list[int] | None = None) -> None:
        self.batched, self.reference = batched, reference
        self.steps = steps if steps is not None else [0]

    def subset(self, rows: list[int]) -> _Compared:
        return _Compared(self.batched.subset(rows), self.reference.subset(rows), self.steps)

    def apply(self, generated: list[list[int]], scores: torch.Tensor) -> torch.Tensor:
        expected = _row_by_row(self.reference, generated, scores.clone())
        got = self.batched.apply(generated, scores)
        assert torch.equal(got, expected)
        self.steps[0] += 1
        return got


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_masks_equal_the_row_by_row_masks(
    tiny_llama: Path, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = TransformersBackend(str(tiny_llama), batch_size=4, max_string_chars=12)
    made: list[_Compared] = []
    build = backend._constrained_rows

    def compared(reqs: Any, prompt_length: int) -> Any:
        batched = build(reqs, prompt_length)
        if batched is None:
            return None
        made.append(_Compared(batched, build(reqs, prompt_length)))
        return made[-1]

    monkeypatch.setattr(backend, "_constrained_rows", compared)
    words = ("the", "fox", "lazy", "dog", "a", "b")  # banned inside the guided strings too
    guided = _requests(3, json_schema=SCHEMA, temperature=temperature, seed=7, avoid_words=words)
    plain = _requests(2, temperature=temperature, seed=7)
    copying = GenerationRequest(
        messages=({"role": "user", "content": CORPUS[1]},),
        max_new_tokens=30,
        temperature=temperature,
        avoid_copying=(CORPUS[1],),
        avoid_words=("the", "fox"),
    )
    results = backend.generate([guided[0], plain[0], copying, guided[1], plain[1], guided[2]])
    assert all(r.ok for r in results)
    assert made and sum(c.steps[0] for c in made) > 20
