"""The evidence extractor (SEER) with the bundled SmolLM2-135M on the sample corpus (CPU): the
base extractor zero-shot, after LPO (CoV-weighted experts, lambda-weighted pairs), the ablation
(equal expert weights), the model-free extractive baseline, the full passages and no context, on
the same held-out questions; and the promotion gate's decision on the trained version.

Steps, on one fresh ``RAGTRAIL_HOME`` (the model cache is shared with the default home so the
GGUF conversion is not timed), all through the code ``retrain_models`` runs:

1. ingest the sample corpus and its golden set; split its questions by question and document
   (:func:`ragtrail.pipeline.retrain_evidence.prepare_evidence_data`);
2. train v1 (``evidence_training`` as configured: CoV weights, lambda pairs) and v2 (the same
   samples, equal expert weights) with
   :func:`~ragtrail.pipeline.retrain_evidence.train_evidence_challenger`;
3. ``ragtrail eval evidence`` on the held-out questions only, with v1 as the extractor (its base
   zero-shot is the ``base`` method) and again with v2 (the other methods come from the cache);
4. the gate of ``retrain_models`` on v1 (base in service), and the same decision for v2.

    .venv/bin/python -m benchmarks.bench_evidence_training [--noise 0,4] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks._common import machine_line, write_section
from benchmarks.bench_citations import _ingest, _runtime

CORPUS = "sample"
METRICS = ("compression", "faithfulness", "helpfulness", "conciseness", "correct")


def _cell(row: Any) -> str:
    if row is None or row.value is None:
        return "undefined"
    return f"{row.value:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}] n={row.n}"


def _held_out_file(split: Any, out: Path) -> Path:
    """The held-out questions as a QA-set file (the golden rows, unchanged)."""
    from ragtrail.paths import sample_qa_set

    held = {p.qid for p in split.held_out}
    rows = [
        line
        for line in sample_qa_set().read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["qid"] in held
    ]
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def run(noise: tuple[float, ...] = (0.0, 4.0)) -> str:
    from ragtrail.evaluate.comparison.promotion import decide_evidence_promotion
    from ragtrail.pipeline.evidence.step import evaluate_evidence
    from ragtrail.pipeline.evidence.views import load_evidence
    from ragtrail.pipeline.retrain_evidence import (
        extractor_rows,
        gate_evidence_challenger,
        load_evidence_split,
        prepare_evidence_data,
        train_evidence_challenger,
    )
    from ragtrail.pipeline.run_io import complete_run

    with tempfile.TemporaryDirectory(prefix="ragtrail-bench-seer-") as tmp:
        rt = _runtime(Path(tmp) / "home")
        _ingest(rt, CORPUS)
        started = time.perf_counter()
        split_info = prepare_evidence_data(rt, corpus=CORPUS, run_id="seer-v1")
        split = load_evidence_split(rt, "seer-v1")
        cfg = rt.settings.evidence_training
        timings: dict[str, float] = {"split": time.perf_counter() - started}
        trained = {}
        for run_id, weighting in (("seer-v1", "cov"), ("seer-v2", "equal")):
            rt.settings.evidence_training = cfg.model_copy(update={"weighting": weighting})
            if run_id != "seer-v1":  # the ablation trains on the same split
                from ragtrail.artifact_keys import retrain_evidence_split_key

                rt.artifacts.put_bytes(
                    retrain_evidence_split_key(run_id), split.to_json().encode("utf-8")
                )
            started = time.perf_counter()
            trained[weighting] = train_evidence_challenger(rt, corpus=CORPUS, run_id=run_id)
            timings[f"train ({weighting})"] = time.perf_counter() - started
        rt.settings.evidence_training = cfg
        qa_file = _held_out_file(split, Path(tmp) / "held_out.jsonl")
        summaries = {}
        name = rt.settings.registry.extractor_model_name
        for weighting, version in trained.items():
            spec = f"registry:{name}@{version.version}"
            rt.settings.models.extractor = spec
            run_id = f"seer-eval-{weighting}"
            started = time.perf_counter()
            evaluate_evidence(
                rt, CORPUS, run_id=run_id, qa_set=str(qa_file), max_items=0, noise_ratios=noise
            )
            complete_run(rt, run_id)
            timings[f"evaluate ({weighting})"] = time.perf_counter() - started
            summaries[weighting] = load_evidence(rt, run_id)
        rt.settings.models.extractor = None
        started = time.perf_counter()
        gate = gate_evidence_challenger(
            rt, corpus=CORPUS, run_id="seer-v1", version=trained["cov"].version
        )
        timings["gate"] = time.perf_counter() - started
        base_rows = extractor_rows(rt, rt.settings.model_for("extractor"), split, "seer-v1")
        v2_rows = extractor_rows(
            rt, f"registry:{name}@{trained['equal'].version}", split, "seer-v1"
        )
        promotion = rt.settings.promotion
        ablation_gate = decide_evidence_promotion(
            base_rows,
            v2_rows,
            confidence=promotion.confidence,
            n_resamples=promotion.n_resamples,
            seed=promotion.seed,
            max_faithfulness_decrease=cfg.max_faithfulness_decrease,
            max_compression_decrease=cfg.max_compression_decrease,
            serving="the base extractor",
        )
        lineage = {w: rt.registry.get_version(name, v.version).lineage for w, v in trained.items()}
        rt.close()

    cov = summaries["cov"]
    rows = ["| method | noise | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 2) + "|"]
    methods = [("base", "base (SmolLM2 zero-shot)"), ("extractor", "after LPO (CoV, lambda)")]
    for noise_level in noise:
        for method, label in [
            *methods,
            ("extractor@equal", "after LPO (equal weights)"),
            ("extractive", "extractive baseline"),
            ("full", "full passages"),
            ("none", "no context"),
        ]:
            summary = summaries["equal"] if method == "extractor@equal" else cov
            key = "extractor" if method == "extractor@equal" else method
            if noise_level and key not in ("extractor", "full"):
                continue
            cells = [_cell(summary.aggregate(m, key, noise_level)) for m in METRICS]
            rows.append(f"| {label} | {noise_level:g} | " + " | ".join(cells) + " |")
    diffs = []
    for weighting, summary in summaries.items():
        for metric in ("correct_diff_vs_full", "correct_diff_vs_none"):
            diffs.append(
                f"- LPO ({weighting}) {metric.replace('correct_diff_', 'correct − ')}: "
                f"{_cell(summary.aggregate(metric, 'extractor'))}"
            )
    prefs = {w: lin["preferences"] for w, lin in lineage.items()}
    stage = {w: lin["stages"]["lpo"] for w, lin in lineage.items()}
    judges = ", ".join(
        f"{j.role}: {j.judge} ({'gates' if j.gates else 'advises'}: {j.reason})" for j in cov.judges
    )
    lines = [
        "## Evidence extractor (SEER) — SmolLM2-135M on the sample corpus (CPU)",
        "",
        machine_line(),
        "",
        f"Backends: embedded index, all-MiniLM-L6-v2, SQLite, local artifacts; extractor, "
        f"answerer, full-answer writer and helpfulness scorer all SmolLM2-135M-Instruct "
        f"(`{rt.settings.evidence.scorer}`). Judges: {judges}.",
        "",
        f"Split (seed {cfg.seed}, version `{split_info.split_version}`): {split_info.items} "
        f"golden questions, {split_info.train_prompts} training prompts "
        f"({cfg.max_train_prompts} used), {split_info.eval_items} held out "
        f"({split_info.held_out_documents} documents on the held-out side), "
        f"{split_info.dropped} dropped (unanswerable or no chunk left).",
        "",
        "| run | samples (M) | kept after dedup | empty | ranked lists | expert weights | "
        "LPO steps | loss first → last | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for weighting in ("cov", "equal"):
        p, s = prefs[weighting], stage[weighting]
        loss = s.get("loss") or []
        weights = ", ".join(f"{k[:5]} {v:.2f}" for k, v in p["weights"].items())
        lines.append(
            f"| {weighting} | {p['sampled']} ({cfg.samples}/prompt) | {p['kept_after_dedup']} | "
            f"{p['empty']} | {p['lists']} | {weights} | {s['steps']} | "
            f"{loss[0]:.3f} → {loss[-1]:.3f} | {timings[f'train ({weighting})']:.0f} |"
        )
    lines += [
        "",
        f"Held-out questions, greedy, the same seed for every method; mean [95% CI] n "
        f"(correct: Wilson; others: bootstrap). Evaluation wall time: "
        f"{timings['evaluate (cov)']:.0f} s (v1), {timings['evaluate (equal)']:.0f} s (v2, the "
        "other methods cached).",
        "",
        *rows,
        "",
        "Paired differences in correctness (questions scored both ways, paired bootstrap):",
        "",
        *diffs,
        "",
        f"Promotion gate of `retrain_models` on v1 (base extractor in service): "
        f"**{'promote' if gate.promoted else 'keep as challenger'}** — {gate.reason} "
        f"(in service {gate.current}, v1 {gate.challenger}; {timings['gate']:.0f} s).",
        "",
        f"Same gate for the ablation v2 (equal weights): "
        f"**{'promote' if ablation_gate.promote else 'keep'}** — {ablation_gate.reason}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", default="0,4", help="noise ratios of the evaluation")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    section = run(tuple(float(x) for x in args.noise.split(",")))
    print(section)
    if args.write:
        write_section("evidence-training", section)


if __name__ == "__main__":
    main()
