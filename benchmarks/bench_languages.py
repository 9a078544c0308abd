"""Language-aware BM25 on a French corpus: the French Debian Reference (../shared/corpora) with
the French golden set kept with the tests, indexed twice in one run, once with every document
forced to English (``ingest.language=en``, the analysis every document got before languages
existed) and once detected (French stemmer and stop words for the French chapters).

Reported: Recall@5, Recall@1 and MRR per label at text weight 1 (BM25 alone, where the analysis
is all that differs) and Recall@5 at the best hybrid weight, each with its bootstrap interval; and,
for a few French queries, how many chunks each analysis matches and an inflected form only the
French analysis reaches. The corpus has 16 documents, so document-level Recall@5 is close to its
ceiling whatever the analysis; Recall@1 and MRR are where a ranking difference shows.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from benchmarks._common import machine_line, require_shared, write_section
from ragtrail.config import DEFAULT_TEXT_WEIGHTS, load_settings
from ragtrail.evaluate.retrieval.evaluator import ScanConfig, collect_candidates, scan
from ragtrail.index.embedded import build_analyzer
from ragtrail.paths import REPO_ROOT
from ragtrail.pipeline.ingest import ingest
from ragtrail.records import LABELS
from ragtrail.runtime import Runtime
from ragtrail.testset.qaset import load_qa_set

GOLDEN = REPO_ROOT / "tests" / "fixtures" / "golden" / "debian-reference-fr.jsonl"
K = 100
QUERIES = ("installer un paquet", "configurer le réseau", "sauvegardes des données")
ANALYSES = {"english (forced)": "en", "per language (detected)": "auto"}


def _index_and_scan(corpus: Path, home: Path, language: str) -> tuple[Any, dict[str, Any]]:
    rt = Runtime(load_settings(home=home, ingest={"language": language}))
    summary = ingest(rt, str(corpus), "debian-fr")
    items, _ = load_qa_set(GOLDEN)
    index = rt.index("debian-fr")
    candidates = collect_candidates(index, rt.embedder.encode, items, K)
    config = ScanConfig(text_weights=DEFAULT_TEXT_WEIGHTS, metrics=("recall@1", "recall@5", "mrr"))
    result = scan(items, candidates, config)
    languages = sorted({d.language for d in rt.store.get_documents("debian-fr").values()})
    matches = {}
    for query in QUERIES:
        hits = index.search_lexical(query, 10_000)
        matches[query] = [h.text for h in hits]
    rt.close()
    facts = {
        "documents": summary.documents,
        "chunks": summary.chunks,
        "languages": languages,
        "matches": matches,
    }
    return result, facts


def _cell(metrics: Any, label: str, weight: float, metric: str = "recall@5") -> str:
    row = metrics[
        (metrics.label == label) & (metrics.text_weight == weight) & (metrics.metric == metric)
    ].iloc[0]
    return f"{row['value']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


def _inflected_example(query: str, english: list[str], french: list[str]) -> str:
    """A word of a chunk only the French analysis matched, written differently from the query
    but starting with one of its French stems (five letters or more, so the form is visibly
    the same word)."""
    stems = {s for s in build_analyzer("fr").analyze(query) if len(s) >= 5}
    query_words = {w.lower() for w in re.findall(r"\w+", query)}
    seen = set(english)
    analyzer = build_analyzer("fr")
    for text in french:
        if text in seen:
            continue
        for word in re.findall(r"\w+", text):
            low = word.lower()
            prefixed = any(low.startswith(stem) for stem in stems)
            if prefixed and low not in query_words and set(analyzer.analyze(low)) & stems:
                return low
    return "—"


def run() -> str:
    corpus = require_shared("corpora", "debian-reference-fr")
    results: dict[str, tuple[Any, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, language in ANALYSES.items():
            results[name] = _index_and_scan(corpus, Path(tmp) / language, language)
    (en_result, en_facts), (fr_result, fr_facts) = results.values()
    items, _ = load_qa_set(GOLDEN)
    labels = [label for label in LABELS if any(i.label == label for i in items)]

    rows = []
    for label in [*labels, "inclusive"]:
        n = int(
            en_result.metrics[
                (en_result.metrics.label == label) & (en_result.metrics.metric == "recall@5")
            ].n_questions.iloc[0]
        )
        best_en = en_result.best.set_index("label").loc[label, "best_weight"]
        best_fr = fr_result.best.set_index("label").loc[label, "best_weight"]
        en, fr = en_result.metrics, fr_result.metrics
        rows.append(
            f"| {label} | {n} | {_cell(en, label, 1.0)} | {_cell(fr, label, 1.0)} "
            f"| {_cell(en, label, 1.0, 'recall@1')} | {_cell(fr, label, 1.0, 'recall@1')} "
            f"| {_cell(en, label, 1.0, 'mrr')} | {_cell(fr, label, 1.0, 'mrr')} "
            f"| {_cell(en, label, best_en)} (w={best_en:g}) "
            f"| {_cell(fr, label, best_fr)} (w={best_fr:g}) |"
        )
    forms = []
    for query in QUERIES:
        english, french = en_facts["matches"][query], fr_facts["matches"][query]
        forms.append(
            f"| {query} | {' '.join(build_analyzer('en').analyze(query))} | {len(english)} "
            f"| {' '.join(build_analyzer('fr').analyze(query))} | {len(french)} "
            f"| {_inflected_example(query, english, french)} |"
        )
    table, form_table = "\n".join(rows), "\n".join(forms)
    return f"""## Languages — French Debian Reference, English analysis vs per-language analysis

Machine: {machine_line()}. No timings are reported: every figure below is a count or a
retrieval metric, the same under any load (this run shared the machine with a nightly). Backends: embedded (tantivy BM25 + faiss flat
IP), all-MiniLM-L6-v2 for the dense side (the same in both runs), {K} candidates per modality,
document-level relevance. Corpus: ../shared/corpora/debian-reference-fr, {fr_facts["documents"]}
documents, {fr_facts["chunks"]} chunks; detected languages {", ".join(fr_facts["languages"])}
(two chapters of the translation are still English). Questions: the French golden set
`tests/fixtures/golden/debian-reference-fr.jsonl` ({len(items)} questions, written by hand; an
unanswerable question is scored on the chapter it seems to be about). Intervals: 95% bootstrap,
1000 resamples. With n = 3 to 5 per label, only large differences are real.

BM25 alone (text weight 1): English analysis vs per-language analysis; then the best hybrid weight.

| label | n | R@5 EN | R@5 per lang. | R@1 EN | R@1 per lang. | MRR EN | MRR per lang. | best hybrid R@5 EN | best hybrid R@5 per lang. |
|---|---|---|---|---|---|---|---|---|---|
{table}

Chunks each lexical query matches (any term), and a word only the French analysis reaches:

| query | English terms | chunks | French terms | chunks | inflected form found only by French |
|---|---|---|---|---|---|
{form_table}
"""


if __name__ == "__main__":
    section = run()
    print(section)
    write_section("languages", section)
