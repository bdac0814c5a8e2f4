"""st-magnitude: sentence-transformers retrievers whose embeddings keep their magnitude.

Implements the similarity cells of arXiv:2602.09229 ("Beyond the Unit Hypersphere: Embedding Magnitude in
Contrastive Learning") as sentence-transformers modules (:class:`Cosine`, :class:`Dot`, :class:`QNorm`,
:class:`DNorm`, :class:`LearnableNorm`), a magnitude-aware InfoNCE loss, and the tools around them.

Public names are imported lazily (PEP 562), so ``import st_magnitude`` and ``st-magnitude --help`` do not pay for
torch, sentence-transformers, mteb or faiss until a name that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from st_magnitude.errors import (
    DataValidationError,
    HeadConfigError,
    IndexMismatchError,
    MissingTaskError,
    NonFiniteEmbeddingError,
    StMagnitudeError,
    SymmetryViolationError,
    UnknownRoleError,
)

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    # heads
    "Cosine": "st_magnitude.heads",
    "Dot": "st_magnitude.heads",
    "QNorm": "st_magnitude.heads",
    "DNorm": "st_magnitude.heads",
    "LearnableNorm": "st_magnitude.heads",
    "MagnitudeHead": "st_magnitude.heads",
    "HEADS": "st_magnitude.heads",
    "make_head": "st_magnitude.heads",
    "find_head": "st_magnitude.heads",
    "attach_head": "st_magnitude.heads",
    "gamma_learning_rate_mapping": "st_magnitude.heads",
    # maths
    "magnitude_normalize": "st_magnitude.functional",
    "dot_scores": "st_magnitude.functional",
    "effective_temperature": "st_magnitude.functional",
    "cohens_d": "st_magnitude.functional",
    # training
    "MagnitudeInfoNCELoss": "st_magnitude.losses",
    "MagnitudeLoggingCallback": "st_magnitude.losses",
    "calibrate_head": "st_magnitude.calibration",
    "load_model": "st_magnitude.models",
    # symmetry
    "is_symmetric": "st_magnitude.symmetry",
    "check_task": "st_magnitude.symmetry",
    "SymmetryDecision": "st_magnitude.symmetry",
    # index
    "build_index": "st_magnitude.index",
    "search": "st_magnitude.index",
    "save_index": "st_magnitude.index",
    "load_index": "st_magnitude.index",
    "encode_corpus": "st_magnitude.index",
    # Fisher recommender
    "fisher_condition_number": "st_magnitude.fisher",
    "recommend_head": "st_magnitude.fisher",
    "FisherReport": "st_magnitude.fisher",
    "Recommendation": "st_magnitude.fisher",
    # publishing
    "save_magnitude_model": "st_magnitude.hub",
    "push_to_hub": "st_magnitude.hub",
    "write_model_card": "st_magnitude.hub",
}

__all__ = [
    *_LAZY,
    "StMagnitudeError",
    "MissingTaskError",
    "UnknownRoleError",
    "SymmetryViolationError",
    "NonFiniteEmbeddingError",
    "DataValidationError",
    "HeadConfigError",
    "IndexMismatchError",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'st_magnitude' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from st_magnitude.calibration import calibrate_head
    from st_magnitude.fisher import FisherReport, Recommendation, fisher_condition_number, recommend_head
    from st_magnitude.functional import cohens_d, dot_scores, effective_temperature, magnitude_normalize
    from st_magnitude.heads import (
        HEADS,
        Cosine,
        DNorm,
        Dot,
        LearnableNorm,
        MagnitudeHead,
        QNorm,
        attach_head,
        find_head,
        gamma_learning_rate_mapping,
        make_head,
    )
    from st_magnitude.hub import push_to_hub, save_magnitude_model, write_model_card
    from st_magnitude.index import build_index, encode_corpus, load_index, save_index, search
    from st_magnitude.losses import MagnitudeInfoNCELoss, MagnitudeLoggingCallback
    from st_magnitude.models import load_model
    from st_magnitude.symmetry import SymmetryDecision, check_task, is_symmetric
