"""The French golden set (tests/fixtures/golden/debian-reference-fr.jsonl) against the French
Debian Reference in ../shared: ingested as it is, every document detected French, every
answerable item's answer found in its ground document's text, and the set registered as a golden
set of the corpus (UTF-8 kept end to end)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ragtrail.pipeline.golden import register_golden_set
from ragtrail.pipeline.ingest import ingest
from ragtrail.pipeline.retrieval import evaluate_retrieval
from ragtrail.pipeline.run_io import load_run_summary
from ragtrail.report.language_sections import language_section
from ragtrail.testset.qaset import load_qa_set
from ragtrail.text import text_key

FIXTURE = Path(__file__).parents[1] / "fixtures" / "golden" / "debian-reference-fr.jsonl"


@pytest.fixture(scope="module")
def french_corpus(shared_dir: Path) -> Path:
    path = shared_dir / "corpora" / "debian-reference-fr"
    if not path.is_dir():
        pytest.skip(f"the French Debian Reference is not in {shared_dir / 'corpora'}")
    return path


def test_the_french_golden_set_fits_its_corpus(make_runtime, french_corpus):
    items, _ = load_qa_set(FIXTURE)
    assert len(items) >= 12
    assert Counter(i.label for i in items) == Counter(
        fact_single=5, summary=4, reasoning=4, unanswerable=3
    )
    rt = make_runtime()
    ingest(rt, str(french_corpus), "debian-fr")
    documents = rt.store.get_documents("debian-fr")
    pages = {d: r for d, r in documents.items() if d.startswith("pages/")}
    languages = Counter(r.language for r in pages.values())
    # two chapters of this translation are still in English, and so is the corpus's README
    assert len(pages) == 15 and languages == Counter(fr=13, en=2)
    assert {pages[f"pages/{c}.fr.html"].language for c in ("ch07", "ch08")} == {"en"}
    assert documents["README.md"].language == "en"

    for item in items:
        (doc,) = item.ground_doc_ids
        assert doc in pages, f"{item.qid}: {doc} is not a document of the corpus"
        assert pages[doc].language == "fr", f"{item.qid}: {doc} is not French"
        if item.label == "fact_single":
            text = "\n".join(c.text for c in rt.store.get_chunks("debian-fr", doc))
            assert text_key(item.answer) in text_key(text), f"{item.qid}: answer not in {doc}"

    registered = register_golden_set(rt, FIXTURE, corpus="debian-fr", name="debian-fr")
    assert registered.created

    # retrieval per label, and the language facet the report shows
    run = evaluate_retrieval(rt, "debian-fr", run_id="fr-retrieval", qa_set=FIXTURE)
    summary = load_run_summary(rt, run.run_id)
    assert {row.label for row in summary.best} == {*Counter(i.label for i in items), "inclusive"}
    (facet,) = summary.languages
    assert (facet.facet, facet.n_questions) == ("fr", len(items))
    assert facet.ci_low is not None and facet.ci_low <= facet.value <= facet.ci_high
    section = language_section(summary)
    assert section is not None and "<td>fr</td>" in section.html
