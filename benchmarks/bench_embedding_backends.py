"""Does the exported default embedder retrieve what torch retrieves? Recall@5 on the golden sets.

For the torch backend and the default (exported) backend, in turn: ingest the corpus into a fresh
home, then run the same weight scan on the same questions. Sets: the shipped sample golden set
(65 questions on the sample corpus), the French golden set of the tests (on
../shared/corpora/debian-reference-fr) and HAGRID (716 questions, built as in
``benchmarks.bench_retrieval``). Reported per set: inclusive Recall@5 with its 95% interval at the
dense-only weight and at the best weight, and whether each backend's value lies inside the other's
interval.

    .venv/bin/python -m benchmarks.bench_embedding_backends
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

from benchmarks._common import machine_line, require_shared, write_section
from benchmarks.bench_retrieval import K, build_task
from ragtrail.config import DEFAULT_TEXT_WEIGHTS, load_settings
from ragtrail.evaluate.retrieval.evaluator import ScanConfig, collect_candidates, scan
from ragtrail.paths import REPO_ROOT, sample_corpus_dir, sample_qa_set
from ragtrail.pipeline.ingest import ingest
from ragtrail.pipeline.run_io import load_items
from ragtrail.records import QAItem
from ragtrail.runtime import Runtime

BACKENDS = ("torch", "default")


def _recall_at_5(
    home: Path, models: Path, backend: str, corpus_dir: Path, qa: Path | list[QAItem]
) -> tuple[str, pd.DataFrame, int]:
    overrides = {} if backend == "default" else {"embedding_backend": backend}
    rt = Runtime(load_settings(home=home, model_cache_dir=models, **overrides))
    try:
        ingest(rt, str(corpus_dir), "bench")
        items = list(load_items(rt, qa)[0]) if isinstance(qa, Path) else qa
        cands = collect_candidates(rt.index("bench"), rt.embedder.encode, items, K)
        result = scan(items, cands, ScanConfig(text_weights=DEFAULT_TEXT_WEIGHTS, seed=0))
        m = result.metrics
        at = m[(m.label == "inclusive") & (m.metric == "recall@5")].set_index("text_weight")
        return rt.embedder_identity, at, len(items)
    finally:
        rt.close()


def _cell(at: pd.DataFrame, weight: float) -> str:
    row = at.loc[weight]
    return f"{row['value']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _inside(a: pd.DataFrame, b: pd.DataFrame, weight: float) -> bool:
    """Each value inside the other's interval."""
    va, vb = a.loc[weight], b.loc[weight]
    return bool(
        vb["ci_low"] <= va["value"] <= vb["ci_high"]
        and va["ci_low"] <= vb["value"] <= va["ci_high"]
    )


def run() -> str:
    csv_path = require_shared("reference", "hagrid-attributed-ir", "llama13_RTG_vanilla.csv")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hagrid_dir = root / "hagrid"
        hagrid_dir.mkdir()
        hagrid_items = build_task(csv_path, hagrid_dir)
        sets: dict[str, tuple[Path, Path | list[QAItem]]] = {
            "sample golden set (handbook-sample)": (sample_corpus_dir(), sample_qa_set()),
            "French golden set (debian-reference-fr)": (
                require_shared("corpora", "debian-reference-fr"),
                REPO_ROOT / "tests" / "fixtures" / "golden" / "debian-reference-fr.jsonl",
            ),
            "HAGRID": (hagrid_dir, hagrid_items),
        }
        for set_name, (corpus_dir, items) in sets.items():
            found = {}
            for backend in BACKENDS:
                home = root / f"{set_name[:6]}-{backend}"
                found[backend] = _recall_at_5(home, root / "models", backend, corpus_dir, items)
            (tid, torch_at, n), (did, default_at, _) = found["torch"], found["default"]
            best = float(default_at["value"].idxmax())
            for weight, what in ((0.0, "dense only"), (best, "best weight")):
                same = _inside(torch_at, default_at, weight)
                rows.append(
                    f"| {set_name} | {n} | {weight:g} ({what}) | {_cell(torch_at, weight)} | "
                    f"{_cell(default_at, weight)} | {'yes' if same else '**no**'} |"
                )
    load = os.getloadavg()
    table = "\n".join(rows)
    return f"""## Embedding backends — Recall@5, torch vs the exported default

Machine: {machine_line()}; load average at the end {load[0]:.2f}. Backends: embedded index,
SQLite; torch = `{tid}`, default = `{did}`. Same questions, same scan ({K} candidates per
modality, text weights {", ".join(f"{w:g}" for w in DEFAULT_TEXT_WEIGHTS)}), inclusive Recall@5
with its 95% interval.

| set | n | text weight | torch | default | each inside the other's interval |
|---|---|---|---|---|---|
{table}
"""


if __name__ == "__main__":
    section = run()
    print(section)
    write_section("embedding_backends", section)
