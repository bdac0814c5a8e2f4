"""st-magnitude: sentence-transformers retrievers whose embeddings keep their magnitude.

Implements the similarity cells of arXiv:2602.09229 ("Beyond the Unit Hypersphere: Embedding Magnitude in
Contrastive Learning") as sentence-transformers modules (:class:`Cosine`, :class:`Dot`, :class:`QNorm`,
:class:`DNorm`, :class:`LearnableNorm`), a magnitude-aware InfoNCE loss, and the tools around them.
"""

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
from st_magnitude.fisher import FisherReport, Recommendation, fisher_condition_number, recommend_head
from st_magnitude.hub import push_to_hub, save_magnitude_model, write_model_card
from st_magnitude.index import build_index, encode_corpus, load_index, save_index, search
from st_magnitude.losses import MagnitudeInfoNCELoss, MagnitudeLoggingCallback
from st_magnitude.symmetry import SymmetryDecision, check_task, is_symmetric

__version__ = "0.1.0"

__all__ = [
    "Cosine",
    "Dot",
    "QNorm",
    "DNorm",
    "LearnableNorm",
    "MagnitudeHead",
    "HEADS",
    "make_head",
    "find_head",
    "attach_head",
    "gamma_learning_rate_mapping",
    "is_symmetric",
    "check_task",
    "SymmetryDecision",
    "MagnitudeInfoNCELoss",
    "MagnitudeLoggingCallback",
    "magnitude_normalize",
    "dot_scores",
    "effective_temperature",
    "cohens_d",
    "StMagnitudeError",
    "MissingTaskError",
    "UnknownRoleError",
    "SymmetryViolationError",
    "NonFiniteEmbeddingError",
    "DataValidationError",
    "HeadConfigError",
    "IndexMismatchError",
    "build_index",
    "search",
    "save_index",
    "load_index",
    "encode_corpus",
    "fisher_condition_number",
    "recommend_head",
    "FisherReport",
    "Recommendation",
    "save_magnitude_model",
    "push_to_hub",
    "write_model_card",
]
