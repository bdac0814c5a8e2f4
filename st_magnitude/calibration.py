"""Norm calibration: start the raw side(s) of a magnitude head at unit mean norm.

Cosine-trained base models (MiniLM, E5, BGE) have raw pooled norms of several units that carry no trained
signal. A head that suddenly exposes them multiplies the logits at step 0 (QNorm: by ‖d‖; DNorm: by ‖q‖),
turning τ = 0.05 into a much sharper softmax: a start-up shock. Calibration measures, once, the mean output
norm of each side on a sample (each side encoded with its own role) and stores ``1 / mean`` as that side's
fixed ``query_scale``/``document_scale`` in the head's config. At step 0 the logits then have cosine's scale
while *relative* magnitudes are kept, so rankings are unchanged: the scale is a positive constant per side.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
from sentence_transformers import SentenceTransformer

from st_magnitude.heads import MagnitudeHead, find_head

__all__ = ["calibrate_head"]


def _sample(texts: Sequence[str], n: int, seed: int) -> list[str]:
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if len(texts) > n:
        texts = random.Random(seed).sample(texts, n)
    return texts


def calibrate_head(
    model: SentenceTransformer,
    calibrate_on: Any,
    n: int = 512,
    batch_size: int = 64,
    seed: int = 0,
) -> dict[str, float]:
    """Set the model's head scales so each side the head leaves (partly) unnormalized has mean norm 1.

    Args:
        model: a SentenceTransformer ending in a :class:`~st_magnitude.heads.MagnitudeHead`.
        calibrate_on: where to measure: a :class:`datasets.Dataset` or dict with ``anchor``/``query`` and
            ``positive``/``document`` columns, or a ``(queries, documents)`` pair of text lists.
        n: texts sampled per side (seeded); the scale is exact on that sample.
        batch_size: encoding batch size.
        seed: sampling seed.

    Returns:
        ``{"query_scale": s_q, "document_scale": s_d, "query_mean_norm": m_q, "document_mean_norm": m_d,
        "n_queries": .., "n_documents": ..}`` where ``m`` are the mean output norms measured before calibration
        (with scale 1) and ``s = 1/m`` for every side with γ < 1 (a fully normalized side keeps scale 1).

    Raises:
        TypeError: if the model has no magnitude head.
        ValueError: if ``calibrate_on`` has no usable texts for a side that needs calibration, or a measured
            mean norm is 0.

    Source: the start-up-shock analysis in this project's issue 7 (a probe measured the first-50-step loss
    4.1 for QNorm vs 3.0 for calibrated QNorm); temperature reading of magnitude: arXiv:2602.09229.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer (texts sampled per side), got {n!r}.")
    head = find_head(model)
    if not isinstance(head, MagnitudeHead):
        raise TypeError("calibrate_head needs a model whose last module is a magnitude head (use attach_head first).")
    queries, documents = _split_texts(calibrate_on)
    result: dict[str, float] = {}
    for role, texts, attr in (("query", queries, "query_scale"), ("document", documents, "document_scale")):
        gamma = head.gamma_query if role == "query" else head.gamma_document
        setattr(head, attr, 1.0)
        if gamma >= 1.0:
            result[f"{role}_mean_norm"] = 1.0
            result[attr] = 1.0
            result["n_queries" if role == "query" else "n_documents"] = 0
            continue
        sample = _sample(texts, n, seed)
        if not sample:
            raise ValueError(f"calibrate_on has no {role} texts, but the head keeps the {role} magnitude (γ={gamma:.3g}).")
        encode = model.encode_query if role == "query" else model.encode_document
        embeddings = encode(sample, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
        mean_norm = float(np.linalg.norm(embeddings.astype(np.float64), axis=1).mean())
        if not mean_norm > 0:
            raise ValueError(f"Mean {role} norm is {mean_norm}; cannot calibrate (are the embeddings all zero?).")
        setattr(head, attr, 1.0 / mean_norm)
        result[f"{role}_mean_norm"] = mean_norm
        result[attr] = 1.0 / mean_norm
        result["n_queries" if role == "query" else "n_documents"] = len(sample)
    return result


def _split_texts(calibrate_on: Any) -> tuple[list[str], list[str]]:
    if isinstance(calibrate_on, tuple) and len(calibrate_on) == 2:
        if isinstance(calibrate_on[0], str) or isinstance(calibrate_on[1], str):
            raise ValueError("calibrate_on=(queries, documents) takes two lists of texts, not two strings.")
        return list(calibrate_on[0]), list(calibrate_on[1])
    columns = getattr(calibrate_on, "column_names", None) or (list(calibrate_on) if isinstance(calibrate_on, dict) else None)
    if columns is None:
        raise ValueError(
            "calibrate_on must be a (queries, documents) pair of text lists, or a dataset/dict with "
            "anchor|query and positive|document columns."
        )
    query_col = next((c for c in ("anchor", "query", "queries") if c in columns), None)
    doc_col = next((c for c in ("positive", "document", "documents", "passage") if c in columns), None)
    if query_col is None or doc_col is None:
        raise ValueError(f"calibrate_on has columns {columns}; need anchor|query and positive|document.")
    return list(calibrate_on[query_col]), list(calibrate_on[doc_col])
