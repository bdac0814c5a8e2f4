"""Fisher-information condition number κ of the InfoNCE objective under a head, and ``st-magnitude recommend``.

The paper's practical guide (arXiv:2602.09229, section on choosing the normalized side): measure, on the
*pre-trained* model and before any fine-tuning, how well conditioned the contrastive objective is under each
single-side head, and normalize the side whose Fisher information matrix (FIM) is better conditioned.

What is computed, precisely
---------------------------
**Data.** ``n`` training rows (query ``q_i``, positive ``p_i`` [, hard negative ``n_i``]), split in order into
batches of ``B`` rows (default 32, the last batch may be smaller), exactly as the trainer would form them.

**Per-example loss** (the training loss, :class:`~st_magnitude.losses.MagnitudeInfoNCELoss` = ST's
``MultipleNegativesRankingLoss`` with ``similarity_fct=dot_score``, ``scale=1/τ``, direction ``query_to_doc``):
for row ``i`` of batch ``b`` with candidate set ``C_b = [p_1..p_B, n_1..n_B]`` (every positive and hard negative
of the batch),

    ℓ_i(θ) = -log( exp(s_θ(q_i, p_i)/τ) / Σ_{c ∈ C_b} exp(s_θ(q_i, c)/τ) ),
    s_θ(q, d) = h_q(A_θ(x_q)) · h_d(A_θ(x_d)),

where ``x`` is the pooled embedding of the text (the encoder output before any head), ``A_θ`` a parameter
adapter (below), and ``h_r(x) = scale_r · x / max(‖x‖, eps)^γ_r`` the head for role ``r``
(:func:`st_magnitude.functional.magnitude_normalize`; QNorm γ_q=1, γ_d=0; DNorm γ_q=0, γ_d=1). The mean of
ℓ_i over a batch is exactly the training loss of that batch. The gradient of ℓ_i flows through *every*
embedding of the batch (the in-batch negatives share θ), not just through row i's own texts.

**Parameters θ** (``params``), all evaluated at the identity, so the model's function is unchanged:

- ``"pooled-shift"`` (default, P = dim parameters; 384 for MiniLM): ``A(x) = x + b`` at ``b = 0``.
- ``"pooled-affine"`` (P = 2·dim): ``A(x) = a ⊙ x + b`` at ``a = 1``, ``b = 0``.
- ``"pooled-linear"`` (P = dim² + dim): ``A(x) = W x + b`` at ``W = I``, ``b = 0``. Memory ``n·P·8`` bytes
  (≈ 0.6 GB for MiniLM and n = 512); refused above :data:`MAX_GRADIENT_BYTES`.

Why ``pooled-shift`` is the default:

1. *It is the FIM of a real model parameter.* For a mean-pooled BERT (MiniLM) the encoder's last operation is a
   LayerNorm ``y_t = w ⊙ n_t + β`` on every token t; mean pooling over the attention mask gives
   ``x = w ⊙ mean_t(n_t) + β``, so ``∂ℓ/∂β = ∂ℓ/∂x`` summed over the texts of the batch: the shift adapter's
   gradient *is* the gradient w.r.t. the last LayerNorm's bias (exactly, not approximately).
2. *It holds the whole difference between heads.* Every encoder parameter reaches the loss only through the
   pooled embeddings, and the head acts after pooling, so for any encoder parameter
   ``∇_θ ℓ = J_θ(x)ᵀ ∂ℓ/∂x``: the head changes only the factor ``∂ℓ/∂x`` that the shift measures.
3. *It can be full rank with the data at hand.* The empirical FIM of n rows has rank ≤ min(n, P); with P = 384
   < n = 512 its smallest eigenvalues describe the loss geometry, not the shortage of rows (with
   ``pooled-affine``, P = 768 > 512, κ would be a statement about the n-th row rather than about the head).
4. *It is cheap.* The encoder runs once, without gradients; κ for 512 rows costs about the time to encode them.
   Full-encoder per-example gradients would need one backward pass per row per head.

**Empirical FIM** ``F = (1/n) Σ_i g_i g_iᵀ`` with ``g_i = ∇_θ ℓ_i(θ)`` (``P`` values), the per-example
gradients computed with ``torch.func.vmap(torch.func.grad(ℓ))`` (one vectorised call per batch), in float64.
Its nonzero eigenvalues are the squared singular values of ``G/√n`` (``G``: n × P), computed from the smaller
of ``GᵀG/n`` (P × P) and ``GGᵀ/n`` (n × n), so ``rank(F) ≤ min(n, P)``.

**Floor and κ.** An eigenvalue counts if it exceeds ``floor = λ_max · rtol``; by default
``rtol = P · ε_float32`` (P = number of parameters, ε_float32 ≈ 1.19e-7): NumPy's ``matrix_rank`` tolerance
``S.max() · max(M, N) · eps`` (numpy.linalg.matrix_rank docs; Golub & Van Loan) for the P × P FIM held in float32,
the precision of the encoder outputs and of training. Exact null directions (e.g. the global scale direction
of ``pooled-affine`` under Cosine, which normalisation erases) fall far below it. ``κ = λ_max / λ_min`` over the
eigenvalues above the floor; ``rank`` is their number.

*Caveat, measured* (``docs/fisher.md``): when the spectrum decays continuously through the floor, as it does
for MiniLM, λ_min lands just above the floor and κ ≈ 1/rtol, so κ then says more about the floor than about the
head. The report therefore also gives ``rank`` and ``kappa_99 = λ_1 / λ_k`` with k the fewest eigenvalues
holding 99 % of the trace (a floor-free conditioning measure of the directions that carry the curvature).

**Which κ is better: the lower one.** Near a minimum the FIM equals the Gauss-Newton approximation of the
Hessian of the log-likelihood (Martens, "New insights and perspectives on the natural gradient method", JMLR
2020, sec. 9), and gradient descent on a quadratic with Hessian condition number κ contracts the error by
(κ-1)/(κ+1) per step at best (Nocedal & Wright, Numerical Optimization, 2nd ed., Thm 3.3), so a lower κ
means that fine-tuning makes uniform progress along all directions instead of crawling along flat ones.
:func:`recommend_head` therefore recommends the single-side head (QNorm or DNorm) with the lower κ.

**Confidence.** Block bootstrap over batches (the rows of one batch share negatives, so they are resampled
together): resample the batches with replacement ``n_bootstrap`` times (numpy ``default_rng(seed)``), recompute
the weighted FIM and κ of QNorm and DNorm from the same resample (paired), and report the fraction of
resamples in which the recommended head keeps the lower κ, with 95 % percentile intervals of each κ.
Everything is deterministic for a fixed ``seed`` (row sample, bootstrap).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:  # heavy imports stay out of `st-magnitude --help`
    import datasets
    import torch
    from sentence_transformers import SentenceTransformer

    from st_magnitude.heads import MagnitudeHead

logger = logging.getLogger(__name__)

__all__ = [
    "PARAM_SETS",
    "DEFAULT_PARAMS",
    "DEFAULT_SAMPLES",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BOOTSTRAP",
    "CONTEXT_HEADS",
    "FLOAT32_EPS",
    "MAX_GRADIENT_BYTES",
    "PooledEmbeddings",
    "FisherReport",
    "Recommendation",
    "encode_pooled",
    "per_example_gradients",
    "fisher_eigenvalues",
    "default_rtol",
    "spectrum_report",
    "fisher_condition_number",
    "recommend_head",
    "magnitude_signal",
    "MIN_MAGNITUDE_EFFECT",
    "register_cli",
]

ParamSet = Literal["pooled-affine", "pooled-shift", "pooled-linear"]
PARAM_SETS: tuple[str, ...] = ("pooled-affine", "pooled-shift", "pooled-linear")
DEFAULT_PARAMS: ParamSet = "pooled-shift"
DEFAULT_SAMPLES: int = 512
DEFAULT_BATCH_SIZE: int = 32
DEFAULT_BOOTSTRAP: int = 200
SINGLE_SIDE_HEADS: tuple[str, str] = ("qnorm", "dnorm")
CONTEXT_HEADS: tuple[str, ...] = ("qnorm", "dnorm", "cosine", "dot")
"""Heads :func:`recommend_head` measures: the two candidates, then Cosine and Dot for context."""
FLOAT32_EPS: float = float(np.finfo(np.float32).eps)
MAX_GRADIENT_BYTES: int = 2 * 1024**3
"""Largest per-example gradient matrix (n × P float64) that is built (2 GiB)."""


# ---------------------------------------------------------------------------------------------------------
# data containers
# ---------------------------------------------------------------------------------------------------------
@dataclass
class PooledEmbeddings:
    """Pooled encoder outputs (before any head) of ``n`` training rows, float64 on CPU.

    Attributes:
        queries: ``(n, dim)``.
        positives: ``(n, dim)``.
        negatives: ``(n, dim)`` hard negatives, or None for (query, positive) pairs.
        seconds: wall time of the encoding, seconds.
    """

    queries: torch.Tensor
    positives: torch.Tensor
    negatives: torch.Tensor | None = None
    seconds: float = 0.0

    def __post_init__(self) -> None:
        n, dim = self.queries.shape
        shapes = [tuple(self.positives.shape)] + ([tuple(self.negatives.shape)] if self.negatives is not None else [])
        if any(s != (n, dim) for s in shapes):
            raise ValueError(
                f"queries, positives and negatives must all have shape (n, dim) = {(n, dim)}, got {shapes}."
            )

    @property
    def n(self) -> int:
        return int(self.queries.shape[0])

    @property
    def dim(self) -> int:
        return int(self.queries.shape[1])


@dataclass
class FisherReport:
    """The FIM spectrum of one head (see the module docstring for every definition).

    Attributes:
        head: head name (``qnorm``, ``dnorm``, ``cosine``, ``dot``, ``learnable``).
        kappa: λ_max / λ_min over the eigenvalues above ``floor`` (unitless; ``inf`` if none is above it).
        lambda_max, lambda_min: largest and smallest eigenvalue above the floor (units: loss² per parameter²).
        floor: absolute eigenvalue floor = ``lambda_max * rtol``.
        rtol: relative floor used.
        rank: number of eigenvalues above the floor.
        n_eigenvalues: min(n, P), the number of eigenvalues computed.
        n_params: P, number of parameters in ``params``.
        n_samples: n, rows used. batch_size: rows per in-batch-negative batch.
        params: parameter set name. temperature: τ.
        mean_loss: mean per-example InfoNCE loss (nats) at θ = identity.
        spectrum: summary: ``kappa_99`` = λ_1/λ_k with ``k_99`` = k the fewest eigenvalues holding 99 % of the
            trace (floor-free conditioning), trace, effective rank (exp of the eigenvalue entropy, Roy & Vetterli 2007),
            top-5 eigenvalues, share of the trace in the top 1 / top 10, log10 quantiles of the eigenvalues above
            the floor.
        eigenvalues: every computed eigenvalue, descending (list of floats).
        seconds: wall times (``gradients``, ``eigen``), seconds.
    """

    head: str
    kappa: float
    lambda_max: float
    lambda_min: float
    floor: float
    rtol: float
    rank: int
    n_eigenvalues: int
    n_params: int
    n_samples: int
    batch_size: int
    params: str
    temperature: float
    mean_loss: float
    spectrum: dict[str, Any]
    eigenvalues: list[float] = field(repr=False)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self, with_eigenvalues: bool = True) -> dict[str, Any]:
        """JSON-ready dict (``inf`` κ becomes the string ``"inf"``)."""
        out = asdict(self)
        if not with_eigenvalues:
            out.pop("eigenvalues")
        return _json_safe(out)


@dataclass
class Recommendation:
    """Output of :func:`recommend_head`.

    Attributes:
        recommended: ``"qnorm"`` or ``"dnorm"``, the single-side head with the lower κ.
        advice: ``"cosine"``, ``"qnorm"`` or ``"dnorm"``: whether to keep magnitude at all (the zero-shot
            document-norm signal, :func:`magnitude_signal`) and, if so, which side to normalize (κ).
        magnitude_signal: the diagnostic behind ``advice`` (Cohen's d, its bootstrap CI, group sizes, threshold).
        advice_rule: the three-way decision rule in words.
        kappa: head name -> κ (the candidates and the context heads).
        confidence: fraction of bootstrap resamples in which ``recommended`` keeps the lower κ (0.5-1.0).
        kappa_ci: head name -> [2.5 %, 97.5 %] bootstrap percentiles of κ (QNorm and DNorm).
        rule: the decision rule in words.
        reports: head name -> :class:`FisherReport`.
        settings: what was measured (model, data, n, params, τ, batch size, seed, bootstrap size, floor rule).
        seconds: wall times: ``encode``, ``per_head`` (gradients + eigen), ``bootstrap``, ``total``.
    """

    recommended: str
    kappa: dict[str, float]
    confidence: float
    kappa_ci: dict[str, list[float]]
    rule: str
    reports: dict[str, FisherReport]
    settings: dict[str, Any]
    seconds: dict[str, Any]
    advice: str = ""
    magnitude_signal: dict[str, Any] = field(default_factory=dict)
    advice_rule: str = ""

    @property
    def recommended_by_kappa_99(self) -> str:
        """The single-side head with the lower floor-free ``kappa_99`` (a secondary signal, not the rule)."""
        k = {h: self.reports[h].spectrum["kappa_99"] for h in SINGLE_SIDE_HEADS}
        return "qnorm" if k["qnorm"] <= k["dnorm"] else "dnorm"

    def to_dict(self, with_eigenvalues: bool = True) -> dict[str, Any]:
        """The ``recommendation.json`` layout: ``{"kappa": {HEAD: x}, "recommended": "qnorm"|"dnorm",
        "confidence": x, "kappa_ci": {HEAD: [lo, hi]}, "kappa_99": {HEAD: x}, "rank": {HEAD: r},
        "recommended_by_kappa_99", "rule", "settings", "seconds", "reports": {HEAD: FisherReport.to_dict()}}``."""
        return _json_safe(
            {
                "advice": self.advice,
                "advice_rule": self.advice_rule,
                "magnitude_signal": self.magnitude_signal,
                "kappa": self.kappa,
                "recommended": self.recommended,
                "confidence": self.confidence,
                "kappa_ci": self.kappa_ci,
                "kappa_99": {h: r.spectrum["kappa_99"] for h, r in self.reports.items()},
                "rank": {h: r.rank for h, r in self.reports.items()},
                "recommended_by_kappa_99": self.recommended_by_kappa_99,
                "rule": self.rule,
                "settings": self.settings,
                "seconds": self.seconds,
                "reports": {h: r.to_dict(with_eigenvalues) for h, r in self.reports.items()},
            }
        )

    def table(self) -> str:
        """Markdown table of κ, rank, λ_max, λ_min, floor and bootstrap interval per head."""
        lines = [
            "| head | κ = λmax/λmin | 95% bootstrap interval | rank / computed | λmax | λmin | floor | κ99 (k) | mean loss |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, rep in self.reports.items():
            ci = self.kappa_ci.get(name)
            ci_text = f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "n/a (context head)"
            mark = " ← recommended" if name == self.recommended else ""
            lines.append(
                f"| {name}{mark} | {rep.kappa:.4g} | {ci_text} | {rep.rank} / {rep.n_eigenvalues} | "
                f"{rep.lambda_max:.4g} | {rep.lambda_min:.4g} | {rep.floor:.3g} | "
                f"{rep.spectrum['kappa_99']:.4g} ({rep.spectrum['k_99']}) | {rep.mean_loss:.4f} |"
            )
        return "\n".join(lines)


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")
    if isinstance(value, np.integer):
        return int(value)
    return value


# ---------------------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------------------
def _resolve_model(model: SentenceTransformer | str | os.PathLike[str] | None) -> SentenceTransformer:
    from sentence_transformers import SentenceTransformer

    if isinstance(model, SentenceTransformer):
        return model
    from st_magnitude.models import load_model

    return load_model(model)


def _resolve_head(head: MagnitudeHead | str) -> MagnitudeHead:
    from st_magnitude.heads import MagnitudeHead, make_head

    if isinstance(head, MagnitudeHead):
        return head
    if isinstance(head, str):
        return make_head(head)
    raise TypeError(f"head must be a MagnitudeHead or a head name ('qnorm', 'dnorm', ...), got {head!r}.")


def _sample_rows(
    dataset: datasets.Dataset | str | os.PathLike[str],
    n_samples: int,
    seed: int,
    data_dir: str | os.PathLike[str] | None = None,
) -> datasets.Dataset:
    from datasets import Dataset

    from st_magnitude.data import load_training_triplets
    from st_magnitude.errors import DataValidationError

    if isinstance(dataset, (str, os.PathLike)):
        dataset = load_training_triplets(dataset, data_dir=data_dir, max_rows=n_samples, seed=seed)
    elif not isinstance(dataset, Dataset):
        raise TypeError(
            f"dataset must be a datasets.Dataset with columns anchor, positive[, negative] or a training-set name "
            f"(e.g. 'train-scifact'), got {type(dataset).__name__}."
        )
    missing = {"anchor", "positive"} - set(dataset.column_names)
    if missing:
        raise DataValidationError(
            f"Fisher rows need columns 'anchor' and 'positive' (optional 'negative'); missing {sorted(missing)}. "
            "Rename them with dataset.rename_column(...) or load with st_magnitude.data.load_training_triplets."
        )
    if len(dataset) > n_samples:
        dataset = dataset.shuffle(seed=seed).select(range(n_samples))
    if len(dataset) < 2:
        raise DataValidationError(f"Fisher rows: need at least 2 rows for in-batch negatives, got {len(dataset)}.")
    return dataset


def encode_pooled(
    model: SentenceTransformer,
    dataset: datasets.Dataset,
    use_negatives: bool = True,
    batch_size: int = 32,
    max_seq_length: int | None = None,
    show_progress_bar: bool = False,
) -> PooledEmbeddings:
    """Encode every row's texts with the model's modules *before* its head (pooled output, no normalisation).

    A trailing magnitude head and trailing ``Normalize`` modules are skipped (they are what the FIM compares);
    queries go through ``encode_query`` and documents through ``encode_document`` of the remaining modules, so a
    role-dependent module before the head still sees its role.

    Args:
        model: a SentenceTransformer (with or without head).
        dataset: rows with ``anchor``, ``positive`` [, ``negative``].
        use_negatives: include the ``negative`` column when present (training does).
        batch_size: encoding batch size.
        max_seq_length: truncate to this many tokens (None = the model's setting); restored afterwards.

    Returns:
        :class:`PooledEmbeddings` in float64 on CPU.

    Raises:
        NonFiniteEmbeddingError: if an embedding holds NaN/inf.
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize

    from st_magnitude.functional import check_finite
    from st_magnitude.heads import MagnitudeHead

    modules = [model[i] for i in range(len(model))]
    while modules and isinstance(modules[-1], (Normalize, MagnitudeHead)):
        modules.pop()
    encoder = SentenceTransformer(modules=modules, device=str(model.device))
    encoder.eval()
    old_length = encoder.max_seq_length
    if max_seq_length is not None:
        encoder.max_seq_length = int(max_seq_length)
    start = time.perf_counter()
    try:
        kwargs = dict(batch_size=batch_size, convert_to_tensor=True, show_progress_bar=show_progress_bar)
        queries = encoder.encode_query(list(dataset["anchor"]), **kwargs)
        positives = encoder.encode_document(list(dataset["positive"]), **kwargs)
        negatives = None
        if use_negatives and "negative" in dataset.column_names:
            negatives = encoder.encode_document(list(dataset["negative"]), **kwargs)
    finally:
        if max_seq_length is not None:
            encoder.max_seq_length = old_length
    seconds = time.perf_counter() - start
    out = [t.detach().to("cpu", torch.float64) if t is not None else None for t in (queries, positives, negatives)]
    for name, t in zip(("query", "positive", "negative"), out):
        if t is not None:
            check_finite(t, what=f"{name} embedding")
    return PooledEmbeddings(out[0], out[1], out[2], seconds=seconds)


# ---------------------------------------------------------------------------------------------------------
# per-example gradients
# ---------------------------------------------------------------------------------------------------------
def _identity_params(kind: str, dim: int) -> dict[str, torch.Tensor]:
    import torch

    if kind == "pooled-affine":
        return {"scale": torch.ones(dim, dtype=torch.float64), "shift": torch.zeros(dim, dtype=torch.float64)}
    if kind == "pooled-shift":
        return {"shift": torch.zeros(dim, dtype=torch.float64)}
    if kind == "pooled-linear":
        return {"weight": torch.eye(dim, dtype=torch.float64), "shift": torch.zeros(dim, dtype=torch.float64)}
    raise ValueError(f"Unknown parameter set {kind!r}; choose one of {list(PARAM_SETS)}.")


def _adapter(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    if "weight" in params:
        x = x @ params["weight"].T
    if "scale" in params:
        x = x * params["scale"]
    return x + params["shift"]


def _head_fn(x: torch.Tensor, gamma: float, scale: float, eps: float) -> torch.Tensor:
    """``scale * x / max(‖x‖, eps)**gamma`` (same formula as :func:`~st_magnitude.functional.magnitude_normalize`,
    without its data-dependent finiteness check, which ``vmap`` cannot trace; inputs are checked beforehand)."""
    import torch

    if gamma != 0.0:
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(eps)
        x = x / norm if gamma == 1.0 else x / norm.pow(gamma)
    return x * scale if scale != 1.0 else x


def per_example_gradients(
    embeddings: PooledEmbeddings,
    head: MagnitudeHead | str,
    params: str = DEFAULT_PARAMS,
    temperature: float = 0.05,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example gradients ``g_i = ∇_θ ℓ_i`` of the in-batch InfoNCE loss (module docstring) at θ = identity.

    Vectorised with ``torch.func.vmap(torch.func.grad(ℓ))`` over the rows of each batch.

    Args:
        embeddings: pooled embeddings of the rows (:func:`encode_pooled`).
        head: the head (instance or name); its γ_q, γ_d, scales and eps are used, as fixed numbers.
        params: ``"pooled-shift"`` (default) | ``"pooled-affine"`` | ``"pooled-linear"`` (module docstring).
        temperature: τ > 0 (0.05 = training default).
        batch_size: rows per batch; candidates of a row are the positives and negatives of its batch.

    Returns:
        ``(G, losses)``: ``G`` of shape ``(n, P)`` float64 (parameter order: ``weight`` row-major, ``scale``,
        ``shift``), ``losses`` of shape ``(n,)`` (nats).

    Raises:
        ValueError: unknown ``params``, τ ≤ 0, batch_size < 1, or a gradient matrix over
            :data:`MAX_GRADIENT_BYTES` (use fewer samples or a smaller parameter set).
    """
    import torch
    from torch.func import grad, vmap

    head = _resolve_head(head)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (training uses 0.05), got {temperature!r}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    theta = _identity_params(params, embeddings.dim)
    n_params = sum(p.numel() for p in theta.values())
    if embeddings.n * n_params * 8 > MAX_GRADIENT_BYTES:
        raise ValueError(
            f"params={params!r} has {n_params} parameters; {embeddings.n} per-example gradients would need "
            f"{embeddings.n * n_params * 8 / 1024**3:.1f} GiB. Use params='pooled-affine' or fewer samples."
        )
    g_q, g_d = float(head.gamma("query")), float(head.gamma("document"))
    s_q, s_d, eps = float(head.scale("query")), float(head.scale("document")), float(head.eps)
    tau = float(temperature)

    def loss_one(theta: dict[str, torch.Tensor], q: torch.Tensor, target: torch.Tensor, docs: torch.Tensor) -> torch.Tensor:
        # q: (dim,) one query; target: (m,) one-hot of its positive; docs: (m, dim) the batch's candidates.
        qh = _head_fn(_adapter(theta, q), g_q, s_q, eps)
        dh = _head_fn(_adapter(theta, docs), g_d, s_d, eps)
        logits = dh @ qh / tau
        return -(target * torch.log_softmax(logits, dim=-1)).sum()

    grad_and_loss = vmap(grad(loss_one, has_aux=False), in_dims=(None, 0, 0, None))
    loss_vec = vmap(loss_one, in_dims=(None, 0, 0, None))
    names = [k for k in ("weight", "scale", "shift") if k in theta]
    rows, losses = [], []
    n = embeddings.n
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        q = embeddings.queries[start:stop]
        docs = [embeddings.positives[start:stop]]
        if embeddings.negatives is not None:
            docs.append(embeddings.negatives[start:stop])
        docs_all = torch.cat(docs, dim=0)
        target = torch.zeros(stop - start, docs_all.shape[0], dtype=torch.float64)
        target[torch.arange(stop - start), torch.arange(stop - start)] = 1.0
        grads = grad_and_loss(theta, q, target, docs_all)
        rows.append(torch.cat([grads[k].reshape(stop - start, -1) for k in names], dim=1))
        losses.append(loss_vec(theta, q, target, docs_all))
    return torch.cat(rows, dim=0), torch.cat(losses, dim=0)


# ---------------------------------------------------------------------------------------------------------
# spectrum
# ---------------------------------------------------------------------------------------------------------
def default_rtol(n_samples: int, n_params: int) -> float:
    """Default relative eigenvalue floor ``P · ε_float32`` (module docstring, "Floor and κ").

    ``n_samples`` is accepted for API stability; the floor depends on the FIM's size P only.
    """
    return float(n_params * FLOAT32_EPS)


def fisher_eigenvalues(gradients: np.ndarray | torch.Tensor, weights: np.ndarray | None = None) -> np.ndarray:
    """Eigenvalues (descending, ``min(n, P)`` of them, clipped at 0) of ``F = Σ w_i g_i g_iᵀ / Σ w_i``.

    Args:
        gradients: ``(n, P)`` per-example gradients.
        weights: ``(n,)`` non-negative weights (bootstrap counts); None = all 1, i.e. ``F = GᵀG / n``.

    Uses the smaller Gram matrix (``GᵀWG`` or ``W^½GGᵀW^½``), which has the same nonzero eigenvalues, and
    ``numpy.linalg.eigvalsh`` in float64.
    """
    g = np.asarray(gradients.detach().cpu().numpy() if hasattr(gradients, "detach") else gradients, dtype=np.float64)
    if weights is None:
        w = np.ones(g.shape[0])
    else:
        w = np.asarray(weights, dtype=np.float64)
        keep = w > 0
        g, w = g[keep], w[keep]
    h = g * np.sqrt(w / w.sum())[:, None]
    gram = h.T @ h if h.shape[1] <= h.shape[0] else h @ h.T
    eig = np.linalg.eigvalsh(gram)[::-1]
    return np.clip(eig, 0.0, None)


def spectrum_report(
    eigenvalues: np.ndarray, n_samples: int, n_params: int, rtol: float | None = None
) -> dict[str, Any]:
    """κ, floor, rank and a summary of a FIM spectrum (eigenvalues in any order).

    Returns a dict with ``kappa``, ``lambda_max``, ``lambda_min``, ``floor``, ``rtol``, ``rank``,
    ``n_eigenvalues`` and ``spectrum`` (see :class:`FisherReport`).
    """
    eig = np.sort(np.asarray(eigenvalues, dtype=np.float64))[::-1]
    rtol = default_rtol(n_samples, n_params) if rtol is None else float(rtol)
    lam_max = float(eig[0]) if eig.size else 0.0
    floor = lam_max * rtol
    above = eig[eig > floor] if lam_max > 0 else eig[:0]
    lam_min = float(above[-1]) if above.size else 0.0
    kappa = lam_max / lam_min if above.size else math.inf
    trace = float(eig.sum())
    if above.size:
        p = above / above.sum()
        eff_rank = float(np.exp(-(p * np.log(p)).sum()))
        qs = [0, 10, 25, 50, 75, 90, 100]
        log_q = {f"p{q}": float(v) for q, v in zip(qs, np.percentile(np.log10(above), qs))}
    else:
        eff_rank, log_q = 0.0, {}
    if trace > 0:
        k99 = int(np.searchsorted(np.cumsum(eig) / trace, 0.99) + 1)
        k99 = min(k99, int(eig.size))
        kappa_99 = float(eig[0] / eig[k99 - 1]) if eig[k99 - 1] > 0 else math.inf
    else:
        k99, kappa_99 = 0, math.inf
    spectrum = {
        "kappa_99": kappa_99,
        "k_99": k99,
        "trace": trace,
        "effective_rank": eff_rank,
        "top5": [float(v) for v in eig[:5]],
        "top1_share": float(eig[0] / trace) if trace > 0 else 0.0,
        "top10_share": float(eig[:10].sum() / trace) if trace > 0 else 0.0,
        "n_below_floor": int(eig.size - above.size),
        "log10_quantiles_above_floor": log_q,
    }
    return {
        "kappa": float(kappa),
        "lambda_max": lam_max,
        "lambda_min": lam_min,
        "floor": float(floor),
        "rtol": rtol,
        "rank": int(above.size),
        "n_eigenvalues": int(eig.size),
        "spectrum": spectrum,
    }


def _report(
    name: str,
    embeddings: PooledEmbeddings,
    head: MagnitudeHead | str,
    params: str,
    temperature: float,
    batch_size: int,
    rtol: float | None,
) -> tuple[FisherReport, np.ndarray]:
    t0 = time.perf_counter()
    grads, losses = per_example_gradients(embeddings, head, params=params, temperature=temperature, batch_size=batch_size)
    t1 = time.perf_counter()
    g = grads.numpy()
    eig = fisher_eigenvalues(g)
    summary = spectrum_report(eig, n_samples=g.shape[0], n_params=g.shape[1], rtol=rtol)
    t2 = time.perf_counter()
    report = FisherReport(
        head=name,
        n_params=int(g.shape[1]),
        n_samples=int(g.shape[0]),
        batch_size=int(batch_size),
        params=params,
        temperature=float(temperature),
        mean_loss=float(losses.mean()),
        eigenvalues=[float(v) for v in eig],
        seconds={"gradients": t1 - t0, "eigen": t2 - t1},
        **summary,
    )
    return report, g


def fisher_condition_number(
    model: SentenceTransformer | str | os.PathLike[str] | None,
    head: MagnitudeHead | str,
    dataset: datasets.Dataset | str | os.PathLike[str],
    n_samples: int = DEFAULT_SAMPLES,
    params: str = DEFAULT_PARAMS,
    temperature: float = 0.05,
    batch_size: int = DEFAULT_BATCH_SIZE,
    rtol: float | None = None,
    seed: int = 0,
    max_seq_length: int | None = None,
    embeddings: PooledEmbeddings | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    show_progress_bar: bool = False,
) -> FisherReport:
    """κ of the empirical FIM of the training InfoNCE loss under ``head`` (definitions: module docstring).

    Args:
        model: SentenceTransformer, or a name/path for :func:`st_magnitude.models.load_model` (None = packaged
            all-MiniLM-L6-v2). An attached head or Normalize is ignored: ``head`` is what is measured.
        head: head instance or name (``qnorm``, ``dnorm``, ``cosine``, ``dot``).
        dataset: rows (``anchor``, ``positive`` [, ``negative``]) or a training-set name (``train-scifact``).
        n_samples: rows used (seeded sample when the data has more).
        params: parameter set (``pooled-shift`` default, ``pooled-affine``, ``pooled-linear``).
        temperature: τ (default 0.05, as in training).
        batch_size: in-batch-negative batch size (default 32).
        rtol: relative eigenvalue floor (None = :func:`default_rtol`).
        seed: row-sampling seed.
        max_seq_length: token limit while encoding (None = model's).
        embeddings: precomputed :class:`PooledEmbeddings` (skips encoding; ``model``/``dataset`` are ignored).

    Returns:
        :class:`FisherReport`; ``seconds["encode"]`` holds the encoding time.

    Raises:
        DataValidationError: missing columns or too few rows. ValueError: bad ``params``/τ.
        NonFiniteEmbeddingError: NaN/inf embeddings.
    """
    if embeddings is None:
        model = _resolve_model(model)
        rows = _sample_rows(dataset, n_samples, seed, data_dir)
        embeddings = encode_pooled(model, rows, max_seq_length=max_seq_length, show_progress_bar=show_progress_bar)
    resolved = _resolve_head(head)
    name = head if isinstance(head, str) else getattr(resolved, "name", type(resolved).__name__.lower())
    report, _ = _report(str(name).lower(), embeddings, resolved, params, temperature, batch_size, rtol)
    report.seconds["encode"] = embeddings.seconds
    return report


def _bootstrap(
    gradients: dict[str, np.ndarray], batch_size: int, n_bootstrap: int, seed: int, rtol: float | None
) -> dict[str, np.ndarray]:
    """Paired block bootstrap over batches: head -> (n_bootstrap,) κ values."""
    n = next(iter(gradients.values())).shape[0]
    batch_of = np.arange(n) // batch_size
    n_batches = int(batch_of.max()) + 1
    rng = np.random.default_rng(seed)
    out = {h: np.empty(n_bootstrap) for h in gradients}
    for b in range(n_bootstrap):
        counts = np.bincount(rng.integers(0, n_batches, size=n_batches), minlength=n_batches)
        weights = counts[batch_of].astype(np.float64)
        n_rows = int((weights > 0).sum())
        for h, g in gradients.items():
            eig = fisher_eigenvalues(g, weights)
            out[h][b] = spectrum_report(eig, n_samples=n_rows, n_params=g.shape[1], rtol=rtol)["kappa"]
    return out


MIN_MAGNITUDE_EFFECT: float = 0.2
"""Smallest Cohen's d (CI lower bound) of raw document norms that counts as a relevance signal: Cohen's (1988)
conventional "small" effect."""


def magnitude_signal(
    embeddings: PooledEmbeddings,
    batch_size: int = DEFAULT_BATCH_SIZE,
    n_resamples: int = 1000,
    seed: int = 0,
    threshold: float = MIN_MAGNITUDE_EFFECT,
) -> dict[str, Any]:
    """Zero-shot test of whether raw document norms already separate positives from confusable negatives.

    Rows are cut into batches of ``batch_size`` in order (as the FIM's in-batch negatives). For each query the
    *confusable* in-batch negative is the other row's positive with the highest cosine to the query; with a
    hard-negative column, that row's hard negative joins the negative group too. The statistic is Cohen's d
    (pooled SD, ddof=1; Cohen 1988) of the raw pooled norms ‖d‖ of the positives (group a, n values) against
    those negatives (group b), with a BCa bootstrap CI (:func:`st_magnitude.analysis.cohens_d_bootstrap`, scipy).
    Cosine ignores exactly this quantity; a head that keeps document magnitude (QNorm, Dot) can use it from step
    0. The paper (arXiv:2602.09229, magnitude analysis) reports d up to 1.80 *after* magnitude fine-tuning; here it
    is measured before any training, which is what a user deciding whether to start needs.

    Args:
        embeddings: pooled rows (no head applied), e.g. from :func:`encode_pooled`.
        batch_size: in-batch-negative batch size (≥ 2).
        n_resamples, seed: bootstrap settings.
        threshold: d that counts as a signal (default 0.2, Cohen's "small").

    Returns:
        ``{"d", "ci_low", "ci_high", "confidence", "n_positive", "n_negative", "threshold", "signal",
        "mean_norm_positive", "mean_norm_negative", "negatives"}``; ``signal`` is ``ci_low >= threshold``.

    Raises:
        ValueError: ``batch_size`` < 2 or fewer than 2 rows (no in-batch negative exists).
    """
    import torch

    from st_magnitude.analysis import cohens_d_bootstrap

    if batch_size < 2 or embeddings.n < 2:
        raise ValueError(
            f"magnitude_signal needs batch_size >= 2 and >= 2 rows for in-batch negatives, got batch_size="
            f"{batch_size}, n={embeddings.n}."
        )
    q, pos = embeddings.queries.double(), embeddings.positives.double()
    pos_norm = torch.linalg.vector_norm(pos, dim=-1)
    q_unit = q / torch.linalg.vector_norm(q, dim=-1, keepdim=True).clamp_min(1e-12)
    pos_unit = pos / pos_norm.unsqueeze(-1).clamp_min(1e-12)
    negatives: list[float] = []
    for lo in range(0, embeddings.n, batch_size):
        hi = min(embeddings.n, lo + batch_size)
        if hi - lo < 2:
            continue  # a trailing batch of one has no in-batch negative
        cos = q_unit[lo:hi] @ pos_unit[lo:hi].T
        cos.fill_diagonal_(-math.inf)
        negatives.extend(pos_norm[lo:hi][cos.argmax(dim=1)].tolist())
    if embeddings.negatives is not None:
        negatives.extend(torch.linalg.vector_norm(embeddings.negatives.double(), dim=-1).tolist())
    effect = cohens_d_bootstrap(pos_norm.numpy(), np.asarray(negatives), n_resamples=n_resamples, seed=seed)
    return {
        "d": effect.d,
        "ci_low": effect.ci_low,
        "ci_high": effect.ci_high,
        "confidence": effect.confidence,
        "n_positive": effect.n_a,
        "n_negative": effect.n_b,
        "mean_norm_positive": float(pos_norm.mean()),
        "mean_norm_negative": float(np.mean(negatives)),
        "threshold": threshold,
        "signal": bool(effect.ci_low >= threshold),
        "negatives": "hardest in-batch positive by cosine"
        + (" + hard-negative column" if embeddings.negatives is not None else ""),
    }


def recommend_head(
    model: SentenceTransformer | str | os.PathLike[str] | None,
    dataset: datasets.Dataset | str | os.PathLike[str],
    n_samples: int = DEFAULT_SAMPLES,
    params: str = DEFAULT_PARAMS,
    temperature: float = 0.05,
    batch_size: int = DEFAULT_BATCH_SIZE,
    n_bootstrap: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    rtol: float | None = None,
    heads: Sequence[str] = CONTEXT_HEADS,
    max_seq_length: int | None = None,
    embeddings: PooledEmbeddings | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    show_progress_bar: bool = False,
) -> Recommendation:
    """Advise cosine, QNorm or DNorm for fine-tuning the pre-trained model on ``dataset``.

    Encodes the rows once, computes κ for each of ``heads`` (must include ``qnorm`` and ``dnorm``; Cosine and
    Dot are context), and bootstraps the QNorm-vs-DNorm decision over batches (module docstring): the lower κ is
    ``recommended``. ``advice`` adds the zero-shot "magnitude at all?" test (:func:`magnitude_signal`): cosine
    unless raw document norms already separate positives from confusable in-batch negatives (Cohen's d CI lower
    bound ≥ :data:`MIN_MAGNITUDE_EFFECT`), else the κ choice.

    Args: as :func:`fisher_condition_number`, plus ``n_bootstrap`` (resamples, default 200; 0 = no
        bootstrap, confidence NaN) and ``heads``.

    Returns:
        :class:`Recommendation`. Deterministic for fixed ``seed`` and inputs.

    Raises:
        ValueError: if ``heads`` lacks qnorm or dnorm, or κ is infinite for both.
    """
    heads = [h.lower() for h in heads]
    if not set(SINGLE_SIDE_HEADS) <= set(heads):
        raise ValueError(f"heads must include 'qnorm' and 'dnorm' (the candidates), got {heads}.")
    t_start = time.perf_counter()
    model_name = None
    if embeddings is None:
        model_obj = _resolve_model(model)
        model_name = str(model) if not hasattr(model, "encode") else type(model).__name__
        rows = _sample_rows(dataset, n_samples, seed, data_dir)
        embeddings = encode_pooled(model_obj, rows, max_seq_length=max_seq_length, show_progress_bar=show_progress_bar)
    reports: dict[str, FisherReport] = {}
    grads: dict[str, np.ndarray] = {}
    for name in heads:
        reports[name], g = _report(name, embeddings, name, params, temperature, batch_size, rtol)
        if name in SINGLE_SIDE_HEADS:
            grads[name] = g
    kappa = {h: r.kappa for h, r in reports.items()}
    kq, kd = kappa["qnorm"], kappa["dnorm"]
    if math.isinf(kq) and math.isinf(kd):
        raise ValueError("κ is infinite for both QNorm and DNorm (every gradient is zero); use more or other rows.")
    recommended = "qnorm" if kq <= kd else "dnorm"
    other = "dnorm" if recommended == "qnorm" else "qnorm"
    t_boot = time.perf_counter()
    if n_bootstrap > 0:
        boot = _bootstrap(grads, batch_size, n_bootstrap, seed, rtol)
        confidence = float(np.mean(boot[recommended] < boot[other]) + 0.5 * np.mean(boot[recommended] == boot[other]))
        kappa_ci = {h: [float(v) for v in np.percentile(boot[h], [2.5, 97.5])] for h in boot}
    else:
        confidence, kappa_ci = float("nan"), {}
    signal = magnitude_signal(embeddings, batch_size=batch_size, seed=seed)
    advice = recommended if signal["signal"] else "cosine"
    t_end = time.perf_counter()
    n_batches = math.ceil(embeddings.n / batch_size)
    settings = {
        "model": model_name,
        "dataset": str(dataset) if isinstance(dataset, (str, os.PathLike)) else None,
        "n_samples": embeddings.n,
        "hard_negatives": embeddings.negatives is not None,
        "dim": embeddings.dim,
        "params": params,
        "n_params": reports[heads[0]].n_params,
        "temperature": temperature,
        "batch_size": batch_size,
        "n_batches": n_batches,
        "seed": seed,
        "n_bootstrap": n_bootstrap,
        "bootstrap": "paired block bootstrap over batches",
        "max_seq_length": max_seq_length,
        "floor_rule": "floor = lambda_max * rtol, rtol = P * eps_float32 (numpy matrix_rank, float32) unless given"
        + (f" (given rtol={rtol})" if rtol is not None else ""),
    }
    return Recommendation(
        recommended=recommended,
        kappa=kappa,
        confidence=confidence,
        kappa_ci=kappa_ci,
        rule="recommend the single-side head (QNorm or DNorm) whose FIM has the lower condition number κ "
        "(better conditioned: gradient descent progresses at a rate governed by κ)",
        reports=reports,
        settings=settings,
        advice=advice,
        magnitude_signal=signal,
        advice_rule=(
            f"keep magnitude only if raw document norms already separate positives from confusable in-batch "
            f"negatives (Cohen's d 95% CI lower bound >= {MIN_MAGNITUDE_EFFECT}); then normalize the side the "
            "lower FIM κ picks (QNorm or DNorm), else use cosine"
        ),
        seconds={
            "encode": embeddings.seconds,
            "per_head": {h: sum(r.seconds.values()) for h, r in reports.items()},
            "bootstrap": t_end - t_boot,
            "total": t_end - t_start + (embeddings.seconds if model_name is None else 0.0),
        },
    )


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------
def _plot_spectra(rec: Recommendation, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rep in rec.reports.items():
        eig = np.asarray(rep.eigenvalues)
        eig = eig[eig > rep.floor]
        ax.semilogy(np.arange(1, eig.size + 1), eig, label=f"{name} (κ={rep.kappa:.3g})")
    ax.set_xlabel("eigenvalue index (descending)")
    ax.set_ylabel("FIM eigenvalue (above floor)")
    ax.set_title(f"FIM spectra, params={rec.settings['params']}, n={rec.settings['n_samples']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _advice_text(rec: Recommendation) -> str:
    m = rec.magnitude_signal
    verdict = (
        "raw document norms carry a relevance signal" if m["signal"] else "no zero-shot evidence that magnitude helps"
    )
    return (
        f"**Should I use magnitude at all? {rec.advice}**: {verdict}: Cohen's d of raw ‖d‖, positives vs "
        f"{m['negatives']} = {m['d']:.3f} (95% CI [{m['ci_low']:.3f}, {m['ci_high']:.3f}], n = {m['n_positive']} / "
        f"{m['n_negative']}; mean ‖d‖ {m['mean_norm_positive']:.3f} vs {m['mean_norm_negative']:.3f}). "
        f"Rule: {rec.advice_rule}."
    )


def _run_cli(args: argparse.Namespace) -> int:
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    rec = recommend_head(
        args.model,
        args.train,
        n_samples=args.samples,
        params=args.params,
        temperature=args.temperature,
        batch_size=args.batch_size,
        n_bootstrap=args.bootstrap,
        seed=args.seed,
        rtol=args.rtol,
        max_seq_length=args.max_seq_length,
        data_dir=args.data_dir,
        show_progress_bar=True,
    )
    data = rec.to_dict()
    data["settings"]["model"] = str(args.model)
    data["settings"]["dataset"] = str(args.train)
    (out_dir / "recommendation.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    summary = (
        f"# st-magnitude recommend\n\nmodel `{args.model}`, data `{args.train}`, n = {rec.settings['n_samples']}, "
        f"params `{rec.settings['params']}` (P = {rec.settings['n_params']}), τ = {rec.settings['temperature']}, "
        f"batch {rec.settings['batch_size']}, seed {rec.settings['seed']}\n\n{rec.table()}\n\n"
        f"**Recommended: {rec.recommended}** (lower κ; bootstrap confidence {rec.confidence:.3f} over "
        f"{rec.settings['n_bootstrap']} resamples)\n\n{_advice_text(rec)}\n"
    )
    (out_dir / "recommendation.md").write_text(summary, encoding="utf-8")
    try:
        _plot_spectra(rec, out_dir / "spectrum.png")
    except Exception as exc:  # a plot must never lose the results
        logger.warning("could not draw spectrum.png: %s", exc)
    print(rec.table())
    print(
        f"\nRecommended: {rec.recommended}  (κ qnorm={rec.kappa['qnorm']:.4g}, dnorm={rec.kappa['dnorm']:.4g}; "
        f"lower κ wins; bootstrap confidence {rec.confidence:.3f})"
    )
    print(_advice_text(rec))
    print(f"wrote {out_dir / 'recommendation.json'}")
    return 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``st-magnitude recommend``."""
    p = subparsers.add_parser(
        "recommend",
        help="advise cosine, QNorm or DNorm: a zero-shot document-norm test plus the Fisher condition number κ",
        description="Compute the condition number κ of the empirical Fisher information of the training InfoNCE "
        "loss under QNorm, DNorm (and Cosine, Dot for context) on the pre-trained model (the single-side head with "
        "the lower κ is 'recommended'), and test zero-shot whether raw document norms separate positives from "
        "confusable in-batch negatives (Cohen's d with a bootstrap CI). Advice: cosine unless that signal is "
        "present, else the κ choice. Writes OUTPUT/recommendation.json, recommendation.md, spectrum.png.",
    )
    p.add_argument("--model", default="all-MiniLM-L6-v2", help="model name or path (default: packaged all-MiniLM-L6-v2)")
    p.add_argument("--train", required=True, help="training set name under the data dir (e.g. train-scifact) or a folder")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help=f"rows used (default {DEFAULT_SAMPLES})")
    p.add_argument("--output", required=True, help="output directory")
    p.add_argument("--params", choices=PARAM_SETS, default=DEFAULT_PARAMS, help="parameter set of the FIM")
    p.add_argument("--temperature", type=float, default=0.05, help="InfoNCE temperature τ (default 0.05)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="in-batch-negative batch size")
    p.add_argument("--bootstrap", type=int, default=DEFAULT_BOOTSTRAP, help="bootstrap resamples (0 = none)")
    p.add_argument("--seed", type=int, default=0, help="row-sampling and bootstrap seed")
    p.add_argument("--rtol", type=float, default=None, help="relative eigenvalue floor (default P*eps_float32)")
    p.add_argument("--max-seq-length", type=int, default=None, help="token limit while encoding")
    p.add_argument("--data-dir", default=None, help="data directory (default $ST_MAGNITUDE_DATA)")
    p.set_defaults(func=_run_cli)
