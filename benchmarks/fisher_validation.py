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
import math
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


class ResultsError(ValueError):
    """An ablation results file that cannot be used (named, with the fix)."""


def _results_file(path: str) -> Path:
    p = Path(path)
    return p / "results.json" if p.is_dir() else p


def read_run(path: str) -> dict[str, Any]:
    """``{"file", "ndcg": {head: {dataset: x}}, "seed", "calibrated": {head: bool}}`` from one ablation run's
    results.json (or a folder holding one).

    Raises:
        ResultsError: missing or invalid file, wrong layout, or a non-finite nDCG@10.
    """
    p = _results_file(path)
    if not p.is_file():
        raise ResultsError(f"{p} not found; give an `st-magnitude ablation --output DIR` folder or its results.json.")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ResultsError(f"{p} is not valid JSON ({err}).") from err
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise ResultsError(f"{p}: expected {{'results': {{HEAD: {{DATASET: {{'ndcg@10': x}}}}}}}}")
    out: dict[str, dict[str, float]] = {}
    for head, per_dataset in data["results"].items():
        if not isinstance(per_dataset, dict):
            continue
        for dataset, metrics in per_dataset.items():
            if isinstance(metrics, dict) and "ndcg@10" in metrics:
                try:
                    value = float(metrics["ndcg@10"])
                except (TypeError, ValueError):
                    value = math.nan
                if not math.isfinite(value):
                    raise ResultsError(f"{p}: {head} on {dataset} has nDCG@10 {metrics['ndcg@10']!r}, not a finite number.")
                out.setdefault(head.lower(), {})[dataset] = value
    train = data.get("train") if isinstance(data.get("train"), dict) else {}
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    return {
        "file": str(p),
        "ndcg": out,
        "seed": config.get("seed"),
        "calibrated": {h: bool((train.get(h) or {}).get("calibration")) for h in ("qnorm", "dnorm")},
    }


def measured_winner(files: list[str]) -> dict[str, Any]:
    """Measured better of QNorm and DNorm over the given per-seed result files.

    Raises:
        ResultsError: a file named twice, two runs with the same seed, runs that differ in norm calibration of
            their qnorm/dnorm rows, or qnorm and dnorm with no evaluation set in common.
    """
    per_seed = []
    all_q, all_d = [], []
    by_dataset: dict[str, dict[str, list[float]]] = {}
    runs = [read_run(f) for f in files]
    resolved = [str(Path(r["file"]).resolve()) for r in runs]
    if len(set(resolved)) < len(resolved):
        raise ResultsError(f"the same results file is given twice for one setting: {files}; each file is one seed.")
    seeds = [r["seed"] for r in runs if r["seed"] is not None]
    if len(set(seeds)) < len(seeds):
        raise ResultsError(f"two runs of one setting share a seed ({seeds}); agreement needs distinct seeds.")
    modes = {(r["calibrated"]["qnorm"], r["calibrated"]["dnorm"]) for r in runs if r["ndcg"].keys() >= {"qnorm", "dnorm"}}
    if len(modes) > 1:
        raise ResultsError(f"runs of one setting differ in norm calibration of qnorm/dnorm ({sorted(modes)}): {files}; "
                           "compare like with like (all --calibrate off, or all on).")
    for run in runs:
        f, res = run["file"], run["ndcg"]
        if "qnorm" not in res or "dnorm" not in res:
            per_seed.append({"file": f, "error": f"results given but no qnorm/dnorm rows (heads: {sorted(res)})"})
            continue
        datasets = sorted(set(res["qnorm"]) & set(res["dnorm"]))
        if not datasets:
            raise ResultsError(f"{f}: qnorm and dnorm share no evaluation set (qnorm: {sorted(res['qnorm'])}, "
                               f"dnorm: {sorted(res['dnorm'])}).")
        q = [res["qnorm"][d] for d in datasets]
        d = [res["dnorm"][d] for d in datasets]
        all_q += q
        all_d += d
        for name, qv, dv in zip(datasets, q, d):
            by_dataset.setdefault(name, {"qnorm": [], "dnorm": []})
            by_dataset[name]["qnorm"].append(qv)
            by_dataset[name]["dnorm"].append(dv)
        per_seed.append(
            {"file": f, "seed": run["seed"], "calibrated": run["calibrated"]["qnorm"] or run["calibrated"]["dnorm"],
             "datasets": datasets, "qnorm": statistics.mean(q), "dnorm": statistics.mean(d),
             "winner": "qnorm" if statistics.mean(q) > statistics.mean(d) else "dnorm"}
        )
    valid = [s for s in per_seed if "winner" in s]
    if not valid:
        return {"files": files, "per_seed": per_seed, "winner": None,
                "missing": "; ".join(f"{s['file']}: {s['error']}" for s in per_seed)}
    mean_q, mean_d = statistics.mean(all_q), statistics.mean(all_d)
    return {
        "files": files,
        "n_seeds": len(valid),
        "seeds": [s["seed"] for s in valid],
        "calibrated": valid[0]["calibrated"],
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


def _by_kappa_99(spectrum: dict[str, Any]) -> str:
    q, d = spectrum["qnorm"]["kappa_99"], spectrum["dnorm"]["kappa_99"]
    if not (math.isfinite(q) and math.isfinite(d)):
        return "–"
    return "qnorm" if q <= d else "dnorm"


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
        if not all("kappa_99" in (r.get("spectrum") or {}).get(h, {}) for h in ("qnorm", "dnorm")):
            r = {**r, "spectrum": {h: {"kappa_99": math.nan} for h in ("qnorm", "dnorm")}}  # older files: no κ99
        lines.append(
            f"| {name} | {k['qnorm']:.4g} [{ci['qnorm'][0]:.3g}, {ci['qnorm'][1]:.3g}] | "
            f"{k['dnorm']:.4g} [{ci['dnorm'][0]:.3g}, {ci['dnorm'][1]:.3g}] | {k['cosine']:.4g} | {k['dot']:.4g} | "
            f"{rk['qnorm']}/{rk['dnorm']} (of {r['n_eigenvalues']}) | **{r['recommended']}** | {r['confidence']:.3f} | "
            f"{r['spectrum']['qnorm']['kappa_99']:.4g}/{r['spectrum']['dnorm']['kappa_99']:.4g} | "
            f"{_by_kappa_99(r['spectrum'])} | "
            f"{r['seconds']['encode']:.0f} | {r['seconds']['per_head']['qnorm']:.1f}/{r['seconds']['per_head']['dnorm']:.1f} |"
        )
    lines += ["", "## Agreement with fine-tuned outcomes", ""]
    rows = out["comparison"]
    if any(c.get("winner") for c in rows.values()):
        lines += [
            "| setting | recommended | measured better (mean nDCG@10 q / d) | seeds (agreeing) | calibrated | agree | "
            "per set: nDCG@10 q / d, seed mean (set agrees) |",
            "|---|---|---|---:|---|---|---|",
        ]
    for name, c in rows.items():
        if c.get("winner"):
            per_set = "; ".join(
                f"{ds}: {v['qnorm']:.4f} / {v['dnorm']:.4f} ({'yes' if v['winner'] == c['recommended'] else 'no'})"
                for ds, v in c.get("per_dataset", {}).items()
            )
            agree = "no κ measured" if c.get("recommended") is None else ("yes" if c.get("agree") else "**no**")
            lines.append(
                f"| {name} | {c['recommended'] or '–'} | {c['winner']} ({c['qnorm_ndcg@10']:.4f} / "
                f"{c['dnorm_ndcg@10']:.4f}) | {c['n_seeds']} ({c['seeds_agreeing_with_winner']}) | "
                f"{'yes' if c.get('calibrated') else 'no'} | {agree} | {per_set} |"
            )
    unusable = {n: c["missing"] for n, c in rows.items() if not c.get("winner") and c.get("files")}
    for name, why in unusable.items():
        lines += ["", f"**{name}:** results given but unusable: {why}."]
    missing = [n for n, c in rows.items() if not c.get("winner") and not c.get("files")]
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
        stored = RESULTS_DIR / f"{args.name}.json"
        if not stored.is_file():
            parser.error(f"{stored} not found: run without --render-only first to measure κ (or fix --name).")
        try:
            data = json.loads(stored.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            parser.error(f"{stored} is not valid JSON ({err}); re-run without --render-only.")
        stored_layers = data.get("settings", {}).get("reinit_layers", args.reinit_layers)
        if stored_layers != args.reinit_layers:
            parser.error(f"{stored} was measured with --reinit-layers {stored_layers}; pass the same value "
                         f"(settings are then named top{stored_layers}-reinit).")
        if results_by_setting:
            data["results_command"] = " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
            try:
                _finish(data, results_by_setting, all_settings, args.name)
            except ResultsError as err:
                parser.error(str(err))
        else:
            (RESULTS_DIR / f"{args.name}.md").write_text(markdown(data), encoding="utf-8")
        print(markdown(data))
        return 0
    try:  # check the results files before the (slow) κ measurement
        for setting, files in results_by_setting.items():
            measured_winner(files)
    except ResultsError as err:
        parser.error(str(err))

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
    text = markdown(out) if out["kappa"] else None  # render first: a failure must not leave a half-written file
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(_json_safe(out), indent=2) + "\n", encoding="utf-8")
    if text is not None:
        (RESULTS_DIR / f"{name}.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
