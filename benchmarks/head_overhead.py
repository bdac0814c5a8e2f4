"""Head overhead: encode throughput and one training step with each magnitude head vs ST's ``Normalize``.

Same encoder (the packaged all-MiniLM-L6-v2, max_seq_length 128), same batch, same run; the final module is
swapped between ``Normalize`` and each head, variants alternate round by round (so drift in machine load hits
all of them), and the median over rounds is reported. Encode = ``encode_document`` of ``--batch`` sentences
(one batch); train step = forward + MagnitudeInfoNCELoss (in-batch negatives) + backward + AdamW step on
``--train-batch`` (query, document) pairs, with the role stamped as the trainer's router_mapping would.

Usage: nice -n 15 python benchmarks/head_overhead.py --rounds 5
Writes benchmarks/results/head_overhead.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--train-batch", type=int, default=16)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from sentence_transformers.base.modules import Normalize

    from st_magnitude.data import load_training_triplets
    from st_magnitude.heads import Cosine, DNorm, Dot, LearnableNorm, QNorm
    from st_magnitude.losses import MagnitudeInfoNCELoss
    from st_magnitude.models import load_model

    torch.manual_seed(0)
    model = load_model()
    model.max_seq_length = 128
    rows = load_training_triplets("train-scifact", max_rows=args.batch + args.train_batch, seed=0)
    sentences = list(rows["positive"][: args.batch])
    queries = list(rows["anchor"][args.batch :])
    docs = list(rows["positive"][args.batch :])
    variants = {"Normalize (ST)": Normalize, "Cosine": Cosine, "Dot": Dot, "QNorm": QNorm, "DNorm": DNorm,
                "LearnableNorm": LearnableNorm}
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def set_last(module) -> None:
        del model[len(model) - 1]
        model.append(module)
        model.similarity_fn_name = "cosine" if isinstance(module, Normalize) else module.similarity_fn_name

    def train_step(loss_fn, opt) -> float:
        model.train()
        t = time.perf_counter()
        fq = model.preprocess(queries)
        fd = model.preprocess(docs)
        fq["task"], fd["task"] = "query", "document"
        loss = loss_fn([fq, fd], None)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        s = time.perf_counter() - t
        model.load_state_dict(state, strict=False)  # every variant trains from the same weights
        model.eval()
        return s

    times = {name: {"encode_s": [], "train_step_s": []} for name in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            set_last(variants[name]())
            t = time.perf_counter()
            with torch.no_grad():
                model.encode_document(sentences, batch_size=args.batch, convert_to_numpy=True)
            times[name]["encode_s"].append(time.perf_counter() - t)
            loss_fn = MagnitudeInfoNCELoss(model, temperature=0.05)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-9)
            times[name]["train_step_s"].append(train_step(loss_fn, opt))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    base = times["Normalize (ST)"]
    med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}
    table = []
    for name in variants:
        enc, step = med[name]["encode_s"], med[name]["train_step_s"]
        table.append(dict(variant=name, encode_docs_per_s=args.batch / enc, encode_median_s=enc,
                          encode_overhead_pct=100 * (enc / med["Normalize (ST)"]["encode_s"] - 1),
                          train_step_median_s=step,
                          train_overhead_pct=100 * (step / med["Normalize (ST)"]["train_step_s"] - 1),
                          encode_spread_s=[min(times[name]["encode_s"]), max(times[name]["encode_s"])],
                          train_spread_s=[min(times[name]["train_step_s"]), max(times[name]["train_step_s"])]))
    command = (f"nice -n {os.nice(0)} " if os.nice(0) else "") + "python benchmarks/head_overhead.py " + " ".join(sys.argv[1:])
    lines = "\n".join(
        f"| {t['variant']} | {t['encode_docs_per_s']:.1f} | {t['encode_overhead_pct']:+.1f}% | "
        f"{t['encode_spread_s'][0]:.2f}-{t['encode_spread_s'][1]:.2f} | {t['train_step_median_s']:.2f} | "
        f"{t['train_overhead_pct']:+.1f}% | {t['train_spread_s'][0]:.2f}-{t['train_spread_s'][1]:.2f} |" for t in table)
    md = (
        "# head_overhead: magnitude heads vs ST Normalize (all-MiniLM-L6-v2, CPU)\n\n"
        f"Medians over {args.rounds} alternating rounds; encode batch {args.batch}, train batch {args.train_batch} "
        "pairs (MagnitudeInfoNCELoss, AdamW). Load average at the end: "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine: the min-max spread shows the noise).\n\n"
        "| final module | encode docs/s | encode overhead | encode min-max s | train step s | train overhead | "
        "train min-max s |\n|---|---:|---:|---:|---:|---:|---:|\n"
        f"{lines}\n\nCommand: `{command}`\n"
    )
    print(md)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "head_overhead.json").write_text(json.dumps(dict(command=command, rows=table, raw=times,
                                                                load_avg=os.getloadavg()), indent=2))
    (RESULTS / "head_overhead.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
