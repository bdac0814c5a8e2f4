"""Pure, typed maths of magnitude-aware similarity (no modules, no state).

The heads in :mod:`st_magnitude.heads` are thin wrappers around these functions, so every formula can
be checked by hand on 2-3 element tensors (``tests/test_functional.py``).

Source of the formulas: arXiv:2602.09229 ("Beyond the Unit Hypersphere: Embedding Magnitude in
Contrastive Learning"), section on learnable normalization (x / ‖x‖^γ) and on the effective temperature.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from st_magnitude.errors import NonFiniteEmbeddingError

__all__ = [
    "DEFAULT_EPS",
    "check_finite",
    "magnitude_normalize",
    "dot_scores",
    "effective_temperature",
    "cohens_d",
]

DEFAULT_EPS: float = 1e-12
"""Floor on ‖x‖ before it is raised to γ: a zero vector maps to zero, never to NaN (as in ``F.normalize``)."""


def check_finite(x: Tensor, what: str = "embedding", where: str = "before the magnitude head") -> None:
    """Raise :class:`NonFiniteEmbeddingError` if ``x`` holds NaN or ±inf.

    Args:
        x: Tensor of any shape, e.g. ``(batch, dim)`` pooled embeddings.
        what: Name used in the message.

    Raises:
        NonFiniteEmbeddingError: naming how many rows are affected and the usual causes.
    """
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        bad_rows = int((~finite).reshape(x.shape[0], -1).any(dim=-1).sum()) if x.ndim > 0 else 1
        raise NonFiniteEmbeddingError(
            f"{bad_rows} {what}(s) contain NaN or inf {where} (dtype {x.dtype}). They would silently give NaN "
            "scores. Usual causes: fp16 overflow in the encoder (run in float32 or bfloat16), a diverged training "
            "run (lower the learning rate), or NaN inputs."
        )


def magnitude_normalize(
    x: Tensor,
    gamma: float | Tensor,
    eps: float = DEFAULT_EPS,
    scale: float | Tensor = 1.0,
) -> Tensor:
    """Partially normalize embeddings: ``scale * x / max(‖x‖₂, eps) ** gamma``.

    γ = 1 gives the unit vector (identical to ``torch.nn.functional.normalize``), γ = 0 the raw vector,
    and values in between keep a compressed magnitude: the output norm is ``scale * ‖x‖^(1-γ)``.

    Args:
        x: ``(..., dim)`` embeddings, any float dtype. Norms are computed in float32 so half-precision
            inputs whose squared norm overflows fp16 (‖x‖ > 256) stay correct; the result is cast back to
            ``x.dtype``.
        gamma: exponent γ in [0, 1]; a Python float or a 0-d tensor (differentiable, for LearnableNorm).
        eps: floor on the norm (default 1e-12); a zero vector stays zero instead of becoming NaN.
        scale: fixed multiplier applied after normalization (norm calibration; 1.0 = none).

    Returns:
        Tensor of the same shape and dtype as ``x``.

    Raises:
        NonFiniteEmbeddingError: if ``x`` contains NaN or inf.
        ValueError: if a float ``gamma`` lies outside [0, 1].

    Source: arXiv:2602.09229, learnable normalization x / ‖x‖^γ.
    """
    if not torch.is_floating_point(x):
        raise TypeError(f"magnitude_normalize needs a floating-point tensor, got dtype {x.dtype}.")
    check_finite(x)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, Tensor)):
        raise TypeError(f"gamma must be a number or a 0-d tensor in [0, 1], got {gamma!r}.")
    g = float(gamma.detach()) if isinstance(gamma, Tensor) else float(gamma)
    if not 0.0 <= g <= 1.0:  # also rejects NaN
        raise ValueError(f"gamma must lie in [0, 1], got {g!r}.")
    xf = x.float()
    if not isinstance(gamma, Tensor) and float(gamma) == 0.0:
        out = xf
    else:
        # float64 norm: ‖x‖² of float32 values above ~1.8e19 would overflow to inf (and the output to 0).
        norm = torch.linalg.vector_norm(x.double(), ord=2, dim=-1, keepdim=True).clamp_min(eps).float()
        if not isinstance(gamma, Tensor) and float(gamma) == 1.0:
            out = xf / norm
        else:
            out = xf / norm.pow(gamma)
    if isinstance(scale, Tensor) or float(scale) != 1.0:
        out = out * scale
    out = out.to(x.dtype)
    check_finite(out, what="head output", where="after the magnitude head (the output overflows its dtype)")
    return out


def dot_scores(queries: Tensor, documents: Tensor) -> Tensor:
    """Inner-product score matrix ``queries @ documents.T``: ``(n_q, dim) x (n_d, dim) -> (n_q, n_d)``.

    With the head applied first, this is the score of every cell: Cosine q̂·d̂, Dot q·d, QNorm q̂·d,
    DNorm q·d̂ (arXiv:2602.09229, Table 1).

    Raises:
        NonFiniteEmbeddingError: if a score is NaN or inf.
    """
    scores = queries @ documents.transpose(-1, -2)
    check_finite(scores, what="score row", where="in the dot-product scores (overflow? compute in float32)")
    return scores


def effective_temperature(query_embeddings: Tensor, temperature: float) -> Tensor:
    """Per-query effective temperature τ_eff = τ / ‖q‖ under InfoNCE with dot-product scores.

    A score q·d/τ equals (q̂·d)/(τ/‖q‖): the query's magnitude rescales all of its logits, acting as a
    per-query temperature (arXiv:2602.09229, analysis of query magnitude).

    Args:
        query_embeddings: ``(n, dim)`` query embeddings *after* the head.
        temperature: τ (unitless, e.g. 0.05).

    Returns:
        ``(n,)`` float tensor of τ / max(‖q‖, 1e-12).
    """
    norms = torch.linalg.vector_norm(query_embeddings.float(), dim=-1).clamp_min(DEFAULT_EPS)
    return temperature / norms


def cohens_d(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Cohen's d = (mean(a) - mean(b)) / s_pooled with s_pooled² = ((n_a-1)s_a² + (n_b-1)s_b²)/(n_a+n_b-2).

    Sample variances use ddof=1 (Cohen 1988, eq. 2.5.2). Positive when ``a`` is larger on average.

    Raises:
        ValueError: if either sample has fewer than 2 values or the pooled deviation is 0.
    """
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    if not (np.isfinite(xa).all() and np.isfinite(xb).all()):
        raise ValueError("Cohen's d needs finite values; the samples contain NaN or inf.")
    if xa.size < 2 or xb.size < 2:
        raise ValueError(f"Cohen's d needs at least 2 values per group, got {xa.size} and {xb.size}.")
    pooled = ((xa.size - 1) * xa.var(ddof=1) + (xb.size - 1) * xb.var(ddof=1)) / (xa.size + xb.size - 2)
    if pooled <= 0.0 or not math.isfinite(pooled):
        raise ValueError("Cohen's d is undefined: both groups have zero variance.")
    return float((xa.mean() - xb.mean()) / math.sqrt(pooled))
