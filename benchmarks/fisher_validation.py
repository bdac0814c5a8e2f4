"""Validate the Fisher-κ recommender (st_magnitude.fisher) across base models that differ in pre-training.

Part 1 (always run): κ of the empirical FIM under QNorm, DNorm, Cosine and Dot, the recommendation and its
bootstrap confidence, and the wall time, for three base-model settings of the same architecture:

- ``pretrained``: the packaged all-MiniLM-L6-v2.
- ``random-init``: the same BertModel architecture and tokenizer, every weight randomly initialised
  (transformers' BERT init, seeded) -- no pre-training at all.
- ``top<K>-reinit``: MiniLM with its top K transformer layers (default K = 2 of 6) replaced by freshly
  initialised ones: lower layers keep their pre-trained features, the layers that shape the pooled embedding
  do not. This is the "re-initialise the top layers" setting of Zhang et al., "Revisiting Few-sample BERT
  Fine-tuning" (ICLR 2021), a partially pre-trained model between the two extremes.

Part 2 (only where results are given): compare each recommendation with the measured better of QNorm and DNorm
after fine-tuning, read from ablation results files (``st-magnitude ablation --output DIR`` writes
``DIR/results.json``: ``{"results": {HEAD: {DATASET: {"ndcg@10": x, ...}}}}``), one file per seed:

    --results pretrained=runs/minilm_s0 --results pretrained=runs/minilm_s1 \
    --results random-init=runs/random_s0 ...

(a folder means ``folder/results.json``). The measured winner of a setting is the head with the higher mean
nDCG@10 over every dataset and seed; per-seed winners are listed too. Settings without results are reported as
missing, never guessed. ``--save-models DIR`` writes the three base models, so the ablation can be run on the
very same weights (``st-magnitude ablation --model DIR/random-init ...``).

Writes ``benchmarks/results/<name>.json`` and ``.md`` (default name ``fisher_validation``) after every setting.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def build_model(setting: str, reinit_layers: int, seed: int):
    """The packaged MiniLM, modified for ``setting`` (``pretrained``, ``random-init``, ``top<K>-reinit``)."""
    import torch

    from st_magnitude.models import load_model

    model = load_model()
    if setting == "pretrained":
        return model
    hf = model[0].model
    torch.manual_seed(seed)
    fresh = type(hf)(hf.config)  # transformers' own initialisation (normal(0, initializer_range), LN = 1/0)
    if setting == "random-init":
        hf.load_state_dict(fresh.state_dict())
    elif setting == f"top{reinit_layers}-reinit":
        n_layers = len(hf.encoder.layer)
        for i in range(n_layers - reinit_layers, n_layers):
            hf.encoder.layer[i].load_state_dict(fresh.encoder.layer[i].state_dict())
    else:
        raise ValueError(f"unknown setting {setting!r}")
    return model


def read_results(path: str) -> dict[str, dict[str, float]]:
    """head -> dataset -> nDCG@10 from an ablation results.json (or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    data = json.loads(p.read_text(encoding="utf-8"))
    if "results" not in data or not isinstance(data["results"], dict):
        raise ValueError(f"{p}: expected {{'results': {{HEAD: {{DATASET: {{'ndcg@10': x}}}}}}}}")
    out: dict[str, dict[str, float]] = {}
    for head, per_dataset in data["results"].items():
        for dataset, metrics in per_dataset.items():
            if isinstance(metrics, dict) and "ndcg@10" in metrics:
                out.setdefault(head.lower(), {})[dataset] = float(metrics["ndcg@10"])
    return out


def measured_winner(files: list[str]) -> dict[str, Any]:
    """Measured better of QNorm and DNorm over the given per-seed result files."""
    per_seed = []
    all_q, all_d = [], []
    by_dataset: dict[str, dict[str, list[float]]] = {}
    for f in files:
        res = read_results(f)
        if "qnorm" not in res or "dnorm" not in res:
            per_seed.append({"file": f, "error": f"no qnorm/dnorm entry (heads: {sorted(res)})"})
            continue
        datasets = sorted(set(res["qnorm"]) & set(res["dnorm"]))
        q = [res["qnorm"][d] for d in datasets]
        d = [res["dnorm"][d] for d in datasets]
        all_q += q
        all_d += d
        for name, qv, dv in zip(datasets, q, d):
            by_dataset.setdefault(name, {"qnorm": [], "dnorm": []})
            by_dataset[name]["qnorm"].append(qv)
            by_dataset[name]["dnorm"].append(dv)
        per_seed.append(
            {"file": f, "datasets": datasets, "qnorm": statistics.mean(q), "dnorm": statistics.mean(d),
             "winner": "qnorm" if statistics.mean(q) > statistics.mean(d) else "dnorm"}
        )
    valid = [s for s in per_seed if "winner" in s]
    if not valid:
        return {"files": files, "per_seed": per_seed, "winner": None}
    mean_q, mean_d = statistics.mean(all_q), statistics.mean(all_d)
    return {
        "files": files,
        "n_seeds": len(valid),
        "per_seed": per_seed,
        "qnorm_ndcg@10": mean_q,
        "dnorm_ndcg@10": mean_d,
        "winner": "qnorm" if mean_q > mean_d else "dnorm",
        "seeds_agreeing_with_winner": sum(s["winner"] == ("qnorm" if mean_q > mean_d else "dnorm") for s in valid),
        "per_dataset": {
            name: {"qnorm": statistics.mean(v["qnorm"]), "dnorm": statistics.mean(v["dnorm"]),
                   "winner": "qnorm" if statistics.mean(v["qnorm"]) > statistics.mean(v["dnorm"]) else "dnorm",
                   "n_seeds": len(v["qnorm"])}
            for name, v in sorted(by_dataset.items())
        },
    }


def markdown(out: dict[str, Any]) -> str:
    s = out["settings"]
    lines = [
        "# Fisher-κ recommender: validation across pre-training settings",
        "",
        f"Command: `{out['command']}`",
        *([f"", f"Agreement table: `python {out['results_command']}`"] if out.get("results_command") else []),
        "",
        f"Data `{s['train']}`, n = {s['samples']} rows (query, positive, BM25 negative), batch {s['batch_size']}, "
        f"τ = {s['temperature']}, params `{s['params']}`, max_seq_length {s['max_seq_length']}, seed {s['seed']}, "
        f"{s['bootstrap']} bootstrap resamples. Environment: {out['environment']}.",
        "",
        "## κ per head (lower κ = better conditioned; recommendation = lower of QNorm/DNorm)",
        "",
        "| setting | κ qnorm [95% CI] | κ dnorm [95% CI] | κ cosine | κ dot | rank q/d (of n) | recommended | "
        "bootstrap confidence | κ99 q/d | by κ99 | encode s | κ s per head (q/d) |",
        "|---|---|---|---:|---:|---|---|---:|---|---|---:|---|",
    ]
    for name, r in out["kappa"].items():
        k, ci, rk = r["kappa"], r["kappa_ci"], r["rank"]
        lines.append(
            f"| {name} | {k['qnorm']:.4g} [{ci['qnorm'][0]:.3g}, {ci['qnorm'][1]:.3g}] | "
            f"{k['dnorm']:.4g} [{ci['dnorm'][0]:.3g}, {ci['dnorm'][1]:.3g}] | {k['cosine']:.4g} | {k['dot']:.4g} | "
            f"{rk['qnorm']}/{rk['dnorm']} (of {r['n_eigenvalues']}) | **{r['recommended']}** | {r['confidence']:.3f} | "
            f"{r['spectrum']['qnorm']['kappa_99']:.4g}/{r['spectrum']['dnorm']['kappa_99']:.4g} | "
            f"{'qnorm' if r['spectrum']['qnorm']['kappa_99'] <= r['spectrum']['dnorm']['kappa_99'] else 'dnorm'} | "
            f"{r['seconds']['encode']:.0f} | {r['seconds']['per_head']['qnorm']:.1f}/{r['seconds']['per_head']['dnorm']:.1f} |"
        )
    lines += ["", "## Agreement with fine-tuned outcomes", ""]
    rows = out["comparison"]
    if any(c.get("winner") for c in rows.values()):
        lines += [
            "| setting | recommended | measured better (mean nDCG@10 q / d) | seeds (agreeing) | agree | "
            "per set: nDCG@10 q / d, seed mean (set agrees) |",
            "|---|---|---|---:|---|---|",
        ]
    for name, c in rows.items():
        if c.get("winner"):
            per_set = "; ".join(
                f"{ds}: {v['qnorm']:.4f} / {v['dnorm']:.4f} ({'yes' if v['winner'] == c['recommended'] else 'no'})"
                for ds, v in c.get("per_dataset", {}).items()
            )
            lines.append(
                f"| {name} | {c['recommended']} | {c['winner']} ({c['qnorm_ndcg@10']:.4f} / {c['dnorm_ndcg@10']:.4f}) | "
                f"{c['n_seeds']} ({c['seeds_agreeing_with_winner']}) | {'yes' if c['agree'] else '**no**'} | {per_set} |"
            )
    missing = [n for n, c in rows.items() if not c.get("winner")]
    if missing:
        lines += [
            "",
            "**Missing:** no fine-tuned QNorm-vs-DNorm results were given for: "
            + ", ".join(missing)
            + ". Agreement for these settings is NOT measured. To measure it, run the ablation (QNorm and DNorm, "
            "≥ 2 seeds) on each base model (`--save-models DIR` writes them) and pass "
            "`--results SETTING=DIR/results.json` once per seed.",
        ]
    few = [n for n, c in rows.items() if c.get("winner") and c["n_seeds"] < 2]
    if few:
        lines += ["", f"Fewer than 2 seeds for: {', '.join(few)} (the issue asks for ≥ 2)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", default="train-scifact")
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--params", default="pooled-shift")
    parser.add_argument("--temperature", type=float, default=0.05)
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reinit-layers", type=int, default=2)
    parser.add_argument("--settings", nargs="+", default=None, help="subset of settings to run")
    parser.add_argument("--results", action="append", default=[], metavar="SETTING=PATH",
                        help="ablation results.json (or its folder) for one seed of one setting; repeat per seed")
    parser.add_argument("--save-models", default=None, help="write the base models of every setting here")
    parser.add_argument("--name", default="fisher_validation")
    parser.add_argument("--render-only", action="store_true", help="re-write the .md from the existing .json")
    args = parser.parse_args(argv)
    all_settings = ["pretrained", "random-init", f"top{args.reinit_layers}-reinit"]
    results_by_setting: dict[str, list[str]] = {}
    for item in args.results:
        key, _, path = item.partition("=")
        if key not in all_settings or not path:
            parser.error(f"--results expects SETTING=PATH with SETTING in {all_settings}, got {item!r}")
        results_by_setting.setdefault(key, []).append(path)
    if args.render_only:
        # Re-use the measured κ; with --results, recompute the agreement table from the given ablation runs.
        data = json.loads((RESULTS_DIR / f"{args.name}.json").read_text(encoding="utf-8"))
        if results_by_setting:
            data["results_command"] = " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
            _finish(data, results_by_setting, all_settings, args.name)
        (RESULTS_DIR / f"{args.name}.md").write_text(markdown(data), encoding="utf-8")
        print(markdown(data))
        return 0

    import torch

    from st_magnitude.fisher import encode_pooled, recommend_head, _sample_rows

    settings = args.settings or all_settings

    command = "nice -n 15 python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    out: dict[str, Any] = {
        "command": command,
        "environment": f"python {platform.python_version()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {platform.machine()}",
        "settings": {"train": args.train, "samples": args.samples, "batch_size": args.batch_size,
                     "max_seq_length": args.max_seq_length, "params": args.params, "temperature": args.temperature,
                     "bootstrap": args.bootstrap, "seed": args.seed, "reinit_layers": args.reinit_layers},
        "kappa": {},
        "comparison": {},
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    rows = _sample_rows(args.train, args.samples, seed=args.seed)
    for setting in settings:
        model = build_model(setting, args.reinit_layers, args.seed)
        if args.save_models:
            model.save(str(Path(args.save_models) / setting))
        t0 = time.perf_counter()
        emb = encode_pooled(model, rows, max_seq_length=args.max_seq_length, show_progress_bar=False)
        rec = recommend_head(None, None, embeddings=emb, params=args.params, temperature=args.temperature,
                             batch_size=args.batch_size, n_bootstrap=args.bootstrap, seed=args.seed)
        total = time.perf_counter() - t0
        out["kappa"][setting] = {
            "kappa": rec.kappa,
            "kappa_ci": rec.kappa_ci,
            "recommended": rec.recommended,
            "confidence": rec.confidence,
            "rank": {h: r.rank for h, r in rec.reports.items()},
            "n_eigenvalues": rec.reports["qnorm"].n_eigenvalues,
            "n_params": rec.reports["qnorm"].n_params,
            "lambda_max": {h: r.lambda_max for h, r in rec.reports.items()},
            "lambda_min": {h: r.lambda_min for h, r in rec.reports.items()},
            "floor": {h: r.floor for h, r in rec.reports.items()},
            "mean_loss": {h: r.mean_loss for h, r in rec.reports.items()},
            "spectrum": {h: r.spectrum for h, r in rec.reports.items()},
            "eigenvalues": {h: r.eigenvalues for h, r in rec.reports.items()},
            "mean_pooled_norm": {
                "query": float(emb.queries.norm(dim=-1).mean()),
                "positive": float(emb.positives.norm(dim=-1).mean()),
            },
            "seconds": {**rec.seconds, "encode": emb.seconds, "total_with_bootstrap": total},
        }
        print(f"[{setting}] κ: " + ", ".join(f"{h}={k:.4g}" for h, k in rec.kappa.items())
              + f" -> {rec.recommended} (confidence {rec.confidence:.3f}); encode {emb.seconds:.0f}s", flush=True)
        _finish(out, results_by_setting, all_settings, args.name)
        del model
    print()
    print(markdown(out))
    return 0


def _finish(out: dict[str, Any], results_by_setting: dict[str, list[str]], all_settings: list[str], name: str) -> None:
    from st_magnitude.fisher import _json_safe

    comparison = {}
    for setting in all_settings:
        rec = out["kappa"].get(setting)
        files = results_by_setting.get(setting, [])
        entry: dict[str, Any] = {"recommended": rec["recommended"] if rec else None}
        if files:
            entry.update(measured_winner(files))
            if entry.get("winner") and rec:
                entry["agree"] = entry["winner"] == rec["recommended"]
        else:
            entry["winner"] = None
            entry["missing"] = "no ablation results given"
        if rec is None:
            entry["missing_kappa"] = True
        comparison[setting] = entry
    out["comparison"] = comparison
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(_json_safe(out), indent=2) + "\n", encoding="utf-8")
    if out["kappa"]:
        (RESULTS_DIR / f"{name}.md").write_text(markdown(out), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
