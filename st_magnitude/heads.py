"""Magnitude heads: sentence-transformers modules that decide which side keeps its magnitude.

Siblings of ST's :class:`~sentence_transformers.base.modules.Normalize`, placed after ``Pooling``
(``SentenceTransformer(modules=[transformer, pooling, DNorm()])``) or attached to any ST model with
:func:`attach_head`. Each head maps a pooled embedding x to ``scale_r * x / max(‖x‖, eps) ** γ_r`` where
r is the role (query or document) read from ``task`` (``encode_query``/``encode_document``, or the trainer's
``router_mapping``). Scores are then plain dot products, so the head alone decides what is normalized:

=============  ========  ========  =====================================  ==========
head           γ_query   γ_document score (arXiv:2602.09229, Table 1)      symmetric
=============  ========  ========  =====================================  ==========
``Cosine``     1         1         q̂·d̂                                    yes
``Dot``        0         0         q·d                                    yes
``QNorm``      1         0         q̂·d (document magnitude kept)          no
``DNorm``      0         1         q·d̂ (query magnitude kept)             no
``LearnableNorm`` learned learned  q/‖q‖^γq · d/‖d‖^γd                    iff γq = γd
=============  ========  ========  =====================================  ==========

Asymmetric heads raise :class:`~st_magnitude.errors.MissingTaskError` when called without a role.
"""

from __future__ import annotations

import logging
import math
import numbers
import warnings
from typing import Any, ClassVar, Literal

try:
    from typing import Self
except ImportError:  # Python 3.10
    from typing_extensions import Self

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Module
from torch import Tensor

from st_magnitude.errors import HeadConfigError, MissingTaskError, UnknownRoleError
from st_magnitude.functional import DEFAULT_EPS, magnitude_normalize

logger = logging.getLogger(__name__)

__all__ = [
    "Role",
    "ROLE_SYNONYMS",
    "SYMMETRY_TOLERANCE",
    "DEFAULT_GAMMA_LEARNING_RATE",
    "resolve_role",
    "MagnitudeHead",
    "Cosine",
    "Dot",
    "QNorm",
    "DNorm",
    "LearnableNorm",
    "HEADS",
    "make_head",
    "find_head",
    "attach_head",
    "gamma_learning_rate_mapping",
]

Role = Literal["query", "document"]

ROLE_SYNONYMS: dict[str, Role] = {
    "query": "query",
    "queries": "query",
    "question": "query",
    "document": "document",
    "documents": "document",
    "doc": "document",
    "passage": "document",
    "passages": "document",
    "corpus": "document",
}
"""Accepted ``task`` values (lower-cased) and the role each maps to. ST uses ``query``/``document``; mteb's
``PromptType`` values are ``query``/``document``; ``passage``/``corpus`` occur in E5 and BEIR code."""

SYMMETRY_TOLERANCE: float = 1e-6
"""|γ_q - γ_d| at or below this counts as equal: the head is then symmetric, s(a, b) = s(b, a)."""

DEFAULT_GAMMA_LEARNING_RATE: float = 1e-2
"""Learning rate for LearnableNorm's γ parameters (AdamW moves a parameter by about lr per step, so γ can
cross [0, 1] in ~100 steps; the encoder's ~2e-5 would move it by < 0.01 in a few hundred steps)."""


def resolve_role(task: Any) -> Role | None:
    """Map a ``task`` value to ``"query"``, ``"document"`` or ``None`` (no role given).

    Raises:
        UnknownRoleError: for any other value (e.g. ``"sts"``, ``"anchor"``), instead of guessing.
    """
    if task is None:
        return None
    if isinstance(task, str):
        role = ROLE_SYNONYMS.get(task.strip().lower())
        if role is not None:
            return role
    raise UnknownRoleError(task, dict(ROLE_SYNONYMS))


def _as_float(value: float | Tensor) -> float:
    return float(value.detach()) if isinstance(value, Tensor) else float(value)


def _real_scalar(value: Any) -> float | None:
    """``float(value)`` for a real scalar (Python, numpy or a one-element non-bool tensor), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Tensor) and value.numel() == 1 and value.dtype != torch.bool and not value.is_complex():
        return float(value.detach().reshape(()))
    return None


def _check_unit_interval(name: str, value: Any) -> float:
    scalar = _real_scalar(value)
    if scalar is None:
        raise HeadConfigError(f"{name} must be a number in [0, 1], got {value!r} ({type(value).__name__}).")
    value = scalar
    if not 0.0 <= value <= 1.0 or math.isnan(value):
        raise HeadConfigError(f"{name} must lie in [0, 1] (1 = normalized side, 0 = raw side), got {value}.")
    return value


def _check_positive(name: str, value: Any) -> float:
    scalar = _real_scalar(value)
    if scalar is None:
        raise HeadConfigError(f"{name} must be a positive number, got {value!r} ({type(value).__name__}).")
    value = scalar
    if not (value > 0.0 and math.isfinite(value)):
        raise HeadConfigError(f"{name} must be a finite number > 0, got {value}.")
    return value


class MagnitudeHead(Module):
    """Base class of the magnitude heads: ``x -> scale_r * x / max(‖x‖, eps) ** γ_r`` per role r.

    Subclasses fix or learn γ per role. The module reads its role from the ``task`` keyword (set by
    ``encode_query``/``encode_document``/``encode(task=...)``) or from ``features["task"]`` (stamped by
    the trainer's data collator when ``router_mapping`` is set).

    Args:
        query_scale: fixed multiplier of query outputs (norm calibration, see
            :func:`st_magnitude.calibration.calibrate_head`); 1.0 = none.
        document_scale: the same for documents.
        eps: floor on ‖x‖ (default 1e-12), so a zero vector gives zero, not NaN.

    Input/output: ``features["sentence_embedding"]`` of shape ``(batch, dim)`` is replaced in place.

    Raises (in ``forward``):
        MissingTaskError: if the head is asymmetric and no role is given.
        UnknownRoleError: if ``task`` is not a query/document synonym.
        NonFiniteEmbeddingError: if the pooled embedding holds NaN/inf.
    """

    forward_kwargs: ClassVar[set[str]] = {"task"}
    config_keys: ClassVar[list[str]] = ["query_scale", "document_scale", "eps"]
    name: ClassVar[str] = "head"

    def __init__(self, query_scale: float = 1.0, document_scale: float = 1.0, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.query_scale = _check_positive("query_scale", query_scale)
        self.document_scale = _check_positive("document_scale", document_scale)
        self.eps = _check_positive("eps", eps)

    # --- γ per role -------------------------------------------------------------------------------------
    def gamma(self, role: Role) -> float | Tensor:
        """γ for ``role``: a float for fixed heads, a differentiable 0-d tensor for LearnableNorm."""
        raise NotImplementedError

    @property
    def gamma_query(self) -> float:
        """γ_q as a Python float (1 = queries normalized, 0 = raw)."""
        return _as_float(self.gamma("query"))

    @property
    def gamma_document(self) -> float:
        """γ_d as a Python float (1 = documents normalized, 0 = raw)."""
        return _as_float(self.gamma("document"))

    def scale(self, role: Role | None) -> float:
        """Fixed output multiplier for ``role``; for no role (symmetric use) the geometric mean of both."""
        if role == "query":
            return self.query_scale
        if role == "document":
            return self.document_scale
        return math.sqrt(self.query_scale * self.document_scale)

    @property
    def is_symmetric(self) -> bool:
        """True when γ_q and γ_d agree within :data:`SYMMETRY_TOLERANCE`, so s(a, b) = s(b, a).

        Per-role scales do not break symmetry: they multiply every score by the same constant.
        """
        return abs(self.gamma_query - self.gamma_document) <= SYMMETRY_TOLERANCE

    @property
    def keeps_magnitude(self) -> bool:
        """True if at least one side is not fully normalized (γ < 1), i.e. scores must be dot products."""
        return min(self.gamma_query, self.gamma_document) < 1.0 - SYMMETRY_TOLERANCE

    @property
    def similarity_fn_name(self) -> Literal["cosine", "dot"]:
        """The similarity ST/mteb must use: ``"dot"`` whenever a magnitude is kept (cosine would erase it)."""
        return "dot" if self.keeps_magnitude else "cosine"

    # --- forward ----------------------------------------------------------------------------------------
    def forward(self, features: dict[str, Any], task: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """Apply the head to ``features["sentence_embedding"]`` (``(batch, dim)``) for the given role."""
        if task is None:
            task = features.get("task")
        role = resolve_role(task)
        if role is None and not self.is_symmetric:
            raise MissingTaskError(self.describe())
        gamma = self.gamma(role or "query")
        features["sentence_embedding"] = magnitude_normalize(
            features["sentence_embedding"], gamma, eps=self.eps, scale=self.scale(role)
        )
        return features

    def describe(self) -> str:
        """Short human-readable description, e.g. ``QNorm(γ_q=1, γ_d=0)``."""
        return f"{type(self).__name__}(γ_q={self.gamma_query:.4g}, γ_d={self.gamma_document:.4g})"

    def extra_repr(self) -> str:
        scales = ""
        if self.query_scale != 1.0 or self.document_scale != 1.0:
            scales = f", query_scale={self.query_scale:.6g}, document_scale={self.document_scale:.6g}"
        return f"gamma_query={self.gamma_query:.6g}, gamma_document={self.gamma_document:.6g}{scales}"

    # --- save / load -------------------------------------------------------------------------------------
    def get_config_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.config_keys}

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        """Write the head's configuration (γ values and scales included) to ``output_path/config.json``."""
        self.save_config(output_path)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> Self:
        """Load from a saved model folder or Hub repo, validating the config.

        Unknown keys are ignored with a warning (forward compatibility, as ST does); a missing or invalid
        value raises :class:`HeadConfigError` naming the file, so nothing loads half-configured.
        """
        hub_kwargs = {
            k: kwargs[k] for k in ("token", "cache_folder", "revision", "local_files_only") if k in kwargs
        }
        source = f"{model_name_or_path}/{subfolder}".rstrip("/")
        try:
            config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub_kwargs)
        except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
            raise HeadConfigError(f"{source}/config.json is not valid JSON ({exc}); re-save the model.") from None
        if not config:
            raise HeadConfigError(
                f"{source}: the head's config.json is missing or empty, so its γ values and scales are unknown; "
                "re-save the model with st-magnitude (model.save) or restore the file."
            )
        return cls.from_config(config, source=source)

    @classmethod
    def from_config(cls, config: dict[str, Any], source: str = "<dict>") -> Self:
        """Build the head from a config dict (see :meth:`load`); raises :class:`HeadConfigError`."""
        if not isinstance(config, dict):
            raise HeadConfigError(f"{source}: head config must be a JSON object, got {type(config).__name__}.")
        unknown = sorted(set(config) - set(cls.config_keys))
        if unknown:
            warnings.warn(
                f"{source}: ignoring unknown {cls.__name__} config keys {unknown} (written by a newer "
                "st-magnitude?).",
                stacklevel=2,
            )
        missing = sorted(set(cls._required_keys()) - set(config))
        if missing:
            raise HeadConfigError(
                f"{source}: {cls.__name__} config is missing required keys {missing}; re-save the model with "
                "st-magnitude or restore the file."
            )
        try:
            return cls(**{k: v for k, v in config.items() if k in cls.config_keys})
        except HeadConfigError as exc:
            raise HeadConfigError(f"{source}: {exc}") from None

    @classmethod
    def _required_keys(cls) -> list[str]:
        return []


class Cosine(MagnitudeHead):
    """Both sides unit-normalized: s = q̂·d̂ (the usual cosine similarity). Symmetric; needs no role.

    Example::

        model = SentenceTransformer(modules=[transformer, pooling, Cosine()])
    """

    name = "cosine"

    def gamma(self, role: Role) -> float:
        return 1.0


class Dot(MagnitudeHead):
    """Neither side normalized: s = q·d (raw inner product, both magnitudes kept). Symmetric."""

    name = "dot"

    def gamma(self, role: Role) -> float:
        return 0.0


class QNorm(MagnitudeHead):
    """Query normalized, document magnitude kept: s = q̂·d (arXiv:2602.09229). Asymmetric: needs a role.

    Document magnitude changes the ranking (a document-prior); retrieval/RAG only.

    Example::

        model = attach_head(SentenceTransformer(path), QNorm())
        q = model.encode_query(["what is magnitude?"])      # unit norm
        d = model.encode_document(["Magnitude is ..."])     # raw norm kept
    """

    name = "qnorm"

    def gamma(self, role: Role) -> float:
        return 1.0 if role == "query" else 0.0


class DNorm(MagnitudeHead):
    """Document normalized, query magnitude kept: s = q·d̂ (arXiv:2602.09229). Asymmetric: needs a role.

    Query magnitude does not change a query's ranking at inference, but in training it is a per-query
    temperature τ/‖q‖ (gradient size).
    """

    name = "dnorm"

    def gamma(self, role: Role) -> float:
        return 0.0 if role == "query" else 1.0


class _ProjectedClamp(torch.autograd.Function):
    """clamp(θ, 0, 1) whose gradient is blocked only when descent would push θ further outside [0, 1].

    A plain clamp (or a sigmoid at γ = 1) has zero gradient at the boundary, so γ initialised at 1 could
    never move. Here, at θ ≥ 1 a gradient that *lowers* θ passes; one that raises it is blocked.
    """

    @staticmethod
    def forward(ctx: Any, theta: Tensor) -> Tensor:
        ctx.save_for_backward(theta)
        return theta.clamp(0.0, 1.0)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (theta,) = ctx.saved_tensors
        # Gradient descent moves θ by -grad: block growth past 1 (grad < 0) and shrinkage past 0 (grad > 0).
        blocked = ((theta >= 1.0) & (grad < 0)) | ((theta <= 0.0) & (grad > 0))
        return torch.where(blocked, torch.zeros_like(grad), grad)


class LearnableNorm(MagnitudeHead):
    """Learned partial normalization ``x / ‖x‖^γ`` with one γ ∈ [0, 1] per side (arXiv:2602.09229).

    γ = 1 reproduces a normalized side exactly and γ = 0 a raw side, so ``LearnableNorm(1, 0)`` equals
    ``QNorm()`` and ``LearnableNorm(0, 1)`` equals ``DNorm()``.

    Default initialization γ_q = γ_d = 1: the geometry a cosine-trained model (MiniLM, E5, BGE) was
    trained in, so step 0 reproduces the base model exactly and training moves away only if magnitude
    helps. γ is stored as a free parameter θ and used as clamp(θ, 0, 1) with a projected gradient (a
    gradient that pushes γ back inside [0, 1] always passes), so γ can leave the boundary value 1.
    Give γ its own learning rate: ``learning_rate_mapping=gamma_learning_rate_mapping()`` (default
    :data:`DEFAULT_GAMMA_LEARNING_RATE` = 1e-2).

    Args:
        gamma_query: initial γ_q in [0, 1] (default 1.0).
        gamma_document: initial γ_d in [0, 1] (default 1.0).
        trainable: whether γ receives gradients (default True).
        query_scale, document_scale, eps: see :class:`MagnitudeHead`.

    Raises:
        HeadConfigError: if a γ is outside [0, 1] or not a number.

    Example::

        head = LearnableNorm()
        model = attach_head(SentenceTransformer(path), head)
        args = SentenceTransformerTrainingArguments(..., learning_rate_mapping=gamma_learning_rate_mapping(),
                                                    router_mapping={"anchor": "query", "positive": "document"})
        ...; print(head.gamma_query, head.gamma_document)
    """

    name = "learnable"
    config_keys: ClassVar[list[str]] = [
        "gamma_query",
        "gamma_document",
        "trainable",
        "query_scale",
        "document_scale",
        "eps",
    ]
    PARAMETER_PATTERN: ClassVar[str] = r"raw_gamma_(query|document)$"
    """Regex matching the γ parameters' names, for ST's ``learning_rate_mapping``."""

    def __init__(
        self,
        gamma_query: float = 1.0,
        gamma_document: float = 1.0,
        trainable: bool = True,
        query_scale: float = 1.0,
        document_scale: float = 1.0,
        eps: float = DEFAULT_EPS,
    ) -> None:
        super().__init__(query_scale=query_scale, document_scale=document_scale, eps=eps)
        if not isinstance(trainable, bool):
            raise HeadConfigError(f"trainable must be true or false, got {trainable!r}.")
        gq = _check_unit_interval("gamma_query", gamma_query)
        gd = _check_unit_interval("gamma_document", gamma_document)
        self.trainable = trainable
        self.raw_gamma_query = torch.nn.Parameter(torch.tensor(gq, dtype=torch.float32), requires_grad=trainable)
        self.raw_gamma_document = torch.nn.Parameter(
            torch.tensor(gd, dtype=torch.float32), requires_grad=trainable
        )

    @classmethod
    def _required_keys(cls) -> list[str]:
        return ["gamma_query", "gamma_document"]

    def gamma(self, role: Role) -> Tensor:
        raw = self.raw_gamma_query if role == "query" else self.raw_gamma_document
        if not bool(torch.isfinite(raw.detach())):
            raise HeadConfigError(
                f"LearnableNorm γ_{role} is {float(raw.detach())}: training diverged (or the γ learning rate is not a "
                "finite positive number). Lower the γ learning rate (learning_rate_mapping) and retrain."
            )
        return _ProjectedClamp.apply(raw)

    @property
    def similarity_fn_name(self) -> Literal["cosine", "dot"]:
        """Always ``"dot"``: γ moves during training, and at γ = 1 the dot product of unit vectors is cosine anyway."""
        return "dot"

    def get_config_dict(self) -> dict[str, Any]:
        config = super().get_config_dict()
        # Store the clamped value actually used in forward, as a plain float: exact on reload.
        config["gamma_query"] = self.gamma_query
        config["gamma_document"] = self.gamma_document
        return config

    def describe(self) -> str:
        return f"LearnableNorm(γ_q={self.gamma_query:.4g}, γ_d={self.gamma_document:.4g})"


HEADS: dict[str, type[MagnitudeHead]] = {
    "cosine": Cosine,
    "dot": Dot,
    "qnorm": QNorm,
    "dnorm": DNorm,
    "learnable": LearnableNorm,
}
"""Head classes by their CLI name."""


def make_head(name: str, **kwargs: Any) -> MagnitudeHead:
    """Build a head from its CLI name (``cosine``, ``dot``, ``qnorm``, ``dnorm``, ``learnable``).

    Raises:
        ValueError: for an unknown name, listing the valid ones.
    """
    key = name.strip().lower()
    if key not in HEADS:
        raise ValueError(f"Unknown head {name!r}; choose one of {sorted(HEADS)}.")
    return HEADS[key](**kwargs)


def find_head(model: SentenceTransformer) -> MagnitudeHead | None:
    """Return the model's magnitude head (its last module if it is one), else None."""
    modules = list(model.children())
    if modules and isinstance(modules[-1], MagnitudeHead):
        return modules[-1]
    return None


def attach_head(
    model: SentenceTransformer,
    head: MagnitudeHead,
    calibrate_on: Any = None,
    n: int = 512,
) -> SentenceTransformer:
    """Put ``head`` at the end of ``model`` and set the similarity function it needs. Modifies ``model``.

    Removes trailing ST ``Normalize`` modules (E5/MiniLM/BGE end with one; it would erase magnitude) and
    a previously attached magnitude head, appends ``head`` and sets ``model.similarity_fn_name`` to
    ``head.similarity_fn_name`` (``"dot"`` whenever a side keeps its magnitude, else ST's
    ``similarity()`` and mteb would re-normalize both sides). Saving then records both, so
    ``SentenceTransformer(path)`` restores the head and the similarity function.

    Args:
        model: any ST model (Contriever-style without Normalize, E5/MiniLM-style with one).
        head: the head to attach.
        calibrate_on: optional texts to calibrate the raw side(s) to unit mean norm on (a dataset with
            anchor/positive columns or a ``(queries, documents)`` pair); see
            :func:`st_magnitude.calibration.calibrate_head`. None = no calibration (scales stay as given).
        n: texts sampled per side for calibration.

    Returns:
        The same ``model`` object.

    Raises:
        TypeError: if ``head`` is not a :class:`MagnitudeHead`.
        ValueError / TypeError: bad ``calibrate_on`` (see :func:`~st_magnitude.calibration.calibrate_head`),
            checked before ``model`` is changed.
    """
    from sentence_transformers.base.modules import Normalize

    if not isinstance(head, MagnitudeHead):
        raise TypeError(f"attach_head expects a MagnitudeHead (Cosine, Dot, QNorm, DNorm, LearnableNorm), got {head!r}.")
    plan = None
    if calibrate_on is not None:
        from st_magnitude.calibration import _count, check_calibration_input

        n = _count("n", n)
        plan = check_calibration_input(head, calibrate_on)  # bad input raises before the model is changed
    while len(model) > 0 and isinstance(model[len(model) - 1], (Normalize, MagnitudeHead)):
        removed = model[len(model) - 1]
        del model[len(model) - 1]
        logger.info("attach_head: removed trailing %s", type(removed).__name__)
    model.append(head)
    model.similarity_fn_name = head.similarity_fn_name
    card_data = getattr(model, "model_card_data", None)
    if card_data is not None and hasattr(card_data, "ir_model"):
        # ST's model card then shows encode_query/encode_document, which asymmetric heads need.
        card_data.ir_model = True
    if plan is not None:
        from st_magnitude.calibration import CALIBRATION_BATCH_SIZE, CALIBRATION_SEED, _calibrate

        _calibrate(model, head, plan, n=n, batch_size=CALIBRATION_BATCH_SIZE, seed=CALIBRATION_SEED)
    return model


def gamma_learning_rate_mapping(learning_rate: float = DEFAULT_GAMMA_LEARNING_RATE) -> dict[str, float]:
    """``learning_rate_mapping`` entry giving LearnableNorm's γ its own learning rate in ST's trainer."""
    return {LearnableNorm.PARAMETER_PATTERN: float(learning_rate)}
