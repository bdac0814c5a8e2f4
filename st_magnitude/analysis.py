"""Magnitude diagnostics: do document norms carry relevance? (``st-magnitude analyze``)

For a model and a BEIR set this measures, on the *pooled* embedding (before any head or ``Normalize``, i.e. the
magnitude a head may keep or drop):

* ‖d‖ of relevant documents vs. non-relevant ones -- the model's top-k retrieved non-relevant documents ("hard")
  and random unjudged documents ("random") -- with Cohen's d (:func:`st_magnitude.functional.cohens_d`) and a
  bootstrap confidence interval (``scipy.stats.bootstrap``, BCa). The paper (arXiv:2602.09229, magnitude
  analysis) reports d up to 1.80 after fine-tuning, and negative d for random-init models.
* the correlation (Spearman and Pearson, ``scipy.stats``) of ‖d‖ with document length in tokens (as the model sees
  them, i.e. truncated at ``max_seq_length``);
* the query norm distribution and the implied effective temperature τ_eff = τ / ‖q‖ of the head's query output
  (:func:`st_magnitude.functional.effective_temperature`; paper, query-magnitude analysis);
* a PNG of the norm histograms (matplotlib, Agg backend).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from st_magnitude.data import BeirData
from st_magnitude.functional import cohens_d

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = [
    "EffectSize",
    "MagnitudeReport",
    "cohens_d_bootstrap",
    "summarize",
    "pooled_model",
    "analyze_magnitudes",
    "plot_norm_histograms",
    "apply_head_to_pooled",
    "register_cli",
]


@dataclass
class EffectSize:
    """Cohen's d of group a vs. group b with a bootstrap confidence interval.

    Attributes:
        d: point estimate (positive: group a has larger values).
        ci_low, ci_high: bounds of the ``confidence`` interval (BCa bootstrap, ``scipy.stats.bootstrap``).
        confidence: e.g. 0.95.
        n_a, n_b: group sizes.
        n_resamples: bootstrap resamples.
    """

    d: float
    ci_low: float
    ci_high: float
    confidence: float
    n_a: int
    n_b: int
    n_resamples: int


def cohens_d_bootstrap(
    a: np.ndarray | list[float],
    b: np.ndarray | list[float],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    method: str = "BCa",
) -> EffectSize:
    """Cohen's d (pooled SD, ddof=1; Cohen 1988) of ``a`` vs ``b`` with a two-sample bootstrap CI.

    Each group is resampled independently (``scipy.stats.bootstrap`` with ``paired=False``).

    Args:
        a, b: 1-d samples (≥ 2 values each, e.g. document norms).
        n_resamples: bootstrap resamples (default 1000).
        confidence: interval level (default 0.95).
        seed: RNG seed.
        method: ``"BCa"`` (default), ``"percentile"`` or ``"basic"``.

    Raises:
        ValueError: fewer than 2 values in a group, or zero pooled variance.
    """
    from scipy.stats import bootstrap

    xa = np.asarray(a, dtype=np.float64).ravel()
    xb = np.asarray(b, dtype=np.float64).ravel()
    d = cohens_d(xa, xb)

    def statistic(x: np.ndarray, y: np.ndarray) -> float:
        try:
            return cohens_d(x, y)
        except ValueError:  # a resample with zero pooled variance
            return float("nan")

    def run(how: str) -> Any:
        return bootstrap(
            (xa, xb),
            statistic,
            vectorized=False,
            paired=False,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method=how,
            random_state=np.random.default_rng(seed),
        )

    result = run(method)
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (np.isfinite(low) and np.isfinite(high)):  # degenerate BCa (e.g. tiny samples): percentile instead
        result = run("percentile")
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return EffectSize(d, low, high, confidence, int(xa.size), int(xb.size), n_resamples)


def summarize(values: np.ndarray | list[float]) -> dict[str, float]:
    """count, mean, std (ddof=1), min, 5/25/50/75/95th percentiles and max of a 1-d sample (numpy)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    q = np.percentile(x, [5, 25, 50, 75, 95]) if x.size else [float("nan")] * 5
    return {
        "count": int(x.size),
        "mean": float(x.mean()) if x.size else float("nan"),
        "std": float(x.std(ddof=1)) if x.size > 1 else float("nan"),
        "min": float(x.min()) if x.size else float("nan"),
        "p05": float(q[0]),
        "p25": float(q[1]),
        "median": float(q[2]),
        "p75": float(q[3]),
        "p95": float(q[4]),
        "max": float(x.max()) if x.size else float("nan"),
    }


@dataclass
class MagnitudeReport:
    """Result of :func:`analyze_magnitudes` (all norms are L2 norms of pooled embeddings, unitless).

    Attributes:
        dataset, split: the retrieval set.
        head: description of the model's head (or ``"no magnitude head"``).
        n_queries: queries analysed.
        norms: group -> :func:`summarize` of ‖d‖ for ``relevant``, ``hard_negative``, ``random``.
        cohens_d: ``relevant_vs_hard`` and ``relevant_vs_random`` -> :class:`EffectSize` as dict.
        length_correlation: ``spearman``/``pearson`` (and p-values) of ‖d‖ with token length, ``n``.
        query_norms: :func:`summarize` of pooled query norms.
        head_query_norms: :func:`summarize` of the head's query output norms.
        effective_temperature: :func:`summarize` of τ / ‖q_head‖ and the ``temperature`` τ used.
        figure: path of the PNG, if written.
        settings: top_k, max_queries, max_docs, seed, n_resamples.
    """

    dataset: str
    split: str
    head: str
    n_queries: int
    norms: dict[str, dict[str, float]]
    cohens_d: dict[str, dict[str, float]]
    length_correlation: dict[str, float]
    query_norms: dict[str, float]
    head_query_norms: dict[str, float]
    effective_temperature: dict[str, float]
    figure: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, list[float]] = field(default_factory=dict, repr=False)

    def to_dict(self, include_raw: bool = False) -> dict[str, Any]:
        """JSON-ready dict (raw per-document norms only if ``include_raw``)."""
        out = asdict(self)
        if not include_raw:
            out.pop("raw")
        return out


def pooled_model(model: SentenceTransformer) -> SentenceTransformer:
    """The same model without its trailing magnitude head / ``Normalize`` (modules shared, nothing copied).

    Its outputs are the pooled embeddings whose magnitude the head keeps (γ < 1) or removes (γ = 1).
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize

    from st_magnitude.heads import MagnitudeHead

    modules = list(model.children())
    while modules and isinstance(modules[-1], (Normalize, MagnitudeHead)):
        modules.pop()
    headless = SentenceTransformer(modules=modules, device=str(model.device))
    headless.max_seq_length = model.max_seq_length
    headless.prompts = dict(getattr(model, "prompts", {}) or {})
    return headless


def apply_head_to_pooled(model: SentenceTransformer, pooled: np.ndarray, role: str) -> np.ndarray:
    """What ``model`` outputs for ``role`` given its pooled embeddings ``(n, dim)``: the head's
    :func:`~st_magnitude.functional.magnitude_normalize`, or L2 normalization for a trailing ``Normalize``."""
    import torch
    from sentence_transformers.base.modules import Normalize

    from st_magnitude.functional import magnitude_normalize
    from st_magnitude.heads import find_head

    head = find_head(model)
    x = torch.from_numpy(np.asarray(pooled, dtype=np.float32))
    if head is not None:
        with torch.no_grad():
            gamma = head.gamma(role)  # type: ignore[arg-type]
            gamma = float(gamma) if not isinstance(gamma, torch.Tensor) else gamma.detach()
            return magnitude_normalize(x, gamma, eps=head.eps, scale=head.scale(role)).numpy()  # type: ignore[arg-type]
    if len(model) and isinstance(model[len(model) - 1], Normalize):
        return torch.nn.functional.normalize(x, dim=-1).numpy()
    return x.numpy()


def _token_lengths(model: SentenceTransformer, texts: list[str]) -> np.ndarray:
    tokenizer = model.tokenizer
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]]
    return np.minimum(np.asarray(lengths), int(model.max_seq_length or 10**9))


def analyze_magnitudes(
    model: SentenceTransformer,
    data: BeirData,
    top_k: int = 10,
    max_queries: int | None = 200,
    n_random: int | None = None,
    n_resamples: int = 1000,
    temperature: float = 0.05,
    seed: int = 0,
    batch_size: int = 32,
    output_dir: str | os.PathLike[str] | None = None,
    show_progress_bar: bool = False,
) -> MagnitudeReport:
    """Measure whether document magnitude separates relevant from non-relevant documents.

    Queries are subsampled to ``max_queries`` (seeded). The model (with its head) ranks the whole ``data.corpus``
    for them with dot products (what it would serve); "hard" = the union of each query's top-``top_k`` documents
    that are not judged relevant to it (and not relevant to any analysed query); "random" = ``n_random``
    (default: as many as the relevant set) corpus documents relevant to no analysed query. Norms are of the pooled
    embeddings (:func:`pooled_model`). Subsample ``data.corpus`` first (:func:`st_magnitude.data.subsample_beir`)
    to bound the cost: every corpus document is encoded.

    Args:
        model: the model, head attached or not.
        data: retrieval set.
        top_k: retrieved documents per query scanned for hard negatives.
        max_queries: queries analysed (None = all).
        n_random: random non-relevant documents (None = as many as relevant ones).
        n_resamples: bootstrap resamples for the CIs.
        temperature: τ for the effective temperature τ/‖q‖ (the loss's τ, e.g. 0.05).
        seed: sampling seed.
        batch_size: encoding batch size.
        output_dir: if given, writes ``norm_histograms.png`` and ``magnitude_report.json`` there.
        show_progress_bar: encoding progress bars.

    Returns:
        :class:`MagnitudeReport`.

    Raises:
        ValueError: fewer than 2 documents in a group (too small a sample).
    """
    from scipy.stats import pearsonr, spearmanr

    from st_magnitude.functional import effective_temperature
    from st_magnitude.heads import find_head

    rng = random.Random(seed)
    qids = sorted(data.qrels)
    if max_queries is not None and max_queries < len(qids):
        qids = sorted(rng.sample(qids, max_queries))
    doc_ids = list(data.corpus)
    doc_texts = [data.corpus[d] for d in doc_ids]
    query_texts = [data.queries[q] for q in qids]
    opts = {"batch_size": batch_size, "show_progress_bar": show_progress_bar, "convert_to_numpy": True}

    head = find_head(model)
    headless = pooled_model(model)
    d_pooled = headless.encode_document(doc_texts, **opts)  # (n_docs, dim), encoded once
    q_pooled = headless.encode_query(query_texts, **opts)  # (n_queries, dim)
    d_head = apply_head_to_pooled(model, d_pooled, "document")
    q_head = apply_head_to_pooled(model, q_pooled, "query")
    d_pooled_norm = np.linalg.norm(d_pooled, axis=1)
    q_pooled_norm = np.linalg.norm(q_pooled, axis=1)

    index = {d: i for i, d in enumerate(doc_ids)}
    relevant = {d for q in qids for d, g in data.qrels[q].items() if g > 0 and d in index}
    judged_any = {d for q in qids for d in data.qrels[q] if d in index}
    scores = q_head @ d_head.T  # (n_queries, n_docs) dot products of head outputs
    if data.ignore_identical_ids:
        for qi, q in enumerate(qids):
            if q in index:
                scores[qi, index[q]] = -np.inf
    k = min(top_k, len(doc_ids))
    top = np.argpartition(-scores, kth=k - 1, axis=1)[:, :k]
    hard = {doc_ids[j] for row in top for j in row} - judged_any
    pool = sorted(set(doc_ids) - judged_any)
    n_rand = min(n_random if n_random is not None else len(relevant), len(pool))
    random_docs = set(rng.sample(pool, n_rand))

    groups = {
        "relevant": np.array([d_pooled_norm[index[d]] for d in sorted(relevant)]),
        "hard_negative": np.array([d_pooled_norm[index[d]] for d in sorted(hard)]),
        "random": np.array([d_pooled_norm[index[d]] for d in sorted(random_docs)]),
    }
    for name, values in groups.items():
        if values.size < 2:
            raise ValueError(
                f"Only {values.size} {name} document(s): too few for Cohen's d. Analyse more queries (max_queries) or a "
                "larger corpus."
            )
    effects = {
        "relevant_vs_hard": asdict(cohens_d_bootstrap(groups["relevant"], groups["hard_negative"], n_resamples, seed=seed)),
        "relevant_vs_random": asdict(cohens_d_bootstrap(groups["relevant"], groups["random"], n_resamples, seed=seed)),
    }
    lengths = _token_lengths(headless, doc_texts)
    length_corr: dict[str, Any] = {"n": int(len(doc_ids)), "mean_tokens": float(lengths.mean())}
    if np.ptp(lengths) > 0:
        sp = spearmanr(d_pooled_norm, lengths)
        pe = pearsonr(d_pooled_norm, lengths)
        length_corr.update(spearman=float(sp.statistic), spearman_p=float(sp.pvalue),
                           pearson=float(pe.statistic), pearson_p=float(pe.pvalue))
    else:
        # Every document was truncated to the same length: a correlation is undefined, not NaN-silently reported.
        length_corr.update(spearman=None, spearman_p=None, pearson=None, pearson_p=None,
                           note=f"all {len(doc_ids)} documents have {int(lengths[0])} tokens after truncation "
                                "(raise --max-seq-length to measure a length correlation)")
    import torch

    tau_eff = effective_temperature(torch.from_numpy(np.asarray(q_head, dtype=np.float32)), temperature).numpy()
    tau_summary = summarize(tau_eff)
    tau_summary["temperature"] = float(temperature)

    report = MagnitudeReport(
        dataset=data.name,
        split=data.split,
        head=head.describe() if head is not None else "no magnitude head",
        n_queries=len(qids),
        norms={name: summarize(values) for name, values in groups.items()},
        cohens_d=effects,
        length_correlation=length_corr,
        query_norms=summarize(q_pooled_norm),
        head_query_norms=summarize(np.linalg.norm(q_head, axis=1)),
        effective_temperature=tau_summary,
        settings={
            "top_k": top_k,
            "max_queries": max_queries,
            "n_docs": len(doc_ids),
            "n_random": n_rand,
            "n_resamples": n_resamples,
            "seed": seed,
            "norms_of": "pooled embedding (before head / Normalize)",
        },
        raw={name: values.tolist() for name, values in groups.items()} | {"query": q_pooled_norm.tolist()},
    )
    if output_dir is not None:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        report.figure = str(plot_norm_histograms(report, out / "norm_histograms.png"))
        (out / "magnitude_report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    return report


def plot_norm_histograms(report: MagnitudeReport, path: str | os.PathLike[str]) -> Path:
    """Write a PNG: left, ‖d‖ densities of relevant / hard-negative / random documents (with Cohen's d);
    right, the query norm histogram. Uses matplotlib's Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_docs, ax_q) = plt.subplots(1, 2, figsize=(11, 4))
    all_values = np.concatenate([np.asarray(report.raw[g]) for g in ("relevant", "hard_negative", "random")])
    bins = np.linspace(all_values.min(), all_values.max(), 40)
    for group, color in (("random", "tab:gray"), ("hard_negative", "tab:orange"), ("relevant", "tab:blue")):
        values = np.asarray(report.raw[group])
        ax_docs.hist(values, bins=bins, density=True, alpha=0.5, color=color, label=f"{group} (n={values.size})")
    d_hard = report.cohens_d["relevant_vs_hard"]
    d_rand = report.cohens_d["relevant_vs_random"]
    ax_docs.set_title(
        f"{report.dataset}: document norms\nd(rel vs hard) = {d_hard['d']:.2f} [{d_hard['ci_low']:.2f}, "
        f"{d_hard['ci_high']:.2f}], d(rel vs random) = {d_rand['d']:.2f}",
        fontsize=9,
    )
    ax_docs.set_xlabel("‖d‖ (pooled embedding)")
    ax_docs.set_ylabel("density")
    ax_docs.legend(fontsize=8)
    ax_q.hist(np.asarray(report.raw["query"]), bins=30, color="tab:green", alpha=0.7)
    tau = report.effective_temperature
    ax_q.set_title(
        f"query norms (n={report.n_queries}); τ_eff = τ/‖q_head‖: median {tau['median']:.4f} (τ = {tau['temperature']})",
        fontsize=9,
    )
    ax_q.set_xlabel("‖q‖ (pooled embedding)")
    fig.suptitle(f"{report.head}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_report(report: MagnitudeReport) -> str:
    """Human-readable table of a :class:`MagnitudeReport`."""
    lines = [f"{report.dataset} ({report.split}), {report.n_queries} queries, head {report.head}", ""]
    lines.append(f"{'group':<15}{'n':>6}{'mean ‖d‖':>12}{'std':>10}{'median':>10}")
    for name, s in report.norms.items():
        lines.append(f"{name:<15}{s['count']:>6}{s['mean']:>12.4f}{s['std']:>10.4f}{s['median']:>10.4f}")
    lines.append("")
    for name, e in report.cohens_d.items():
        lines.append(
            f"Cohen's d {name:<20} {e['d']:+.3f}  {int(e['confidence'] * 100)}% CI [{e['ci_low']:+.3f}, {e['ci_high']:+.3f}]"
        )
    lc = report.length_correlation
    if lc.get("spearman") is None:
        lines.append(f"‖d‖ vs token length: n/a ({lc.get('note', 'no length variation')})")
    else:
        lines.append(f"‖d‖ vs token length: Spearman {lc['spearman']:+.3f}, Pearson {lc['pearson']:+.3f} (n={lc['n']})")
    qn, tau = report.query_norms, report.effective_temperature
    lines.append(
        f"query ‖q‖ (pooled): mean {qn['mean']:.4f}, median {qn['median']:.4f}; τ_eff = τ/‖q_head‖ median "
        f"{tau['median']:.5f} [p05 {tau['p05']:.5f}, p95 {tau['p95']:.5f}] (τ = {tau['temperature']})"
    )
    if report.figure:
        lines.append(f"figure: {report.figure}")
    return "\n".join(lines)


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``st-magnitude analyze``."""
    parser = subparsers.add_parser(
        "analyze",
        help="document/query norm diagnostics (Cohen's d, histograms, length correlation, τ_eff)",
        description="Do document magnitudes separate relevant from non-relevant documents? Writes "
        "magnitude_report.json and norm_histograms.png to --output.",
    )
    parser.add_argument("--model", default=None, help="saved model folder (default: packaged all-MiniLM-L6-v2)")
    parser.add_argument("--dataset", required=True, help="BEIR folder name under the data dir, or a path")
    parser.add_argument("--split", default="test")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output", required=True)
    parser.add_argument("--max-queries", type=int, default=100)
    parser.add_argument("--max-docs", type=int, default=1000, help="corpus subsample (judged docs always kept)")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--n-resamples", type=int, default=1000)
    parser.add_argument("--temperature", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=None)
    parser.set_defaults(func=_cli_analyze)


def _cli_analyze(args: argparse.Namespace) -> int:
    from st_magnitude.data import load_beir
    from st_magnitude.models import load_model
    from st_magnitude.data import subsample_beir

    data = load_beir(args.dataset, split=args.split, data_dir=args.data_dir)
    data = subsample_beir(data, max_queries=args.max_queries, max_docs=args.max_docs, seed=args.seed)
    model = load_model(args.model)
    if args.max_seq_length:
        model.max_seq_length = args.max_seq_length
    report = analyze_magnitudes(
        model,
        data,
        top_k=args.top_k,
        max_queries=None,
        n_resamples=args.n_resamples,
        temperature=args.temperature,
        seed=args.seed,
        batch_size=args.batch_size,
        output_dir=args.output,
        show_progress_bar=sys.stderr.isatty(),
    )
    print(format_report(report))
    return 0
