"""The task symmetry principle: one source of truth for which heads may score which tasks.

arXiv:2602.09229 ("Beyond the Unit Hypersphere"), task symmetry principle: a similarity that treats its two
arguments differently (QNorm q̂·d, DNorm q·d̂, LearnableNorm with γ_q ≠ γ_d) is only meaningful when the
task itself has two different roles, a query and a document. On tasks that compare two texts of the same
kind, s(a, b) must equal s(b, a); an asymmetric head breaks that and the paper measures a 40-45 point
Spearman loss on STS after asymmetric training.

This module decides, *before anything is encoded*:

* :func:`is_symmetric` -- is a head (or the head of a model) symmetric?
* :func:`task_type_symmetry` -- is an mteb task type symmetric or asymmetric (reasons in
  :data:`ASYMMETRIC_TASK_TYPES` / :data:`SYMMETRIC_TASK_TYPES`)?
* :func:`check_task` -- the guard: returns a :class:`SymmetryDecision` or raises
  :class:`~st_magnitude.errors.SymmetryViolationError` naming the task, its type, the head, why symmetry is
  required and the two fixes (a symmetric head, or the explicit opt-in ``symmetric_fallback="cosine"``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Literal

from st_magnitude.errors import SymmetryViolationError
from st_magnitude.heads import SYMMETRY_TOLERANCE, MagnitudeHead, find_head

logger = logging.getLogger(__name__)

__all__ = [
    "SymmetricFallback",
    "SYMMETRIC_FALLBACKS",
    "ASYMMETRIC_TASK_TYPES",
    "SYMMETRIC_TASK_TYPES",
    "is_symmetric",
    "describe_head",
    "task_type_symmetry",
    "is_symmetric_task_type",
    "SymmetryDecision",
    "check_task",
]

SymmetricFallback = Literal["cosine"]
SYMMETRIC_FALLBACKS: tuple[str, ...] = ("cosine",)
"""Accepted values of ``symmetric_fallback``. ``"cosine"``: score the symmetric task with both sides
L2-normalized (the head's output direction is kept, its magnitude dropped), which is symmetric by construction."""

ASYMMETRIC_TASK_TYPES: dict[str, str] = {
    "Retrieval": "a short query is matched against a corpus of documents: the two sides are different kinds of "
    "text with different roles, so q and d may be normalized differently (QNorm's document prior, DNorm's "
    "per-query temperature) -- the setting the asymmetric heads are trained for (paper, Sec. task symmetry).",
    "Reranking": "the same query -> candidate-document comparison as Retrieval, restricted to a candidate list; "
    "roles are fixed by the task.",
    "InstructionRetrieval": "Retrieval whose queries carry an instruction: still query -> document.",
    "InstructionReranking": "Reranking whose queries carry an instruction: still query -> document.",
    "RAG": "question -> passage retrieval for retrieval-augmented generation: a query role and a document role.",
    "QARetrieval": "question -> answer-passage retrieval: a query role and a document role.",
    "Any2AnyRetrieval": "cross-modal retrieval: query -> document roles are fixed by the task.",
    "Any2AnyMultilingualRetrieval": "cross-modal retrieval: query -> document roles are fixed by the task.",
    "Any2AnyReranking": "cross-modal reranking: query -> document roles are fixed by the task.",
    "AudioReranking": "query -> candidate reranking: roles are fixed by the task.",
    "VisionCentricQA": "question -> candidate answer retrieval: roles are fixed by the task.",
    "DocumentUnderstanding": "query -> document-page retrieval: roles are fixed by the task.",
}
"""Task types with a query role and a document role: any head may score them (paper, task symmetry principle)."""

SYMMETRIC_TASK_TYPES: dict[str, str] = {
    "STS": "two sentences of the same kind are compared and the gold score is order-free; s(a, b) must equal "
    "s(b, a), otherwise swapping the columns changes the prediction.",
    "Clustering": "items of one kind are grouped by pairwise similarity; a distance with s(a, b) != s(b, a) has no "
    "single value per pair and no role to give each item.",
    "PairClassification": "pairs (duplicates, paraphrases, entailment) are thresholded on their similarity; the "
    "pair is unordered, so the score must not depend on which text comes first.",
    "BitextMining": "translations are mined by nearest neighbours in both directions; both sides are sentences of "
    "the same kind and neither is a query.",
    "Summarization": "machine summaries are compared with human summaries, texts of the same kind; there is no "
    "query/document role.",
    "Classification": "each text is embedded on its own and fed to a classifier (logistic regression / kNN with a "
    "symmetric distance); there is no role to give the text, so an asymmetric head has no correct output.",
    "MultilabelClassification": "as Classification: single texts without a role.",
    "Regression": "as Classification: single texts without a role.",
    "ZeroShotClassification": "inputs are compared with label descriptions with no trained query/document "
    "convention; treated as symmetric so nothing is scored with a guessed role.",
    "ImageClustering": "as Clustering.",
    "ImageClassification": "as Classification.",
    "VisualSTS(eng)": "as STS.",
    "VisualSTS(multi)": "as STS.",
    "Compositionality": "caption/image matching scored in both directions; treated as symmetric.",
    "AudioClustering": "as Clustering.",
    "AudioClassification": "as Classification.",
    "AudioMultilabelClassification": "as Classification.",
    "AudioZeroshotClassification": "as ZeroShotClassification.",
    "AudioPairClassification": "as PairClassification.",
    "VideoClassification": "as Classification.",
    "VideoClustering": "as Clustering.",
    "VideoMultilabelClassification": "as Classification.",
    "VideoPairClassification": "as PairClassification.",
    "VideoZeroshotClassification": "as ZeroShotClassification.",
    "VideoCentricQA": "treated as symmetric (no fixed query/document convention in mteb's evaluator).",
}
"""Task types that compare texts of the same kind: only symmetric heads (or the opt-in fallback) may score them.

Unknown task types are treated as symmetric (the safe side): nothing is scored with a possibly broken symmetry."""


def _head_of(obj: Any) -> MagnitudeHead | None:
    if isinstance(obj, MagnitudeHead):
        return obj
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:  # pragma: no cover - sentence-transformers is a dependency
        SentenceTransformer = ()  # type: ignore[assignment,misc]
    if isinstance(obj, SentenceTransformer):
        return find_head(obj)
    inner = getattr(obj, "model", None)  # e.g. our mteb wrapper, mteb's SentenceTransformerEncoderWrapper
    if inner is not None and inner is not obj:
        return _head_of(inner)
    raise TypeError(
        f"is_symmetric expects a MagnitudeHead, a SentenceTransformer or a wrapper with a .model attribute, got "
        f"{type(obj).__name__}."
    )


def _has_asymmetric_router(obj: Any) -> bool:
    """True if a SentenceTransformer contains ST's ``Router`` with separate query and document routes."""
    try:
        from sentence_transformers.base.modules import Router
    except ImportError:  # pragma: no cover
        return False
    model = obj if hasattr(obj, "modules") else getattr(obj, "model", None)
    if model is None or not hasattr(model, "modules"):
        return False
    for module in model.modules():
        if isinstance(module, Router):
            routes = {str(k).lower(): v for k, v in (getattr(module, "sub_modules", None) or {}).items()}
            if "query" in routes and "document" in routes and routes["query"] is not routes["document"]:
                return True
    return False


def is_symmetric(head_or_model: Any, tolerance: float = SYMMETRY_TOLERANCE) -> bool:
    """Whether ``head_or_model`` scores s(a, b) = s(b, a), i.e. may be used on symmetric tasks.

    ``Cosine`` and ``Dot`` are symmetric; ``QNorm`` and ``DNorm`` are not; ``LearnableNorm`` is symmetric iff
    |γ_q − γ_d| ≤ ``tolerance`` (default :data:`st_magnitude.heads.SYMMETRY_TOLERANCE` = 1e-6). Per-role output
    scales do not matter: they multiply every score by the same constant. A model without a magnitude head is
    symmetric unless it holds an ST ``Router`` with distinct query/document routes.

    Args:
        head_or_model: a :class:`~st_magnitude.heads.MagnitudeHead`, a ``SentenceTransformer`` (its last module
            is inspected with :func:`~st_magnitude.heads.find_head`) or a wrapper with a ``.model`` attribute
            (e.g. :class:`st_magnitude.mteb.MagnitudeEncoder`).
        tolerance: largest |γ_q − γ_d| still counted as equal (≥ 0).

    Raises:
        TypeError: for any other object.
        ValueError: for a negative tolerance.

    Source: arXiv:2602.09229, task symmetry principle.
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}.")
    head = _head_of(head_or_model)
    if head is None:
        return not _has_asymmetric_router(head_or_model)
    return abs(head.gamma_query - head.gamma_document) <= tolerance


def describe_head(head_or_model: Any) -> str:
    """Human-readable name of the head, e.g. ``QNorm(γ_q=1, γ_d=0)``, or ``no magnitude head``."""
    head = _head_of(head_or_model)
    return head.describe() if head is not None else "no magnitude head"


def task_type_symmetry(task_type: str) -> Literal["symmetric", "asymmetric"]:
    """Classify an mteb task type (``TaskMetadata.type``) by the task symmetry principle.

    Returns ``"asymmetric"`` for the types in :data:`ASYMMETRIC_TASK_TYPES` (query -> document), else
    ``"symmetric"`` -- including unknown types, the safe side (an unknown type is logged).
    """
    if task_type in ASYMMETRIC_TASK_TYPES:
        return "asymmetric"
    if task_type not in SYMMETRIC_TASK_TYPES:
        logger.warning(
            "Unknown task type %r: treated as symmetric (s(a, b) must equal s(b, a)) so that no asymmetric head "
            "scores it silently.",
            task_type,
        )
    return "symmetric"


def is_symmetric_task_type(task_type: str) -> bool:
    """``task_type_symmetry(task_type) == "symmetric"``."""
    return task_type_symmetry(task_type) == "symmetric"


@dataclass(frozen=True)
class SymmetryDecision:
    """How a task will be scored, decided by :func:`check_task` before any encoding.

    Attributes:
        task_name: the task's name.
        task_type: its mteb type (``"STS"``, ``"Retrieval"``, ...).
        task_symmetric: the task needs s(a, b) = s(b, a).
        head: description of the head (``"DNorm(γ_q=0, γ_d=1)"``).
        head_symmetric: :func:`is_symmetric` of the head.
        fallback: ``None`` when the head scores the task as it is; ``"cosine"`` when the opt-in fallback is used
            (both sides L2-normalized).
    """

    task_name: str
    task_type: str
    task_symmetric: bool
    head: str
    head_symmetric: bool
    fallback: str | None = None

    @property
    def uses_fallback(self) -> bool:
        """True if the task is scored with the opt-in symmetric fallback instead of the head."""
        return self.fallback is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for results files)."""
        return asdict(self)


def _violation_message(task_name: str, task_type: str, head: str) -> str:
    reason = SYMMETRIC_TASK_TYPES.get(
        task_type, "its type is not a known query -> document type, so it is treated as symmetric."
    )
    return (
        f"Task {task_name!r} (type {task_type}) is symmetric, but the model's head {head} is asymmetric: it "
        f"normalizes queries and documents differently, so s(a, b) != s(b, a). Why symmetry is required here: "
        f"{reason} Scoring it anyway would silently depend on which text is called the query (the paper measures "
        "a 40-45 point Spearman loss on STS; task symmetry principle, arXiv:2602.09229). Nothing was encoded. "
        "Fixes:\n"
        "  * evaluate this task with a symmetric head: attach_head(model, Cosine()) or Dot() (or a LearnableNorm "
        "with γ_q == γ_d), e.g. the base model before asymmetric fine-tuning;\n"
        "  * or opt in explicitly to scoring it with both sides L2-normalized: MagnitudeEncoder(model, "
        "symmetric_fallback='cosine') / `st-magnitude evaluate --symmetric-fallback cosine`; the result then records "
        "that the fallback was used."
    )


def check_task(
    head_or_model: Any,
    task_name: str,
    task_type: str,
    symmetric_fallback: str | None = None,
    tolerance: float = SYMMETRY_TOLERANCE,
) -> SymmetryDecision:
    """The symmetry guard: decide how ``head_or_model`` may score a task, before anything is encoded.

    * asymmetric task (Retrieval, Reranking, ...): any head; ``fallback=None``.
    * symmetric task and symmetric head (Cosine, Dot, equal-γ LearnableNorm, no head): ``fallback=None``.
    * symmetric task and asymmetric head: raises, unless ``symmetric_fallback="cosine"`` was passed, in which
      case ``fallback="cosine"`` (score with both sides normalized) and a warning is logged.

    Args:
        head_or_model: see :func:`is_symmetric`.
        task_name: the task's name (for the message).
        task_type: the mteb task type, e.g. ``"STS"``.
        symmetric_fallback: ``None`` (refuse) or ``"cosine"`` (explicit opt-in).
        tolerance: see :func:`is_symmetric`.

    Raises:
        SymmetryViolationError: asymmetric head on a symmetric task without opt-in. Attributes ``task_name``,
            ``task_type`` and ``head`` are set on the exception.
        ValueError: for an unknown ``symmetric_fallback``.

    Source: arXiv:2602.09229, task symmetry principle.
    """
    if symmetric_fallback is not None and symmetric_fallback not in SYMMETRIC_FALLBACKS:
        raise ValueError(f"symmetric_fallback must be None or one of {list(SYMMETRIC_FALLBACKS)}, got {symmetric_fallback!r}.")
    task_symmetric = is_symmetric_task_type(task_type)
    head_symmetric = is_symmetric(head_or_model, tolerance=tolerance)
    head = describe_head(head_or_model)
    fallback = None
    if task_symmetric and not head_symmetric:
        if symmetric_fallback is None:
            error = SymmetryViolationError(_violation_message(task_name, task_type, head))
            error.task_name = task_name  # type: ignore[attr-defined]
            error.task_type = task_type  # type: ignore[attr-defined]
            error.head = head  # type: ignore[attr-defined]
            raise error
        fallback = symmetric_fallback
        logger.warning(
            "Task %r (%s) is symmetric and %s is not: scoring it with the opt-in symmetric fallback %r (both sides "
            "L2-normalized); the result records this.",
            task_name,
            task_type,
            head,
            fallback,
        )
    return SymmetryDecision(
        task_name=task_name,
        task_type=task_type,
        task_symmetric=task_symmetric,
        head=head,
        head_symmetric=head_symmetric,
        fallback=fallback,
    )
