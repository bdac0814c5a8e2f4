"""Norm calibration: start the raw side(s) of a magnitude head at unit mean norm.

Cosine-trained base models (MiniLM, E5, BGE) have raw pooled norms of several units that carry no trained
signal. A head that suddenly exposes them multiplies the logits at step 0 (QNorm: by ‖d‖; DNorm: by ‖q‖),
turning τ = 0.05 into a much sharper softmax: a start-up shock. Calibration measures, once, the mean output
norm of each side on a sample (each side encoded with its own role) and stores ``1 / mean`` as that side's
fixed ``query_scale``/``document_scale`` in the head's config. At step 0 the logits then have cosine's scale
while *relative* magnitudes are kept, so rankings are unchanged: the scale is a positive constant per side.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
from sentence_transformers import SentenceTransformer

from st_magnitude.heads import MagnitudeHead, find_head

__all__ = ["calibrate_head", "check_calibration_input"]


_QUERY_COLUMNS = ("anchor", "query", "queries")
_DOCUMENT_COLUMNS = ("positive", "document", "documents", "passage")


def _texts(values: Any, where: str) -> tuple[list[str], int]:
    """The non-empty texts of ``values`` (a list/sequence/iterable of strings) and how many empty ones were
    skipped; anything else raises."""
    if values is None:
        raise ValueError(f"{where} is None; give a list of texts.")
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{where} is a single {type(values).__name__}, not a list of texts; wrap it in a list.")
    try:
        items = list(values)
    except TypeError as err:
        raise ValueError(f"{where} must be a list of texts, got {type(values).__name__}.") from err
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(
                f"{where}[{i}] is {item!r} ({type(item).__name__}), not a string; drop or fill missing texts first."
            )
    texts = [t for t in items if t.strip()]
    return texts, len(items) - len(texts)


def _sample(texts: list[str], n: int, seed: int) -> list[str]:
    if len(texts) > n:
        texts = random.Random(seed).sample(texts, n)
    return texts


CALIBRATION_BATCH_SIZE = 64
"""Encoding batch size of :func:`calibrate_head` (and of ``attach_head(..., calibrate_on=...)``)."""
CALIBRATION_SEED = 0
"""Sampling seed of :func:`calibrate_head` (and of ``attach_head(..., calibrate_on=...)``)."""


def calibrate_head(
    model: SentenceTransformer,
    calibrate_on: Any,
    n: int = 512,
    batch_size: int = CALIBRATION_BATCH_SIZE,
    seed: int = CALIBRATION_SEED,
) -> dict[str, float]:
    """Set the model's head scales so each side the head leaves (partly) unnormalized has mean norm 1.

    Every side with γ < 1 is measured with its own role (``encode_query``/``encode_document``) at scale 1, and
    its ``query_scale``/``document_scale`` becomes ``1 / mean norm``; a fully normalized side (γ = 1) is left
    exactly as it is. All inputs are checked and both sides measured before the head is changed, so a failed
    call leaves the head as it was. Calling it again re-measures from scale 1 (scales never compound).

    Args:
        model: a SentenceTransformer ending in a :class:`~st_magnitude.heads.MagnitudeHead`.
        calibrate_on: where to measure: a :class:`datasets.Dataset` or dict with ``anchor``/``query`` and
            ``positive``/``document`` columns (only the column of a side that needs calibration is required),
            or a ``(queries, documents)`` pair of text lists. Empty and white-space texts are skipped (counted
            in the result).
        n: texts sampled per side (seeded); the scale is exact on that sample.
        batch_size: encoding batch size.
        seed: sampling seed.

    Returns:
        ``{"query_scale": s_q, "document_scale": s_d, "query_mean_norm": m_q, "document_mean_norm": m_d,
        "n_queries": .., "n_documents": .., "skipped_empty": ..}`` where ``m`` are the mean output norms measured
        with scale 1 and ``s = 1/m`` for every side with γ < 1; for a normalized side ``m`` is 1, ``n`` is 0 and
        ``s`` is its unchanged scale.

    Raises:
        TypeError: if the model has no magnitude head, or a text is not a string (named by position).
        ValueError: bad ``n``/``batch_size``, a malformed ``calibrate_on`` (a string instead of a list, a
            ``DatasetDict`` instead of one split, missing columns), no usable texts for a side that needs
            calibration, or a measured mean norm of 0.

    Source: the start-up-shock analysis in this project's issue 7 (a probe measured the first-50-step loss
    4.1 for QNorm vs 3.0 for calibrated QNorm); temperature reading of magnitude: arXiv:2602.09229.
    """
    n, batch_size = _count("n", n), _count("batch_size", batch_size)
    head = find_head(model)
    if not isinstance(head, MagnitudeHead):
        raise TypeError("calibrate_head needs a model whose last module is a magnitude head (use attach_head first).")
    return _calibrate(model, head, check_calibration_input(head, calibrate_on), n, batch_size, seed)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        what = " (texts sampled per side)" if name == "n" else ""
        raise ValueError(f"{name} must be a positive integer{what}, got {value!r}.")
    return int(value)


def _calibrate(
    model: SentenceTransformer, head: MagnitudeHead, plan: dict[str, Any], n: int, batch_size: int, seed: int
) -> dict[str, Any]:
    """Measure each side of a validated ``plan`` (:func:`check_calibration_input`) and set the head's scales."""
    old = {"query_scale": head.query_scale, "document_scale": head.document_scale}
    was_training = model.training
    result: dict[str, Any] = {"skipped_empty": plan["skipped_empty"]}
    measured: dict[str, float] = {}
    try:
        for role, attr, count in (("query", "query_scale", "n_queries"), ("document", "document_scale", "n_documents")):
            texts = plan[role]
            if texts is None:  # normalized side: untouched
                result.update({f"{role}_mean_norm": 1.0, attr: old[attr], count: 0})
                continue
            sample = _sample(texts, n, seed)
            setattr(head, attr, 1.0)
            encode = model.encode_query if role == "query" else model.encode_document
            embeddings = encode(sample, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
            mean_norm = float(np.linalg.norm(embeddings.astype(np.float64), axis=1).mean())
            if not (mean_norm > 0 and math.isfinite(mean_norm)):
                raise ValueError(f"Mean {role} norm is {mean_norm}; cannot calibrate (are the embeddings all zero?).")
            measured[attr] = 1.0 / mean_norm
            result.update({f"{role}_mean_norm": mean_norm, attr: 1.0 / mean_norm, count: len(sample)})
    finally:  # measuring set scales to 1: put the old ones back, then apply only a complete measurement
        for attr, value in old.items():
            setattr(head, attr, value)
        model.train(was_training)
    for attr, value in measured.items():
        setattr(head, attr, value)
    return result


def check_calibration_input(head: MagnitudeHead, calibrate_on: Any) -> dict[str, Any]:
    """Validate ``calibrate_on`` for ``head`` without encoding anything (cheap; used before a model is changed).

    Args:
        head: the magnitude head to calibrate; its γ decide which sides need texts (γ < 1).
        calibrate_on: as in :func:`calibrate_head`.

    Returns:
        ``{"query": texts | None, "document": texts | None, "skipped_empty": k}``: None for a side the head
        normalizes fully (γ = 1), else its non-empty texts (a list of str).

    Raises:
        TypeError: a text that is not a string (named by position).
        ValueError: a string or None instead of a list, a ``DatasetDict`` instead of one split, a missing column
            for a side with γ < 1, or no non-empty texts for such a side.

    Source: this project's calibration design (issue 7); no formula.
    """
    needs = {"query": head.gamma_query < 1.0, "document": head.gamma_document < 1.0}
    raw: dict[str, Any] = {}
    if isinstance(calibrate_on, tuple) and len(calibrate_on) == 2:
        if isinstance(calibrate_on[0], str) or isinstance(calibrate_on[1], str):
            raise ValueError("calibrate_on=(queries, documents) takes two lists of texts, not two strings.")
        raw = {"query": (calibrate_on[0], "calibrate_on[0] (queries)"),
               "document": (calibrate_on[1], "calibrate_on[1] (documents)")}
    else:
        if isinstance(calibrate_on, dict) and calibrate_on and all(
            hasattr(v, "column_names") for v in calibrate_on.values()
        ):
            split = next(iter(calibrate_on))
            raise ValueError(
                f"calibrate_on is a DatasetDict with splits {list(calibrate_on)}; pass one split, e.g. "
                f"calibrate_on=ds[{split!r}]."
            )
        columns = getattr(calibrate_on, "column_names", None)
        if columns is None and isinstance(calibrate_on, dict):
            columns = list(calibrate_on)
        if columns is None:
            raise ValueError(
                "calibrate_on must be a (queries, documents) pair of text lists, or a dataset/dict with "
                f"anchor|query and positive|document columns, got {type(calibrate_on).__name__}."
            )
        for role, names in (("query", _QUERY_COLUMNS), ("document", _DOCUMENT_COLUMNS)):
            col = next((c for c in names if c in columns), None)
            if col is not None:
                raw[role] = (calibrate_on[col], f"calibrate_on[{col!r}]")
            elif needs[role]:
                raise ValueError(
                    f"calibrate_on has columns {list(columns)}, but the head keeps the {role} magnitude "
                    f"(γ_{'q' if role == 'query' else 'd'} < 1) and no {role} column "
                    f"({'|'.join(names)}) is there."
                )
    plan: dict[str, Any] = {"query": None, "document": None, "skipped_empty": 0}
    for role in ("query", "document"):
        if not needs[role]:
            continue
        values, where = raw[role]
        texts, skipped = _texts(values, where)
        plan["skipped_empty"] += skipped
        if not texts:
            gamma = head.gamma_query if role == "query" else head.gamma_document
            raise ValueError(
                f"calibrate_on has no non-empty {role} texts, but the head keeps the {role} magnitude (γ={gamma:.3g})."
            )
        plan[role] = texts
    return plan
