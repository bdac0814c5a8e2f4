"""Merge ablation runs (``st-magnitude ablation --output DIR``) into one table for benchmarks/results/.

Each run's rows are kept under their names; rows of later runs may be renamed with ``DIR:SUFFIX`` (e.g. a
calibrated run's ``qnorm`` becomes ``qnorm+cal``). Only runs with the same training set, steps, batch size,
seed, τ and evaluation sets may be merged (checked). Prints the Markdown table and writes JSON + Markdown.

Run: python benchmarks/ablation_report.py runs/ablation-nfcorpus-150 runs/ablation-nfcorpus-150-cal:+cal \
         --name ablation_nfcorpus_150
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from st_magnitude.ablation import render_markdown

RESULTS = Path(__file__).resolve().parent / "results"
SAME = ("train", "max_steps", "batch_size", "seed", "temperature", "learning_rate", "max_seq_length")
"""Settings that must agree; evaluation sets may differ (a later run may cover a subset; missing cells show –)."""


def merge(runs: list[tuple[Path, str]]) -> dict:
    merged: dict | None = None
    commands = []
    for folder, suffix in runs:
        data = json.loads((folder / "results.json").read_text())
        commands.append(data["environment"]["command"])
        if merged is None:
            merged = {**data, "results": {}, "train": {}}
        for key in SAME:
            if data["config"].get(key) != merged["config"].get(key):
                sys.exit(f"{folder}: config {key}={data['config'].get(key)!r} differs from the first run's "
                         f"{merged['config'].get(key)!r}; these runs are not comparable.")
        for row, values in data["results"].items():
            name = row if (row == "base" or not suffix) else f"{row}{suffix}"
            merged["results"][name] = values
            if row in data["train"]:
                merged["train"][name] = data["train"][row]
    assert merged is not None
    merged["environment"]["command"] = " ; ".join(commands)
    merged.pop("wall_seconds", None)
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="ablation output folders, optionally DIR:SUFFIX")
    parser.add_argument("--name", required=True, help="basename under benchmarks/results/")
    args = parser.parse_args()
    runs = []
    for spec in args.runs:
        folder, _, suffix = spec.partition(":")
        runs.append((Path(folder), suffix))
    merged = merge(runs)
    RESULTS.mkdir(exist_ok=True)
    table = render_markdown(merged)
    for metric in ("recall@100", "mrr@10"):
        table += "\n" + render_markdown(merged, metric=metric)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(merged, indent=2))
    (RESULTS / f"{args.name}.md").write_text(
        f"# {args.name}\n\nProduced by: `{merged['environment']['command']}`\n"
        f"Merged by: `python benchmarks/ablation_report.py {' '.join(args.runs)} --name {args.name}`\n\n{table}"
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
