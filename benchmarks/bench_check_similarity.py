"""The question-statement similarity bar of the model-free checks (``generate/checks.py``).

A generated question must be about the statement it was written from. This benchmark measures the
cosine similarity (bundled all-MiniLM-L6-v2, L2-normalised rows) of questions written by people
against the sentence that answers them ("true" pairs) and against a sentence that answers another
question from another document ("mismatched" pairs), on:

- the shipped hand-written set ``sample/qa/handbook_qa.jsonl`` over ``sample/corpus``: the true
  statement is the sentence of the ground document (split as extractive fact extraction splits
  contexts) that holds the answer verbatim, or for summary and reasoning items the hand-written
  answer itself (a sentence combining several facts);
- HAGRID (``../shared/reference``): human questions and the first answer sentence annotators
  marked informative and attributable (citation marks removed);
- the 18F handbook (``../shared/corpora``), which has no questions: it only supplies mismatched
  statements of the kind generation really draws (sentences of handbook pages), paired with the
  questions of both sets above.

The bar is the largest value, rounded down to 0.01, that keeps :data:`KEEP_TRUE_SHARE` of the
pooled true pairs; the section reports how many mismatched pairs it rejects.
"""

from __future__ import annotations

import ast
import csv
import random
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks._common import machine_line, require_shared, write_section
from ragtrail.config import load_settings
from ragtrail.embed.loading import load_embedder
from ragtrail.generate.prompts import context_sentences
from ragtrail.ingest.formats.common import QuarantineError
from ragtrail.ingest.loaders import parse_document
from ragtrail.ingest.sources import iter_source
from ragtrail.paths import sample_corpus_dir, sample_qa_set
from ragtrail.records import QuestionLabel
from ragtrail.stats.intervals import wilson_interval
from ragtrail.testset.qaset import load_qa_set
from ragtrail.text import text_key

SEED = 17
MISMATCHES_PER_QUESTION = 5
KEEP_TRUE_SHARE = 0.99
PERCENTILES = (1, 5, 25, 50, 75, 95, 99)
MAX_DOC_BYTES = 20 * 1024 * 1024
_CITATION_RE = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")

Encode = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Pair:
    """A question and the statement that answers it; ``group`` tells mismatches apart (a
    document id or a HAGRID query id): a mismatched statement comes from another group."""

    question: str
    statement: str
    group: str


def document_sentences(root: Path) -> dict[str, list[str]]:
    """Every parseable document under ``root`` -> its statement-sized sentences."""
    out: dict[str, list[str]] = {}
    for src in iter_source(str(root)):
        try:
            doc = parse_document(src, max_bytes=MAX_DOC_BYTES)
        except QuarantineError:
            continue
        sentences = [s for sec in doc.sections for s in context_sentences(sec.text, limit=10_000)]
        if sentences:
            out[doc.doc_id] = sentences
    return out


def answer_sentence(answer: str, sentences: Sequence[str]) -> str | None:
    """The first sentence holding ``answer`` verbatim (folded words), or None."""
    key = text_key(answer)
    return next((s for s in sentences if key and key in text_key(s)), None)


def sample_pairs(docs: dict[str, list[str]]) -> list[Pair]:
    """True pairs of the shipped hand-written set.

    The statement is the ground document's sentence holding the answer verbatim (short factoid
    answers such as "27 days"), else, for summary and reasoning items, the written answer itself:
    those are full sentences combining several facts, as generated summaries and conclusions
    are. A factoid whose answer is in no single sentence is left out (a bare "5 minutes" is no
    statement).
    """
    items, _ = load_qa_set(sample_qa_set())
    pairs = []
    for item in items:
        if item.label == QuestionLabel.UNANSWERABLE or not item.answer:
            continue
        doc_id = item.ground_doc_ids[0]
        sentence = answer_sentence(item.answer, docs.get(doc_id, []))
        if sentence is None and item.label != QuestionLabel.FACT_SINGLE:
            sentence = item.answer
        if sentence is not None:
            pairs.append(Pair(item.question, sentence, doc_id))
    return pairs


def hagrid_pairs(csv_path: Path) -> list[Pair]:
    """True pairs of HAGRID: a question and its first informative, attributable answer sentence."""
    csv.field_size_limit(1 << 30)
    pairs = []
    with csv_path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            sentences = [
                s["text"]
                for answer in ast.literal_eval(row["answers"])
                for s in answer["sentences"]
                if s.get("informative") == 1 and s.get("attributable") == 1
            ]
            if sentences:
                statement = _CITATION_RE.sub("", sentences[0]).strip()
                pairs.append(Pair(row["query"], statement, f"hagrid:{row['query_id']}"))
    return pairs


def mismatched(pairs: Sequence[Pair], pool: Sequence[Pair], rng: random.Random) -> list[Pair]:
    """Each question with :data:`MISMATCHES_PER_QUESTION` statements of other groups (seeded)."""
    out = []
    for pair in pairs:
        others = [p for p in pool if p.group != pair.group]
        for other in rng.sample(others, min(MISMATCHES_PER_QUESTION, len(others))):
            out.append(Pair(pair.question, other.statement, other.group))
    return out


def similarities(encode: Encode, pairs: Sequence[Pair]) -> np.ndarray:
    """Cosine similarity of each pair (rows of ``encode`` are L2-normalised)."""
    if not pairs:
        return np.zeros(0)
    q = encode([p.question for p in pairs])
    s = encode([p.statement for p in pairs])
    return np.einsum("ij,ij->i", q, s).astype(float)


def threshold_keeping(true_sims: np.ndarray, share: float) -> float:
    """The largest bar, rounded down to 0.01, with at least ``share`` of ``true_sims`` >= it."""
    ordered = np.sort(true_sims)
    allowed_below = int(np.floor((1.0 - share) * len(ordered)))
    return float(np.floor(ordered[allowed_below] * 100) / 100)


def threshold_ci(
    true_sims: np.ndarray, share: float, n_resamples: int = 1000
) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of :func:`threshold_keeping` (seeded)."""
    rng = np.random.default_rng(SEED)
    bars = [
        threshold_keeping(rng.choice(true_sims, size=len(true_sims)), share)
        for _ in range(n_resamples)
    ]
    low, high = np.quantile(bars, [0.025, 0.975])
    return float(low), float(high)


def _row(name: str, sims: np.ndarray, bar: float, kept: bool) -> str:
    cells = " | ".join(f"{np.percentile(sims, p):.2f}" for p in PERCENTILES)
    hits = (sims >= bar) if kept else (sims < bar)
    low, high = wilson_interval(int(hits.sum()), len(hits))
    what = "kept" if kept else "rejected"
    return (
        f"| {name} | {len(sims)} | {cells} | "
        f"{100 * hits.mean():.1f}% {what} [{100 * low:.1f}, {100 * high:.1f}] |"
    )


def run() -> str:
    hagrid_csv = require_shared("reference", "hagrid-attributed-ir", "llama13_RTG_vanilla.csv")
    handbook = require_shared("corpora", "18f-handbook", "pages")
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        encode = load_embedder(load_settings(home=Path(tmp))).encode
        sample_true = sample_pairs(document_sentences(sample_corpus_dir()))
        hagrid_true = hagrid_pairs(hagrid_csv)
        handbook_statements = [
            Pair("", s, f"18f:{doc}")
            for doc, sentences in document_sentences(handbook).items()
            for s in sentences
        ]
        sims = {
            "sample, true": similarities(encode, sample_true),
            "HAGRID, true": similarities(encode, hagrid_true),
            "sample, mismatched (other sample document)": similarities(
                encode, mismatched(sample_true, sample_true, rng)
            ),
            "HAGRID, mismatched (other question's sentence)": similarities(
                encode, mismatched(hagrid_true, hagrid_true, rng)
            ),
            "sample + HAGRID questions vs 18F handbook sentences": similarities(
                encode, mismatched(sample_true + hagrid_true, handbook_statements, rng)
            ),
        }
    true_all = np.concatenate([sims["sample, true"], sims["HAGRID, true"]])
    bar = threshold_keeping(true_all, KEEP_TRUE_SHARE)
    bar_low, bar_high = threshold_ci(true_all, KEEP_TRUE_SHARE)
    header = " | ".join(f"p{p}" for p in PERCENTILES)
    rows = "\n".join(_row(name, s, bar, kept=name.endswith("true")) for name, s in sims.items())
    return f"""## Model-free checks — question-statement similarity bar

Machine: {machine_line()}. Embedder all-MiniLM-L6-v2 (cosine of L2-normalised rows), seed {SEED},
{MISMATCHES_PER_QUESTION} mismatched statements per question. True pairs: a human question and the
sentence that answers it (sample set: the ground document's sentence holding the answer verbatim,
else the written answer, for summaries and reasoning; HAGRID: the first informative, attributable
answer sentence). Mismatched: the same questions against
sentences answering another question from another document, or sentences of 18F handbook pages.

| pairs | n | {header} | at the bar [95% CI] |
|---|---|{"---|" * len(PERCENTILES)}---|
{rows}

**Bar: {bar:.2f}** (bootstrap 95% CI [{bar_low:.2f}, {bar_high:.2f}]) — the largest value
(rounded down to 0.01) keeping >= {100 * KEEP_TRUE_SHARE:.0f}% of the {len(true_all)} pooled true
pairs; the default of `generation.min_question_statement_similarity`. People wrote these questions
without seeing the answer sentence; a generated question is written from its statement and shares
more of its words, so its true pairs sit higher and the bar is on the safe side for them.
"""


if __name__ == "__main__":
    section = run()
    print(section)
    write_section("check_similarity", section)
