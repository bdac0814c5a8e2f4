"""STS symmetry benchmark: what an asymmetric head does to a symmetric task (task symmetry principle).

For each head on STS-B and SICK-R (test), score every pair both ways -- s(a, b) with a as query and b as
document, and s(b, a) -- plus the symmetric cosine fallback, and report the Spearman ρ (×100) of each against the
gold scores and the asymmetry |s(a, b) − s(b, a)| (mean absolute, and relative to the mean |s|).

The asymmetric scoring here is *forced, opt-in and diagnostic*: st-magnitude refuses it in evaluation
(SymmetryViolationError). The paper (arXiv:2602.09229) reports a 40-45 point Spearman loss for asymmetric heads
on STS after asymmetric training.

Default: the packaged all-MiniLM-L6-v2 with each head attached (untrained heads: the base model's pooled
embeddings, the head's normalization applied). ``--model PATH`` (repeatable) adds trained models saved with
their heads (e.g. the ablation's outputs). Every sentence is encoded once per model (unique sentences, pooled
embedding before the head); each head's outputs are then exactly the head's maths
(:func:`st_magnitude.analysis.apply_head_to_pooled`).

Run:  nice -n 15 python benchmarks/sts_symmetry.py [--model PATH ...] [--max-pairs N]
Writes benchmarks/results/sts_symmetry.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad")

RESULTS = Path(__file__).resolve().parent / "results"


def score_pairs(model, pooled1: np.ndarray, pooled2: np.ndarray) -> dict[str, np.ndarray]:
    """s(a, b), s(b, a) and the cosine fallback for aligned pooled embeddings ``(n, dim)`` of a and b."""
    from st_magnitude.analysis import apply_head_to_pooled

    qa, da = apply_head_to_pooled(model, pooled1, "query"), apply_head_to_pooled(model, pooled1, "document")
    qb, db = apply_head_to_pooled(model, pooled2, "query"), apply_head_to_pooled(model, pooled2, "document")
    unit1 = pooled1 / np.linalg.norm(pooled1, axis=1, keepdims=True)
    unit2 = pooled2 / np.linalg.norm(pooled2, axis=1, keepdims=True)
    return {
        "s_ab": np.sum(qa * db, axis=1),
        "s_ba": np.sum(qb * da, axis=1),
        "fallback_cosine": np.sum(unit1 * unit2, axis=1),
    }


def evaluate_head(model, pooled: dict[str, np.ndarray], data) -> dict[str, float]:
    """Spearman ×100 of s(a,b), s(b,a), their mean and the fallback; asymmetry statistics."""
    p1 = np.stack([pooled[s] for s in data.sentences1])
    p2 = np.stack([pooled[s] for s in data.sentences2])
    s = score_pairs(model, p1, p2)
    gold = np.asarray(data.scores)
    gap = np.abs(s["s_ab"] - s["s_ba"])
    return {
        "spearman_ab": 100 * float(spearmanr(gold, s["s_ab"]).statistic),
        "spearman_ba": 100 * float(spearmanr(gold, s["s_ba"]).statistic),
        "spearman_mean_ab_ba": 100 * float(spearmanr(gold, (s["s_ab"] + s["s_ba"]) / 2).statistic),
        "spearman_fallback_cosine": 100 * float(spearmanr(gold, s["fallback_cosine"]).statistic),
        "asymmetry_mean_abs": float(gap.mean()),
        "asymmetry_max_abs": float(gap.max()),
        "asymmetry_relative": float(gap.mean() / max(np.abs(np.concatenate([s["s_ab"], s["s_ba"]])).mean(), 1e-12)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="append", default=[], help="trained model folder with its head (repeatable)")
    parser.add_argument("--heads", default="cosine,dot,qnorm,dnorm", help="heads attached to the base model")
    parser.add_argument("--no-base", action="store_true", help="skip the base model with attached heads")
    parser.add_argument("--datasets", default="stsb,sick-r")
    parser.add_argument("--split", default="test")
    parser.add_argument("--max-pairs", type=int, default=None, help="seeded subsample of pairs per dataset")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output-name", default="sts_symmetry")
    args = parser.parse_args(argv)

    import random

    import torch

    from st_magnitude.analysis import pooled_model
    from st_magnitude.data import StsData, load_sts
    from st_magnitude.heads import attach_head, make_head
    from st_magnitude.models import load_model
    from st_magnitude.symmetry import describe_head, is_symmetric

    datasets = {}
    for name in args.datasets.split(","):
        data = load_sts(name, split=args.split, data_dir=args.data_dir)
        if args.max_pairs is not None and args.max_pairs < len(data.scores):
            rows = sorted(random.Random(0).sample(range(len(data.scores)), args.max_pairs))
            data = StsData(name=data.name, split=data.split, sentences1=[data.sentences1[i] for i in rows],
                           sentences2=[data.sentences2[i] for i in rows], scores=[data.scores[i] for i in rows])
        datasets[name] = data
    sentences = sorted({s for d in datasets.values() for s in d.sentences1 + d.sentences2})

    def encode_pooled(model) -> dict[str, np.ndarray]:
        model.max_seq_length = args.max_seq_length
        trunk = pooled_model(model)
        # pooled embeddings do not depend on the role unless the model has role prompts; ours have none
        emb = trunk.encode(sentences, batch_size=args.batch_size, convert_to_numpy=True,
                           show_progress_bar=sys.stderr.isatty())
        return dict(zip(sentences, emb))

    runs: list[tuple[str, object, dict[str, np.ndarray]]] = []
    t0 = time.time()
    if not args.no_base:
        base = load_model()
        pooled = encode_pooled(base)
        for head_name in args.heads.split(","):
            model = attach_head(load_model(), make_head(head_name))
            runs.append((f"MiniLM + {head_name} (untrained head)", model, pooled))
    for path in args.model:
        model = load_model(path)
        runs.append((f"{path}", model, encode_pooled(model)))
    encode_seconds = time.time() - t0

    rows = []
    for label, model, pooled in runs:
        for name, data in datasets.items():
            with torch.no_grad():
                metrics = evaluate_head(model, pooled, data)
            rows.append({"model": label, "head": describe_head(model), "symmetric": is_symmetric(model),
                         "dataset": name, "n_pairs": len(data.scores), **metrics})

    command = "nice -n 15 python benchmarks/sts_symmetry.py " + " ".join(argv if argv is not None else sys.argv[1:])
    header = ("model", "dataset", "sym", "ρ s(a,b)", "ρ s(b,a)", "ρ fallback", "Δρ vs fallback", "mean|s(a,b)-s(b,a)|", "rel.")
    table = []
    for r in rows:
        table.append((r["model"], r["dataset"], "yes" if r["symmetric"] else "no", f"{r['spearman_ab']:.2f}",
                      f"{r['spearman_ba']:.2f}", f"{r['spearman_fallback_cosine']:.2f}",
                      f"{min(r['spearman_ab'], r['spearman_ba']) - r['spearman_fallback_cosine']:+.2f}",
                      f"{r['asymmetry_mean_abs']:.4f}", f"{r['asymmetry_relative']:.3f}"))
    widths = [max(len(str(x[i])) for x in [header, *table]) for i in range(len(header))]
    fmt = lambda row: "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |"  # noqa: E731
    lines = [fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, table)]
    env = {"python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
           "threads": torch.get_num_threads(), "encode_seconds": round(encode_seconds, 1),
           "unique_sentences": len(sentences), "max_seq_length": args.max_seq_length}
    print("\n".join(lines))
    print(f"\ncommand: {command}\nenvironment: {env}")

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"command": command, "environment": env, "rows": rows,
           "note": "ρ = Spearman ×100 against gold; Δρ = worse direction minus the cosine fallback. Heads on the base "
                   "model are untrained (pooled MiniLM embeddings with the head's normalization)."}
    (RESULTS / f"{args.output_name}.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    md = [
        "# STS symmetry benchmark",
        "",
        "Spearman ρ (×100) of each head's score against the gold STS scores, computed both ways (s(a,b): sentence1 as "
        "query, sentence2 as document; s(b,a): swapped), and with the symmetric cosine fallback (both sides "
        "L2-normalized). Asymmetric scoring is forced here for diagnosis only; `st-magnitude evaluate` refuses it "
        "(SymmetryViolationError).",
        "",
        *lines,
        "",
        f"Command: `{command}`",
        "",
        f"Environment: `{json.dumps(env)}`",
        "",
        out["note"],
        "",
    ]
    (RESULTS / f"{args.output_name}.md").write_text("\n".join(md), encoding="utf-8")
    print(f"wrote {RESULTS / (args.output_name + '.json')} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
