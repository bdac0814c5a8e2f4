"""Peak RSS of st_magnitude.index.encode_corpus for N and 10 N documents (it should stay flat).

Each size runs in a fresh subprocess (peak RSS = ``ru_maxrss`` of that process), encoding a lazy corpus
(texts generated on access, so the corpus itself costs no memory) with a random BERT built in-process
(hidden 384 to match MiniLM's output width; 2 layers so it runs on a shared 2-core CPU). For contrast,
the same subprocess measurement for plain ``model.encode_document`` over a list of all texts (everything
in memory) is reported too.

Usage: nice -n 15 python benchmarks/streaming_rss.py --n 2000
Writes benchmarks/results/streaming_rss.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, {tests!r})
os.environ["HF_HUB_OFFLINE"] = "1"
from pathlib import Path
from conftest import build_tiny_bert
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Transformer
from sentence_transformers.sentence_transformer.modules import Pooling
from st_magnitude.heads import QNorm, attach_head
from st_magnitude.index import encode_corpus

mode, n, work = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
bert = build_tiny_bert(work / "bert", hidden=384, layers=2) if not (work / "bert" / "config.json").exists() else work / "bert"
tr = Transformer(str(bert), max_seq_length=32)
model = SentenceTransformer(modules=[tr, Pooling(tr.get_embedding_dimension(), "mean")], device="cpu")
attach_head(model, QNorm())

class LazyCorpus:
    def __len__(self): return n
    def __getitem__(self, i): return f"document {{i}} about the cat dog music water " + " ".join(["protein gene"] * (i % 5))

rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
if mode == "stream":
    emb = encode_corpus(model, LazyCorpus(), work / f"enc_{{n}}", batch_size=64, chunk_size=1000, show_progress_bar=False)
    shape = emb.shape
else:
    texts = [LazyCorpus()[i] for i in range(n)]
    emb = model.encode_document(texts, batch_size=64, convert_to_numpy=True)
    shape = emb.shape
print(json.dumps(dict(mode=mode, n=n, shape=list(shape), seconds=time.perf_counter() - t, rss_before_mib=rss0,
                      peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="small size; the large one is 10x")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir="/tmp") as work:
        code = CHILD.format(tests=str(REPO / "tests"))
        for mode in ("stream", "in_memory"):
            for n in (args.n, 10 * args.n):
                out = subprocess.run([sys.executable, "-c", code, mode, str(n), work], capture_output=True, text=True)
                if out.returncode != 0:
                    print(out.stderr[-3000:])
                    return 1
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(rows[-1], flush=True)
    command = (f"nice -n {os.nice(0)} " if os.nice(0) else "") + "python benchmarks/streaming_rss.py " + " ".join(sys.argv[1:])
    table = "\n".join(
        f"| {r['mode']} | {r['n']:,} | {r['peak_rss_mib']:.0f} | {r['peak_rss_mib'] - r['rss_before_mib']:.0f} | "
        f"{r['seconds']:.1f} |" for r in rows)
    by = {(r["mode"], r["n"]): r["peak_rss_mib"] for r in rows}
    growth = {m: by[(m, 10 * args.n)] - by[(m, args.n)] for m in ("stream", "in_memory")}
    md = (
        "# streaming_rss: peak RSS of encode_corpus vs corpus size\n\n"
        "| mode | documents | peak RSS MiB | growth during encoding MiB | seconds |\n|---|---:|---:|---:|---:|\n"
        f"{table}\n\nPeak RSS growth from {args.n:,} to {10 * args.n:,} documents: encode_corpus "
        f"{growth['stream']:+.0f} MiB, in-memory encode {growth['in_memory']:+.0f} MiB (384-d random 2-layer BERT, "
        "max_seq_length 32, chunk_size 1000, lazy corpus).\n\n"
        f"Command: `{command}`\n"
    )
    print(md)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "streaming_rss.json").write_text(json.dumps(dict(command=command, rows=rows, growth_mib=growth), indent=2))
    (RESULTS / "streaming_rss.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
