"""Aggregate the recipe study (``bash benchmarks/recipe_study.sh``) into one table for benchmarks/results/.

Every cell under the study folder is one ``st-magnitude ablation`` run; every row of a cell (a head) becomes one
recipe: training set, head (norm-calibrated or not), steps, τ, negatives (file / in-batch only / mined), γ learning
rate and seed. Each recipe is compared with the cosine row trained the same way (same training set, steps,
negatives and seed; τ 0.05 when the recipe's own τ has no cosine row), so the relative change isolates the head.
Cells still running contribute the rows they have finished (an interrupted study keeps its finished cells).

Prints the Markdown table and writes ``<name>.md`` and ``<name>.json``.

Run: python benchmarks/recipe_report.py runs/recipe --name recipe_study
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
SETS = ("beir-nfcorpus", "beir-scifact", "beir-arguana")
DOMAIN = {"train-nfcorpus": "beir-nfcorpus", "train-scifact": "beir-scifact"}


def negatives(config: dict[str, Any]) -> str:
    """``mined`` (ST mine_hard_negatives with the base model), ``in-batch`` (no hard negative) or ``file``."""
    if config.get("mine_negatives", 0) > 0:
        return "mined"
    return "file" if config.get("use_negatives", True) else "in-batch"


def collect(study: Path) -> list[dict[str, Any]]:
    """One record per (cell, head row) with its config, NDCG@10 per set and first-50-step mean loss."""
    records = []
    for path in sorted(study.glob("*/results.json")):
        try:
            data = json.loads(path.read_text())
            config = data["config"]
        except (json.JSONDecodeError, KeyError, OSError) as exc:
            print(f"warning: skipping {path}: not a complete ablation results.json ({exc})", file=sys.stderr)
            continue
        for row, per_set in data["results"].items():
            if row == "base":
                continue
            train = data["train"].get(row, {})
            head = row.split("+")[0]
            early = [e["loss"] for e in train.get("log", []) if e.get("step", 0) <= 50 and "loss" in e]
            records.append({
                "cell": path.parent.name,
                "row": row,
                "head": head,
                "calibrated": bool(train.get("calibration")),
                "train": config["train"],
                "steps": config["max_steps"],
                "temperature": config["temperature"],
                "negatives": negatives(config),
                "gamma_lr": config["gamma_learning_rate"] if head == "learnable" else None,
                "seed": config["seed"],
                "final_gamma": train.get("final_gamma"),
                "train_seconds": train.get("seconds"),
                "loss_first_50": round(statistics.fmean(early), 3) if early else None,
                "ndcg@10": {name: per_set[name]["ndcg@10"] for name in SETS if name in per_set},
                "subsample": {name: data["datasets"][name].get("subsample") for name in SETS if name in data["datasets"]},
                "eval_sizes": {name: [data["datasets"][name].get("queries"), data["datasets"][name].get("docs")]
                               for name in SETS if name in data["datasets"]},
                "protocol": {k: config.get(k) for k in ("learning_rate", "batch_size", "max_seq_length", "model")},
                "command": data["environment"]["command"],
            })
    return records


def reference(record: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cosine row trained like ``record`` (same τ if there is one, else τ 0.05) and scored on the same
    evaluation sample; None when there is none (the row then shows no relative change)."""
    key = ("train", "steps", "negatives", "seed", "protocol", "subsample")
    cosines = [r for r in records if r["head"] == "cosine" and all(r[k] == record[k] for k in key)]
    for tau in (record["temperature"], 0.05):
        for r in cosines:
            if r["temperature"] == tau:
                return r
    return None


def label(record: dict[str, Any]) -> str:
    parts = [record["head"] + (" (cal)" if record["calibrated"] else "")]
    if record["steps"] != 150:
        parts.append(f"{record['steps']} steps")
    if record["temperature"] != 0.05:
        parts.append(f"τ {record['temperature']:g}")
    if record["negatives"] != "file":
        parts.append(f"{record['negatives']} negatives")
    if record["gamma_lr"] is not None:
        parts.append(f"γ-lr {record['gamma_lr']:g}")
    if record["seed"] != 42:
        parts.append(f"seed {record['seed']}")
    return ", ".join(parts)


def annotate(records: list[dict[str, Any]]) -> None:
    """Add ``mean_ood`` (None unless every out-of-domain set was scored) and, where :func:`reference` finds the
    matching cosine row, ``delta_vs_cosine`` (relative change per set) and ``delta_mean_ood_vs_cosine``."""
    for r in records:
        ood = [n for n in SETS if n != DOMAIN.get(r["train"])]
        complete = all(n in r["ndcg@10"] for n in ood)
        r["mean_ood"] = round(statistics.fmean(r["ndcg@10"][n] for n in ood), 6) if complete else None
    for r in records:
        ref = reference(r, records)
        if ref is None or ref is r:
            continue
        r["delta_vs_cosine"] = {n: round(v / ref["ndcg@10"][n] - 1, 6) for n, v in r["ndcg@10"].items()
                                if n in ref["ndcg@10"]}
        if r["mean_ood"] is not None and ref["mean_ood"] is not None:
            r["delta_mean_ood_vs_cosine"] = round(r["mean_ood"] / ref["mean_ood"] - 1, 6)


def _with_delta(value: float, delta: float | None) -> str:
    return f"{value:.4f}" + ("" if delta is None else f" ({delta * 100:+.1f}%)")


def render(records: list[dict[str, Any]]) -> str:
    """Markdown tables, one per training set, from :func:`annotate`-d records."""
    lines = []
    for train in sorted({r["train"] for r in records}):
        in_domain = DOMAIN.get(train)
        header = [f"{name.removeprefix('beir-')} ({'ID' if name == in_domain else 'OOD'})" for name in SETS]
        lines += [f"### Trained on `{train}`", "",
                  "| recipe | " + " | ".join(header) + " | mean OOD (Δ vs cosine same recipe) | loss steps ≤ 50 | final γ_q / γ_d | cell |",
                  "|---|" + "---|" * len(SETS) + "---|---|---|---|"]
        for r in (r for r in records if r["train"] == train):
            deltas = r.get("delta_vs_cosine", {})
            cells = [_with_delta(r["ndcg@10"][n], deltas.get(n)) if n in r["ndcg@10"] else "–" for n in SETS]
            mean_text = ("– (a set is missing)" if r["mean_ood"] is None
                         else _with_delta(r["mean_ood"], r.get("delta_mean_ood_vs_cosine")))
            gamma = r["final_gamma"] or {}
            gamma_text = f"{gamma.get('query', float('nan')):.3f} / {gamma.get('document', float('nan')):.3f}"
            loss = "–" if r["loss_first_50"] is None else f"{r['loss_first_50']:.2f}"
            lines.append(f"| {label(r)} | " + " | ".join(cells) + f" | {mean_text} | {loss} | {gamma_text} | `{r['cell']}` |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="the study folder (RECIPE_OUT of recipe_study.sh)")
    parser.add_argument("--name", default="recipe_study", help="output basename (default recipe_study)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="output folder (default benchmarks/results)")
    args = parser.parse_args()
    if not args.study.is_dir():
        sys.exit(f"{args.study} is not a folder; give the study folder (RECIPE_OUT of recipe_study.sh, default runs/recipe).")
    records = collect(args.study)
    if not records:
        sys.exit(f"No finished rows under {args.study}/*/results.json; run bash benchmarks/recipe_study.sh first.")
    annotate(records)
    table = render(records)
    samples = {json.dumps(r["subsample"], sort_keys=True) for r in records}
    sizes = records[0]["subsample"]
    if len(samples) > 1 or not all(sizes.values()):
        sample_text = ("cells were NOT all scored on the same evaluation sample (or on full sets); rows are compared "
                       "only with a cosine row scored on the same sample")
    else:
        sample_text = ("the BEIR test sets subsampled with the same seed in every cell ("
                       + ", ".join(f"{n.removeprefix('beir-')} {q} queries / {d:,} documents"
                                   for n, (q, d) in records[0]["eval_sizes"].items())
                       + "; every judged document of the kept queries plus random others): scores are higher than "
                       "on the full sets and comparable only within this table")
    text = "\n".join([
        "# Recipe study: cosine vs norm-calibrated magnitude heads (NDCG@10)", "",
        "all-MiniLM-L6-v2 (packaged), batch 16, max_seq_length 128, lr 2e-5, τ 0.05 and 150 steps unless the recipe "
        "says otherwise; magnitude heads norm-calibrated (`--calibrate on`); negatives = the training file's hard "
        f"negative column unless marked. Evaluation on {sample_text}. Relative changes are against the cosine row "
        "trained the same way (same training set, steps, negatives, seed, lr, batch, sequence length) and scored on "
        "the same sample. Produced by `bash benchmarks/recipe_study.sh` and `python benchmarks/recipe_report.py "
        "runs/recipe`; each cell's command is in the JSON.", "",
        table,
    ])
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{args.name}.md").write_text(text + "\n")
    (args.out_dir / f"{args.name}.json").write_text(json.dumps({"records": records}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
