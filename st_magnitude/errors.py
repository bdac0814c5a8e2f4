"""Exception classes of st-magnitude.

Every message says what happened, why it matters for magnitude-keeping embeddings, and the exact fix.
All classes derive from :class:`StMagnitudeError`, so ``except StMagnitudeError`` catches them all; each
also derives from the closest built-in (``ValueError``) so generic handlers keep working.
"""

from __future__ import annotations

__all__ = [
    "StMagnitudeError",
    "MissingTaskError",
    "UnknownRoleError",
    "SymmetryViolationError",
    "NonFiniteEmbeddingError",
    "DataValidationError",
    "HeadConfigError",
    "IndexMismatchError",
    "ConfigurationError",
]


class StMagnitudeError(Exception):
    """Base class of every error raised by st-magnitude."""


class MissingTaskError(StMagnitudeError, ValueError):
    """An asymmetric magnitude head was called without knowing whether it sees a query or a document.

    QNorm, DNorm and LearnableNorm with γ_q ≠ γ_d treat the two roles differently, so guessing a role
    would silently produce wrong scores. The message names the fixes.
    """

    def __init__(self, head_name: str) -> None:
        super().__init__(
            f"{head_name} normalizes queries and documents differently, but it was called without a role "
            "(task=None). It will not guess. Fixes:\n"
            "  * at inference, use model.encode_query(...) for queries and model.encode_document(...) for "
            "documents, or pass task='query' / task='document' to model.encode(...);\n"
            "  * in training, give SentenceTransformerTrainingArguments "
            "router_mapping={'anchor': 'query', 'positive': 'document', 'negative': 'document'} "
            "(use your own column names as keys).\n"
            f"Note: {head_name} breaks s(a, b) = s(b, a), so it is not valid for symmetric tasks (STS, "
            "clustering, pair classification, bitext mining); use Cosine() or Dot() there "
            "(task symmetry principle, arXiv:2602.09229)."
        )
        self.head_name = head_name


class UnknownRoleError(StMagnitudeError, ValueError):
    """A head got a ``task`` value that is neither a query nor a document role."""

    def __init__(self, task: object, accepted: dict[str, str]) -> None:
        synonyms = ", ".join(f"{k!r}->{v!r}" for k, v in sorted(accepted.items()))
        super().__init__(
            f"Unknown role task={task!r}. Magnitude heads accept only these roles (synonym -> role): "
            f"{synonyms}. Use model.encode_query / model.encode_document, or map your dataset columns to "
            "'query' and 'document' in router_mapping."
        )
        self.task = task


class SymmetryViolationError(StMagnitudeError, ValueError):
    """An asymmetric head (QNorm, DNorm, unequal-γ LearnableNorm) met a symmetric task.

    Symmetric tasks (STS, clustering, pair classification, bitext mining, ...) compare two texts of the
    same kind, so s(a, b) must equal s(b, a); an asymmetric head breaks that (paper, task symmetry
    principle). Raised before anything is encoded.
    """


class NonFiniteEmbeddingError(StMagnitudeError, FloatingPointError):
    """An embedding reaching a head, or a score, holds NaN or ±inf."""


class DataValidationError(StMagnitudeError, ValueError):
    """A dataset file is missing, malformed or inconsistent (unknown ids, empty texts, duplicate ids, ...)."""


class HeadConfigError(StMagnitudeError, ValueError):
    """A head was constructed or loaded with an invalid configuration (γ outside [0, 1], wrong type, ...)."""


class IndexMismatchError(StMagnitudeError, ValueError):
    """An index was used with, or loaded for, a head or dimension other than the one it was built for.

    An index built for a Cosine model holds normalized documents; one built for QNorm holds raw documents
    and (with the MIPS-to-L2 transform) a constant M. Mixing them silently returns wrong rankings, so it fails.
    """


class ConfigurationError(StMagnitudeError, ValueError):
    """A run was configured with invalid settings (unknown head, steps < 1, a batch larger than the data, ...)."""
