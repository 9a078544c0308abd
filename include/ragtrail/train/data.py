"""Training data for the small fine-tuned generator (METHODS §4): export, JSONL, split, parsing.

The generator learns one text-to-text task for every question type: the input names the wanted
label and carries the context, the target repeats the label and holds the question and the answer
separated by the added ``<a>`` token::

    input:  "<<fact_single>> The on-call rotation hands over every Tuesday at 10:00 ..."
    target: "<<fact_single>> When does on-call hand over? <a> every Tuesday at 10:00"

Examples come from *accepted* statement-extraction candidates whose observed label matches the
requested one, so the small model only imitates questions the full pipeline already vetted. This
module is pure Python (no torch import) so it is cheap to use at DAG-parse time and in exports.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ragtrail.records import (
    LABELS,
    STATEMENT_KINDS,
    CandidateStatus,
    QACandidate,
    StatementKind,
    sha256_bytes,
)

ANSWER_TOKEN = "<a>"
"""Separator between question and answer in a target; added to the tokenizer as one token."""

TRAINABLE_KINDS: tuple[str, ...] = (
    StatementKind.FACT,
    StatementKind.SUMMARY,
    StatementKind.CONCLUSION,
)
"""Statement kinds whose accepted candidates become training examples (not foreign/baseline)."""

DEFAULT_HELD_OUT_FRACTION = 0.2


def label_tag(label: str) -> str:
    """The ``<<label>>`` marker that opens both the input and the target."""
    return f"<<{label}>>"


def format_input(label: str, context: str) -> str:
    """The generator input: ``"<<label>> context"``."""
    return f"{label_tag(label)} {context}"


def format_target(label: str, question: str, answer: str) -> str:
    """The generator target: ``"<<label>> question <a> answer"``."""
    return f"{label_tag(label)} {question} {ANSWER_TOKEN} {answer}"


@dataclass(frozen=True)
class TrainingExample:
    """One (input, target) pair plus the lineage needed to split and audit the dataset.

    ``context_id`` is the chunk the context came from: the split holds out whole contexts so that
    no held-out context was seen in training under another label.
    """

    input: str
    target: str
    label: str
    context_id: str
    candidate_id: str
    doc_id: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, row: dict[str, object]) -> TrainingExample:
        return cls(**{k: str(row[k]) for k in cls.__dataclass_fields__ if k in row})


def _is_trainable(candidate: QACandidate) -> bool:
    """Accepted, from a fact/summary/conclusion statement, labelled as requested, non-empty."""
    return (
        candidate.status == CandidateStatus.ACCEPTED
        and candidate.statement_kind in TRAINABLE_KINDS
        and candidate.requested_label == STATEMENT_KINDS[candidate.statement_kind]
        and candidate.observed_label == candidate.requested_label
        and bool(candidate.question.strip())
        and bool(candidate.answer.strip())
        and bool(candidate.context.text.strip())
    )


def export_training_examples(candidates: Sequence[QACandidate]) -> list[TrainingExample]:
    """Training examples from accepted statement-extraction candidates (METHODS §4).

    Keeps candidates that are accepted, come from a fact/summary/conclusion statement and whose
    observed label equals the requested one. Each (context chunk, label) pair yields ONE example,
    as in the paper; when several candidates share it, the smallest ``candidate_id`` wins so the
    export is deterministic whatever the input order. Output is sorted by (chunk id, label order).
    """
    chosen: dict[tuple[str, str], QACandidate] = {}
    for cand in candidates:
        if not _is_trainable(cand):
            continue
        key = (cand.context.chunk_id, cand.requested_label)
        best = chosen.get(key)
        if best is None or cand.candidate_id < best.candidate_id:
            chosen[key] = cand
    order = {label: i for i, label in enumerate(LABELS)}
    examples = []
    for (chunk_id, label), cand in sorted(
        chosen.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])
    ):
        examples.append(
            TrainingExample(
                input=format_input(label, cand.context.text.strip()),
                target=format_target(label, cand.question.strip(), cand.answer.strip()),
                label=label,
                context_id=chunk_id,
                candidate_id=cand.candidate_id,
                doc_id=cand.context.doc_id,
            )
        )
    return examples


# --------------------------------------------------------------------------- JSONL + versioning


def _jsonl_bytes(examples: Iterable[TrainingExample]) -> bytes:
    lines = [json.dumps(ex.to_json(), ensure_ascii=False, sort_keys=True) for ex in examples]
    return "".join(line + "\n" for line in lines).encode("utf-8")


def data_version(examples: Iterable[TrainingExample]) -> str:
    """Content hash of a dataset: SHA-256 (first 16 hex chars) of its canonical JSONL bytes.

    The same examples in the same order always give the same version, whatever wrote them.
    """
    return sha256_bytes(_jsonl_bytes(examples))[:16]


def write_jsonl(examples: Sequence[TrainingExample], path: str | Path) -> str:
    """Write the dataset as canonical JSONL (one sorted-key object per line); return its version."""
    data = _jsonl_bytes(examples)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return sha256_bytes(data)[:16]


def read_jsonl(path: str | Path) -> list[TrainingExample]:
    """Read a dataset written by :func:`write_jsonl` (blank lines are skipped)."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(TrainingExample.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a training example: {exc}") from exc
    return out


def split_examples(
    examples: Sequence[TrainingExample],
    *,
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
    seed: int = 0,
) -> tuple[list[TrainingExample], list[TrainingExample]]:
    """Seeded train / held-out split by context (default 20% of contexts held out).

    Whole contexts are held out, so a held-out context never appeared in training under another
    label. With at least two contexts and a positive fraction, at least one context is held out
    and at least one stays for training. Order within each part follows the input order.
    """
    if not 0.0 <= held_out_fraction < 1.0:
        raise ValueError("held_out_fraction must be in [0, 1)")
    contexts = sorted({ex.context_id for ex in examples})
    random.Random(seed).shuffle(contexts)
    n_held = round(held_out_fraction * len(contexts))
    if held_out_fraction > 0 and len(contexts) >= 2:
        n_held = min(max(n_held, 1), len(contexts) - 1)
    held = set(contexts[:n_held])
    train = [ex for ex in examples if ex.context_id not in held]
    held_out = [ex for ex in examples if ex.context_id in held]
    return train, held_out


# --------------------------------------------------------------------------- parsing outputs

_TAG_RE = re.compile(r"<<\s*([A-Za-z_]+)\s*>>")
_JUNK_TOKENS_RE = re.compile(r"</s>|<pad>|<eos>|<\|[a-z_]+\|>|<unk>")


def _clean(text: str) -> str:
    return " ".join(_JUNK_TOKENS_RE.sub(" ", text).split())


def parse_generation(text: str) -> tuple[str, str, str] | None:
    """Split a generated ``"<<label>> question <a> answer"`` into (label, question, answer).

    Robust to junk: text before the first known ``<<label>>`` is ignored, leftover special tokens
    (``</s>``, ``<|im_end|>``...) and extra whitespace are removed, and the answer stops at a
    second ``<a>`` or a new ``<<label>>`` (a model that starts repeating itself). Returns ``None``
    when there is no known label, no ``<a>``, or an empty question or answer.
    """
    if not text:
        return None
    match = next((m for m in _TAG_RE.finditer(text) if m.group(1) in LABELS), None)
    if match is None:
        return None
    rest = text[match.end() :]
    question, sep, answer = rest.partition(ANSWER_TOKEN)
    if not sep:
        return None
    answer = answer.split(ANSWER_TOKEN, 1)[0]
    answer = _TAG_RE.split(answer, 1)[0]
    question, answer = _clean(_TAG_RE.sub(" ", question)), _clean(answer)
    if not question or not answer:
        return None
    return match.group(1), question, answer
