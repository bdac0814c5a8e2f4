"""Index quality/speed for magnitude-keeping (QNorm) embeddings: flat IP vs native IP-HNSW vs MIPS-transformed
L2-HNSW (Bachrach et al., RecSys 2014), plus IVF both ways.

Recall@10 is measured against exact MIPS (flat inner product over the raw documents); QPS is nq / wall seconds
for one batched search of all queries, all methods measured in the same run on the same data and threads.

Two data sets:
  synthetic  N vectors, 384-d: directions from a Gaussian mixture (1,000 clusters; cosine to the cluster centre
             ~0.5), norms log-normal with the spread of real MiniLM document norms (sigma given by --norm-sigma);
             queries are unit vectors (QNorm) drawn from the same mixture.
  real       QNorm documents/queries of a real corpus (documents keep their norm, queries are normalized), cached
             by --cache. The cache is made by encode_corpus over a seeded random sample of the corpus at
             max_seq_length 128, either with raw pooled all-MiniLM-L6-v2 (Normalize removed) or, with
             --cache-model, a QNorm-fine-tuned model; see data_source in the output JSON.

Usage:
  nice -n 15 python benchmarks/index_bench.py cache --beir beir-arguana --cache-docs 2000 --cache-queries 300 \
      --cache /tmp/st_magnitude_cache/arguana-minilm-raw-128-2000
  python benchmarks/index_bench.py cache --beir beir-arguana --cache-docs 100000 --cache-queries 1406 \
      --cache-model runs/ablation-nfcorpus-300/models/qnorm --cache /tmp/st_magnitude_cache/arguana-qnorm300-full
  nice -n 15 python benchmarks/index_bench.py synthetic --n 1000000 --threads 2 --methods flat,ivf_l2,ivf_ip
  nice -n 15 python benchmarks/index_bench.py real --cache /tmp/st_magnitude_cache/arguana-minilm-raw-128-2000

Writes benchmarks/results/index_<dataset>_<n>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def synthetic(n: int, nq: int, dim: int, norm_sigma: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian-mixture directions with log-normal norms; generated in blocks (float32)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1000, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    docs = np.empty((n, dim), dtype=np.float32)
    for lo in range(0, n, 100_000):
        hi = min(n, lo + 100_000)
        c = centres[rng.integers(0, 1000, hi - lo)]
        x = c + rng.standard_normal((hi - lo, dim)).astype(np.float32) * np.float32(1.0 / np.sqrt(dim) * 1.7)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        x *= rng.lognormal(0.0, norm_sigma, size=(hi - lo, 1)).astype(np.float32)
        docs[lo:hi] = x
    cq = centres[rng.integers(0, 1000, nq)]
    q = cq + rng.standard_normal((nq, dim)).astype(np.float32) * np.float32(1.0 / np.sqrt(dim) * 1.7)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return docs, q.astype(np.float32)


def _load_cached(folder: Path, name: str) -> np.ndarray:
    """``folder/<name>.npy``, else the finished encode_corpus chunks under ``folder/<name[0]>/`` (a prefix of a
    seeded random sample of the corpus is itself a random sample)."""
    if (folder / f"{name}.npy").is_file():
        return np.load(folder / f"{name}.npy")
    sub = folder / name[0]
    if (sub / "embeddings.npy").is_file():
        return np.load(sub / "embeddings.npy")
    chunks = []
    for i in range(10_000):
        f = sub / "chunks" / f"chunk_{i:05d}.npy"
        if not f.is_file():
            break
        chunks.append(np.load(f))
    if not chunks:
        raise SystemExit(f"no cached {name} under {folder}; run the caching script named in the module docstring")
    return np.concatenate(chunks)


def make_cache(cache: Path, dataset: str, n_docs: int, n_queries: int, seed: int, model_path: str | None = None) -> None:
    """Encode a seeded random sample of a BEIR corpus through encode_corpus (chunked, resumable) into ``cache``:
    with raw pooled MiniLM (Normalize removed = QNorm's document side), or with ``model_path``, a model saved
    with a QNorm head (e.g. the ablation's fine-tuned ``models/qnorm``), queries and documents each in their role."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers.base.modules import Normalize

    from st_magnitude.data import load_beir
    from st_magnitude.index import encode_corpus
    from st_magnitude.models import load_model

    d = load_beir(dataset, "test")
    rng = np.random.default_rng(seed)
    dids = sorted(d.corpus)
    dids = [dids[i] for i in np.sort(rng.choice(len(dids), min(n_docs, len(dids)), replace=False))]
    qids = sorted(d.queries)
    qids = [qids[i] for i in np.sort(rng.choice(len(qids), min(n_queries, len(qids)), replace=False))]
    if model_path:
        from st_magnitude.heads import QNorm, find_head

        m = load_model(model_path)
        if not isinstance(find_head(m), QNorm):
            raise SystemExit(f"--cache-model {model_path} has no QNorm head; this benchmark measures QNorm MIPS")
    else:
        m = load_model()
        while isinstance(m[len(m) - 1], Normalize):
            del m[len(m) - 1]
    m.max_seq_length = 128
    encode_corpus(m, [d.queries[i] for i in qids], cache / "q", batch_size=64, chunk_size=100, role="query")
    encode_corpus(m, [d.corpus[i] for i in dids], cache / "d", batch_size=64, chunk_size=250)
    (cache / "meta.json").write_text(json.dumps(dict(dataset=dataset, docs=len(dids), queries=len(qids),
                                                     corpus_docs=len(d.corpus), seed=seed, max_seq_length=128,
                                                     model=model_path or "all-MiniLM-L6-v2 raw pooled")))


def real(cache: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """QNorm outputs from cached raw pooled embeddings: documents raw, queries L2-normalized."""
    docs = _load_cached(cache, "docs").astype(np.float32)
    q = _load_cached(cache, "queries").astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    meta = json.loads((cache / "meta.json").read_text()) if (cache / "meta.json").is_file() else {}
    return docs, q, meta


def index_bytes(index) -> int:
    import faiss

    with tempfile.NamedTemporaryFile(dir="/tmp", suffix=".faiss") as f:
        faiss.write_index(index, f.name)
        return os.path.getsize(f.name)


def recall_at(ids: np.ndarray, truth: np.ndarray, k: int = 10) -> float:
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(ids, truth)]))


def run(docs: np.ndarray, queries: np.ndarray, methods: list[str], args) -> list[dict]:
    import faiss

    from st_magnitude.heads import QNorm
    from st_magnitude.index import build_index, search

    rows: list[dict] = []
    k = 10
    t = time.perf_counter()
    flat = build_index(docs, head=QNorm(), kind="flat")
    build_flat = time.perf_counter() - t
    t = time.perf_counter()
    truth_scores, truth = search(flat, queries, k)
    flat_s = time.perf_counter() - t
    flat_qps = len(queries) / flat_s
    rows.append(dict(method="flat IP (exact)", param="-", build_s=build_flat, qps=flat_qps, recall10=1.0,
                     speedup=1.0, index_mb=docs.nbytes / 2**20))
    print(f"flat: {flat_qps:.1f} QPS", flush=True)
    del flat
    for method in methods:
        if method == "flat":
            continue
        kind, metric = method.split("_")  # hnsw_ip, hnsw_l2, ivf_ip, ivf_l2
        transform = "mips_l2" if metric == "l2" else "none"
        t = time.perf_counter()
        if kind == "hnsw":
            idx = build_index(docs, head=QNorm(), kind="hnsw", transform=transform, hnsw_m=args.hnsw_m,
                              ef_construction=args.ef_construction)
            sweep = [int(x) for x in args.ef_search.split(",")]
        else:
            idx = build_index(docs, head=QNorm(), kind="ivf", transform=transform, nlist=args.nlist,
                              train_size=args.train_size)
            sweep = [int(x) for x in args.nprobe.split(",")]
        build_s = time.perf_counter() - t
        mb = index_bytes(idx.index) / 2**20
        print(f"{method}: built in {build_s:.1f}s, {mb:.0f} MiB", flush=True)
        label = {"hnsw_ip": "native IP-HNSW", "hnsw_l2": "MIPS->L2 HNSW", "ivf_ip": "native IP-IVF",
                 "ivf_l2": "MIPS->L2 IVF"}[method]
        for p in sweep:
            if kind == "hnsw":
                idx.set_search_params(ef_search=p)
            else:
                idx.set_search_params(nprobe=p)
            t = time.perf_counter()
            _, ids = search(idx, queries, k)
            s = time.perf_counter() - t
            qps = len(queries) / s
            r = recall_at(ids, truth, k)
            rows.append(dict(method=label, param=("efSearch=" if kind == "hnsw" else "nprobe=") + str(p),
                             build_s=build_s, qps=qps, recall10=r, speedup=qps / flat_qps, index_mb=mb))
            print(f"  {rows[-1]['param']}: recall@10 {r:.4f}, {qps:.0f} QPS ({qps / flat_qps:.1f}x flat)", flush=True)
        del idx
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", choices=["synthetic", "real", "cache"])
    ap.add_argument("--beir", default="beir-arguana", help="corpus for 'cache'")
    ap.add_argument("--cache-model", default=None, help="model saved with a QNorm head for 'cache' (default: raw MiniLM)")
    ap.add_argument("--cache-docs", type=int, default=2000)
    ap.add_argument("--cache-queries", type=int, default=300)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--nq", type=int, default=500)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--norm-sigma", type=float, default=0.15, help="log-normal sigma of synthetic document norms")
    ap.add_argument("--cache", default="/tmp/st_magnitude_cache/arguana-minilm-raw-128-2000")
    ap.add_argument("--methods", default="flat,hnsw_ip,hnsw_l2,ivf_ip,ivf_l2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=40)
    ap.add_argument("--ef-search", default="16,32,64,128,256")
    ap.add_argument("--nlist", type=int, default=None)
    ap.add_argument("--nprobe", default="1,2,4,8,16,32,64")
    ap.add_argument("--train-size", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if args.dataset == "cache":
        make_cache(Path(args.cache), args.beir, args.cache_docs, args.cache_queries, args.seed, args.cache_model)
        return 0
    import faiss

    faiss.omp_set_num_threads(args.threads)
    t0 = time.perf_counter()
    extra: dict = {}
    if args.dataset == "synthetic":
        docs, queries = synthetic(args.n, args.nq, args.dim, args.norm_sigma, args.seed)
        name = f"index_synthetic_{args.n}"
    else:
        docs, queries, extra = real(Path(args.cache))
        if args.nq < len(queries):
            queries = queries[np.random.default_rng(args.seed).choice(len(queries), args.nq, replace=False)]
        name = f"index_real_{Path(args.cache).name}"
    norms = np.linalg.norm(docs, axis=1)
    data_info = dict(n=len(docs), nq=len(queries), dim=docs.shape[1], doc_norm_mean=float(norms.mean()),
                     doc_norm_std=float(norms.std()), doc_norm_min=float(norms.min()), doc_norm_max=float(norms.max()),
                     doc_norm_cv=float(norms.std() / norms.mean()))
    print(json.dumps(data_info), flush=True)
    if args.nlist is None:
        args.nlist = int(max(16, min(len(docs) // 39, round(4 * np.sqrt(len(docs))))))
    rows = run(docs, queries, [m.strip() for m in args.methods.split(",")], args)
    command = (f"nice -n {os.nice(0)} " if os.nice(0) else "") + "python " + " ".join(["benchmarks/index_bench.py"] + sys.argv[1:])
    env = dict(python=platform.python_version(), faiss=faiss.__version__, threads=args.threads,
               cpu_count=os.cpu_count(), load_avg_1m=os.getloadavg()[0],
               peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    result = dict(command=command, data=data_info, data_source=extra, params=vars(args), env=env, rows=rows,
                  wall_s=time.perf_counter() - t0)
    best = [r for r in rows if r["recall10"] >= 0.95 and r["speedup"] >= 10]
    result["target_met"] = bool(best)
    header = "| method | param | recall@10 | QPS | × flat | build s | index MiB |\n|---|---|---:|---:|---:|---:|---:|"
    table = "\n".join(
        f"| {r['method']} | {r['param']} | {r['recall10']:.4f} | {r['qps']:.0f} | {r['speedup']:.1f} | "
        f"{r['build_s']:.1f} | {r['index_mb']:.0f} |" for r in rows)
    md = (f"# {name}\n\nData: {json.dumps(data_info)}\n\n{header}\n{table}\n\n"
          f"Target (recall@10 >= 0.95 at >= 10x flat QPS) met: {result['target_met']}. Threads: {args.threads}; "
          f"1-min load average at the end: {env['load_avg_1m']:.1f} on {env['cpu_count']} cores (shared machine); "
          f"peak RSS {env['peak_rss_mib']:.0f} MiB; wall {result['wall_s']:.0f} s.\n\nCommand: `{command}`\n")
    print(md)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2))
    (RESULTS / f"{name}.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
