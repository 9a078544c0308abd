"""Citation overlap on HAGRID against Attributed-IR's own computation, defect included.

Attributed-IR (hanane-djeddal/Attributed-IR, ``scripts/citations_eval.py``, ``citation_overlap``)
scores each row of its results CSV like this: pick the gold answer (first attributable and
informative, else attributable, else informative, else the first), read the numbers of every
bracket group in it and map number i to ``gold_quotes[i-1]``'s docid when ``i <= len(gold_quotes)``;
read the numbers of the generated answer the same way, but its range check measures
``example[[column]]`` (a one-column selection of the row, whose length is always 1), so only
citation 1 survives there; precision = shared docids / generated docids and recall = shared /
gold docids, 0 when a set is empty; macro-average over the rows that have passages and a
non-empty gold answer.

Below that computation is written again, plainly, in this file, and our
``citation_overlap(defect_compatible=True)`` must equal it on every row; the corrected mode
(every citation counts, empty sets undefined) must equal a second plain computation. Both macro
averages are pinned. The data (``../shared/reference/hagrid-attributed-ir``) is read in place;
without it the tests skip.
"""

from __future__ import annotations

import ast
import csv
import re
import sys
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest

from ragtrail.evaluate.attribution.answer_metrics import citation_overlap
from ragtrail.evaluate.attribution.hagrid import hagrid_to_jsonl, read_hagrid
from ragtrail.evaluate.attribution.scoring import load_answers

HAGRID = ("reference", "hagrid-attributed-ir", "llama13_RTG_vanilla.csv")
ROWS = 716

# Measured on the 716 rows (BENCHMARKS.md, "Citation overlap conformance on HAGRID").
DEFECT_PRECISION, DEFECT_RECALL = 0.36731843575418993, 0.24395340072714375
CORRECTED_PRECISION, CORRECTED_RECALL = 0.3939144736842105, 0.38130267478093566
CORRECTED_N_PRECISION, CORRECTED_N_RECALL = 608, 690

BRACKETS = re.compile(r"\[\d+(?:,\s*\d+)*\](?:,\s\[\d+(?:,\s*\d+)*\])*")
CHAT_PREFIX = re.compile(r"<\|system\|>[\s\S]*?<\|assistant\|>\n")


@pytest.fixture(scope="module")
def csv_path(shared_dir: Path) -> Path:
    path = shared_dir.joinpath(*HAGRID)
    if not path.is_file():
        pytest.skip(f"HAGRID reference file absent: {path}")
    return path


@pytest.fixture(scope="module")
def rows(csv_path: Path) -> list[dict[str, Any]]:
    csv.field_size_limit(sys.maxsize)
    with csv_path.open(encoding="utf-8", newline="") as fh:
        raw = list(csv.DictReader(fh))
    out = []
    for row in raw:
        parsed = {k: ast.literal_eval(row[k]) for k in ("gold_quotes", "answers", "quotes")}
        output = CHAT_PREFIX.sub("", row["output"].replace("<|endoftext|>", ""))
        out.append({**parsed, "query_id": row["query_id"], "output": output})
    return out


@pytest.fixture(scope="module")
def ours(csv_path: Path) -> dict[str, Any]:
    return {r.qid: r for r in read_hagrid(csv_path)}


def numbers_in(text: str) -> list[int]:
    """Each bracket group's distinct numbers, group after group."""
    out: list[int] = []
    for group in BRACKETS.findall(text):
        out.extend({int(n) for n in re.findall(r"\d+", group)})
    return out


def gold_answer_text(answers: list[dict[str, Any]]) -> str:
    both = [a for a in answers if a["attributable"] == 1 and a["informative"] == 1]
    attributable = [a for a in answers if a["attributable"] == 1 and a["informative"] != 1]
    informative = [a for a in answers if a["attributable"] != 1 and a["informative"] == 1]
    for pool in (both, attributable, informative, answers):
        if pool:
            return pool[0]["answer"]
    raise AssertionError("a HAGRID row without answers")


def their_overlap(row: dict[str, Any]) -> tuple[float, float]:
    """Attributed-IR's per-row (precision, recall), the [1]-only defect included."""
    gold_quotes, quotes = row["gold_quotes"], row["quotes"]
    gold = {
        gold_quotes[i - 1]["docid"]
        for i in numbers_in(gold_answer_text(row["answers"]))
        if i <= len(gold_quotes)
    }
    generated = {quotes[i - 1]["docid"] for i in numbers_in(row["output"]) if i <= 1}
    shared = gold & generated
    precision = len(shared) / len(generated) if generated else 0
    recall = len(shared) / len(gold) if gold else 0
    return precision, recall


def corrected_overlap(row: dict[str, Any]) -> tuple[float | None, float | None]:
    """The same with every in-range citation of the answer, None for an empty set."""
    gold_quotes, quotes = row["gold_quotes"], row["quotes"]
    gold = {
        gold_quotes[i - 1]["docid"]
        for i in numbers_in(gold_answer_text(row["answers"]))
        if 1 <= i <= len(gold_quotes)
    }
    generated = {quotes[i - 1]["docid"] for i in numbers_in(row["output"]) if 1 <= i <= len(quotes)}
    shared = gold & generated
    precision = len(shared) / len(generated) if generated else None
    recall = len(shared) / len(gold) if gold else None
    return precision, recall


def test_every_row_is_scored_as_attributed_ir_filters_them(rows, ours) -> None:
    kept = [r for r in rows if r["quotes"] and gold_answer_text(r["answers"])]
    assert len(rows) == len(kept) == len(ours) == ROWS


def test_defect_compatible_mode_equals_attributed_ir_on_every_row(rows, ours) -> None:
    theirs, mine = [], []
    for row in rows:
        overlap = citation_overlap(ours[row["query_id"]], defect_compatible=True)
        expected = their_overlap(row)
        got = (overlap.precision.value, overlap.recall.value)
        assert got == expected, f"query {row['query_id']}: ours {got}, theirs {expected}"
        theirs.append(expected)
        mine.append(got)
    assert fmean(p for p, _ in mine) == fmean(p for p, _ in theirs)
    assert fmean(r for _, r in mine) == fmean(r for _, r in theirs)
    assert fmean(p for p, _ in mine) == pytest.approx(DEFECT_PRECISION, abs=1e-12)
    assert fmean(r for _, r in mine) == pytest.approx(DEFECT_RECALL, abs=1e-12)


def test_corrected_mode_counts_every_citation(rows, ours) -> None:
    precisions, recalls, differ = [], [], 0
    for row in rows:
        overlap = citation_overlap(ours[row["query_id"]])
        expected = corrected_overlap(row)
        got = (overlap.precision.value, overlap.recall.value)
        assert got == expected, f"query {row['query_id']}: ours {got}, plain {expected}"
        differ += got != their_overlap(row)
        precisions += [got[0]] if got[0] is not None else []
        recalls += [got[1]] if got[1] is not None else []
    assert (len(precisions), len(recalls)) == (CORRECTED_N_PRECISION, CORRECTED_N_RECALL)
    assert fmean(precisions) == pytest.approx(CORRECTED_PRECISION, abs=1e-12)
    assert fmean(recalls) == pytest.approx(CORRECTED_RECALL, abs=1e-12)
    assert differ > 100  # the defect is not a corner case on this data


def test_gold_citations_name_gold_quotes_by_position(rows, ours) -> None:
    """Queries numbering their gold quotes from 0 still cite them from [1]."""
    zero_based = [r for r in rows if r["gold_quotes"] and r["gold_quotes"][0]["idx"] == 0]
    assert len(zero_based) == 91
    cited = {n for r in zero_based for a in r["answers"] for n in numbers_in(a["answer"])}
    assert 0 not in cited and max(cited) >= 2
    for row in zero_based:
        record = ours[row["query_id"]]
        assert [p.docid for p in record.gold_passages] == [q["docid"] for q in row["gold_quotes"]]


def test_the_jsonl_conversion_of_the_real_file_loads_back_unchanged(csv_path, ours, tmp_path):
    out = tmp_path / "hagrid.jsonl"
    assert hagrid_to_jsonl(csv_path, out) == ROWS
    assert load_answers(out) == list(ours.values())
