"""Judges trained on human labels (``ragtrail judge train``) against the judges that exist offline.

1. Entailment on HAGRID's human "attributable" flags: ``train_judge`` fine-tunes a cross-encoder
   from the bundled all-MiniLM-L6-v2 on one half of the queries (its threshold tuned on a slice
   of that half) and calibrates it on the other half. On the same held-out pairs: the embedding
   judge (threshold tuned on the same training half, as the trained judge's is), and, on a seeded
   sample of them, the LLM judge (bundled SmolLM2-135M) with both other judges on that sample.
2. The labeller trained on the shipped sample golden set's labels (65 items: small), measured on
   the held-out half of its queries next to the LLM labeller on the same items.

Every figure is ragtrail's own calibration (kappa BCa from 20 items, accuracy Wilson, balanced
accuracy BCa; a failed verdict counts as wrong). Runs on a temporary RAGTRAIL_HOME.

    .venv/bin/python -m benchmarks.bench_trained_judges [--epochs 3] [--llm-sample 120] [--write]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import machine_line, require_shared, timer, write_section
from benchmarks.bench_citations import _ingest, _runtime
from benchmarks.bench_entailment import best_threshold

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SEED = 20241122
HAGRID = ("reference", "hagrid-attributed-ir", "llama13_RTG_vanilla.csv")


def figures(judge: Any, kind: Any, pairs: Sequence[Any], seed: int) -> dict[str, Any]:
    """Kappa, accuracy and balanced accuracy of ``judge`` on ``pairs``, with seconds taken."""
    from ragtrail.judges.calibration import balanced_accuracy, calibrate_categorical

    with timer() as elapsed:
        calibration, verdicts = calibrate_categorical(
            judge,
            [p.judge_input(kind) for p in pairs],
            [p.label for p in pairs],
            positive=kind.positive,
            n_resamples=2000,
            seed=seed,
        )
    seconds = elapsed()
    predicted = [str(v.value) if v.ok else None for v in verdicts]
    refs = [p.label for p in pairs]
    return {
        "judge": judge.spec.ref,
        "n": calibration.n,
        "failed": calibration.n_failed,
        "kappa": calibration.kappa,
        "accuracy": calibration.accuracy,
        "balanced": balanced_accuracy(
            refs, predicted, kind.categories, n_resamples=2000, seed=seed
        ),
        "seconds": seconds,
    }


def _est(e: Any) -> str:
    if e.value is None:
        return "undefined"
    if e.ci_low is None:
        return f"{e.value:.3f} (no interval)"
    return f"{e.value:.3f} [{e.ci_low:.3f}, {e.ci_high:.3f}]"


def _row(label: str, f: dict[str, Any], note: str = "") -> str:
    return (
        f"| {label} | {f['n']} | {_est(f['kappa'])} | {_est(f['accuracy'])} | "
        f"{_est(f['balanced'])} | {f['failed']} | {f['n'] / f['seconds']:.1f} | {note} |"
    )


HEADER = (
    "| judge | n | kappa [95% CI] | accuracy [95% CI] | balanced accuracy [95% CI] | failed "
    "| pairs/s judged | note |\n|---|---|---|---|---|---|---|---|"
)


def entailment(rt: Any, epochs: int, max_length: int, llm_sample: int) -> list[str]:
    from ragtrail.config import ModelRole
    from ragtrail.judges.embedding_entailment import EmbeddingEntailmentJudge
    from ragtrail.judges.llm_entailment import LLMEntailmentJudge
    from ragtrail.judges.trained import TRAINED_KINDS
    from ragtrail.pipeline.champion_judges import trained_judge
    from ragtrail.pipeline.judge_training import reference_pairs, train_judge
    from ragtrail.train.judge_training import JudgeTrainingConfig, split_pairs

    hagrid = require_shared(*HAGRID)
    kind = TRAINED_KINDS["entailment"]
    config = JudgeTrainingConfig(epochs=epochs, max_length=max_length, seed=SEED)
    report = train_judge(rt, "entailment", hagrid, corpus="sample", config=config)
    split = split_pairs(reference_pairs(rt, kind, hagrid, "sample"), config, tune=True)
    trained = trained_judge(rt, kind.judge_name, report["registered"]["version"])
    held = split.held_out

    probe = EmbeddingEntailmentJudge(rt.embedder, threshold=0.5, model_id="all-MiniLM-L6-v2")
    scores = probe.scores([p.judge_input(kind) for p in split.train])
    threshold, _ = best_threshold(
        [s if s is not None else -1.0 for s in scores], [p.label for p in split.train]
    )
    embedding = EmbeddingEntailmentJudge(
        rt.embedder, threshold=threshold, model_id="all-MiniLM-L6-v2"
    )
    trained_all = figures(trained, kind, held, SEED)
    embedding_all = figures(embedding, kind, held, SEED)
    sample = random.Random(SEED).sample(held, min(llm_sample, len(held)))
    llm = LLMEntailmentJudge(rt.llm(ModelRole.JUDGE))
    rows = [
        _row("trained cross-encoder (`entailment.trained`)", trained_all, "all held-out pairs"),
        _row(f"embedding judge, threshold {threshold:.2f}", embedding_all, "all held-out pairs"),
        _row("trained cross-encoder", figures(trained, kind, sample, SEED), "LLM sample"),
        _row("embedding judge", figures(embedding, kind, sample, SEED), "LLM sample"),
        _row("LLM judge (SmolLM2-135M)", figures(llm, kind, sample, SEED), "LLM sample"),
    ]
    t, s = report["training"], report["split"]
    return [
        f"**Entailment, HAGRID** (`{hagrid.name}`, {len(split.fit) + len(split.tune) + len(held)} "
        f"pairs in {sum(s[k]['queries'] for k in ('fit', 'tune', 'held_out'))} queries). Split by "
        f"query hash (seed {SEED}): fit {s['fit']['pairs']} pairs / {s['fit']['queries']} queries, "
        f"threshold tuning {s['tune']['pairs']} / {s['tune']['queries']}, held out "
        f"{s['held_out']['pairs']} / {s['held_out']['queries']}. Training: {epochs} epochs, batch "
        f"{config.batch_size}, lr {config.learning_rate}, {max_length} tokens per pair, "
        f"{t['seconds']:.0f} s ({t['pairs_per_second']:.1f} pairs/s), loss {t['loss_first']:.3f} -> "
        f"{t['loss_last']:.3f}, threshold {t['threshold']} (tuning balanced accuracy "
        f"{t['tuned_balanced_accuracy']:.3f}). Gate: {report['gate']['reason']}.",
        "",
        HEADER,
        *rows,
    ]


def labeller(rt: Any, epochs: int, max_length: int) -> list[str]:
    from ragtrail.judges.registry import JUDGES
    from ragtrail.judges.trained import TRAINED_KINDS
    from ragtrail.pipeline.champion_judges import trained_judge
    from ragtrail.pipeline.judge_training import reference_pairs, train_judge
    from ragtrail.pipeline.judges import LABELLER
    from ragtrail.pipeline.nightly import sample_qa_set
    from ragtrail.train.judge_training import JudgeTrainingConfig, split_pairs

    _ingest(rt, "sample")
    qa = sample_qa_set()
    kind = TRAINED_KINDS["labeller"]
    config = JudgeTrainingConfig(epochs=epochs, max_length=max_length, seed=SEED)
    report = train_judge(rt, "labeller", qa, corpus="sample", config=config)
    split = split_pairs(reference_pairs(rt, kind, qa, "sample"), config, tune=False)
    trained = trained_judge(rt, kind.judge_name, report["registered"]["version"])
    llm = JUDGES.build(rt, LABELLER)
    t, s = report["training"], report["split"]
    return [
        f"**Labeller, sample golden set** (`{qa.name}`: {len(split.fit) + len(split.held_out)} "
        f"labelled questions with their ground chunks; small). Fit {s['fit']['pairs']} items, held "
        f"out {s['held_out']['pairs']}; {epochs} epochs, {t['seconds']:.0f} s "
        f"({t['pairs_per_second']:.1f} pairs/s), loss {t['loss_first']:.3f} -> "
        f"{t['loss_last']:.3f}. Gate: {report['gate']['reason']}.",
        "",
        HEADER,
        _row(
            "trained cross-encoder (`labeller.trained`)",
            figures(trained, kind, split.held_out, SEED),
        ),
        _row("LLM labeller (SmolLM2-135M)", figures(llm, kind, split.held_out, SEED)),
    ]


def run(
    epochs: int = 3, max_length: int = 256, llm_sample: int = 120, labeller_epochs: int = 8
) -> str:
    with tempfile.TemporaryDirectory(prefix="ragtrail-bench-trained-") as tmp:
        rt = _runtime(Path(tmp) / "home")
        try:
            lines = entailment(rt, epochs, max_length, llm_sample)
            lines += ["", *labeller(rt, labeller_epochs, max_length)]
        finally:
            rt.close()
    return "\n".join(
        [
            "## Trained judges — cross-encoders fine-tuned on human labels (`ragtrail judge train`)",
            "",
            f"Machine: {machine_line()}; nothing else running. Base model: the bundled "
            "all-MiniLM-L6-v2 encoder with a new classification head (sentence-transformers "
            "CrossEncoderTrainer, cross-entropy, AdamW, seeded). Same calibration as every "
            "judge: kappa BCa (2000 resamples), accuracy Wilson, balanced accuracy BCa; the "
            "gate bar is kappa >= 0.40.",
            "",
            *lines,
            "",
            "Reproduce: `.venv/bin/python -m benchmarks.bench_trained_judges --write`.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--labeller-epochs", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--llm-sample", type=int, default=120)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    section = run(args.epochs, args.max_length, args.llm_sample, args.labeller_epochs)
    print(section)
    if args.write:
        write_section("trained_judges", section)


if __name__ == "__main__":
    main()
