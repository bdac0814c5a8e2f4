"""Magnitude-aware InfoNCE loss and the callback that puts its statistics into the trainer's logs."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.losses.merged_forward import embed_columns
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.util import dot_score
from torch import Tensor
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from st_magnitude.functional import effective_temperature
from st_magnitude.errors import DataValidationError
from st_magnitude.heads import LearnableNorm, MagnitudeHead, find_head, resolve_role

__all__ = ["DEFAULT_TEMPERATURE", "MagnitudeInfoNCELoss", "MagnitudeLoggingCallback"]

logger = logging.getLogger(__name__)

DEFAULT_TEMPERATURE: float = 0.05
"""τ = 0.05, i.e. ST's ``MultipleNegativesRankingLoss`` scale of 20."""

STAT_KEYS: tuple[str, ...] = ("query_norm", "pos_doc_norm", "neg_doc_norm", "tau_eff", "gamma_query", "gamma_document")


class MagnitudeInfoNCELoss(MultipleNegativesRankingLoss):
    """InfoNCE with in-batch (and optional hard) negatives on *dot products of the head outputs* over τ.

    Given (anchor, positive[, negative_1, ..., negative_k]) rows, for query i the loss is
    ``-log softmax_j(q_i · d_j / τ)[i]`` over every positive and hard negative in the batch, exactly ST's
    :class:`MultipleNegativesRankingLoss` with ``similarity_fct=dot_score`` and ``scale=1/τ``. The loss does
    no normalization of its own: the model's magnitude head (Cosine, Dot, QNorm, DNorm, LearnableNorm)
    alone decides which side is normalized. With a raw query side, ``q·d/τ = q̂·d / (τ/‖q‖)``, so the query
    norm acts as a per-query temperature τ_eff = τ/‖q‖.

    Each training forward records, averaged until the next logging step: mean ‖q‖ (``query_norm``),
    mean ‖d+‖ (``pos_doc_norm``), mean ‖d-‖ over every negative each query is scored against, in-batch and
    hard (``neg_doc_norm``), mean τ/‖q‖ (``tau_eff``) and, for LearnableNorm, ``gamma_query`` and
    ``gamma_document``. Add :class:`MagnitudeLoggingCallback` to the trainer to get them into its logs.

    Args:
        model: a SentenceTransformer whose last module is a :class:`~st_magnitude.heads.MagnitudeHead`.
        temperature: τ > 0 (default 0.05 = ST's scale 20).
        gather_across_devices: gather embeddings across DDP processes with gradients (ST's
            ``all_gather_with_grad``) so every process sees the global batch of negatives.
        **kwargs: passed to :class:`MultipleNegativesRankingLoss` (``directions``, ``hardness_mode``, ...).

    References:
        - van den Oord et al., 2018, "Representation Learning with Contrastive Predictive Coding" (InfoNCE).
        - arXiv:2602.09229, "Beyond the Unit Hypersphere: Embedding Magnitude in Contrastive Learning".

    Requirements:
        1. (query, document) pairs or (query, document, hard negative...) triplets.
        2. ``router_mapping={"anchor": "query", "positive": "document", "negative": "document"}`` in the
           training arguments whenever the head is asymmetric (QNorm, DNorm, LearnableNorm); otherwise the
           head raises :class:`~st_magnitude.errors.MissingTaskError` at the first step.

    Inputs:
        +-------------------------------------------------+--------+
        | Texts                                           | Labels |
        +=================================================+========+
        | (anchor, positive) pairs                        | none   |
        +-------------------------------------------------+--------+
        | (anchor, positive, negative) triplets           | none   |
        +-------------------------------------------------+--------+
        | (anchor, positive, negative_1, ..., negative_n) | none   |
        +-------------------------------------------------+--------+

    Recommendations:
        - Use ``BatchSamplers.NO_DUPLICATES`` so in-batch negatives are not accidental positives.
        - Calibrate the raw side (:func:`st_magnitude.calibration.calibrate_head`) when starting from a
          cosine-trained model: raw norms of ~5-10 turn τ = 0.05 into a far sharper softmax at step 0.

    Relations:
        - Equals :class:`MultipleNegativesRankingLoss` (cosine) when the head is :class:`~st_magnitude.heads.Cosine`.

    Example::

        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
        from sentence_transformers import SentenceTransformerTrainingArguments
        from st_magnitude import QNorm, attach_head, MagnitudeInfoNCELoss, MagnitudeLoggingCallback

        model = attach_head(SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2"), QNorm())
        loss = MagnitudeInfoNCELoss(model, temperature=0.05)
        args = SentenceTransformerTrainingArguments(
            output_dir="out", router_mapping={"anchor": "query", "positive": "document", "negative": "document"}
        )
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=triplets, loss=loss,
                                             callbacks=[MagnitudeLoggingCallback(loss)])
        trainer.train()
    """

    def __init__(
        self,
        model: SentenceTransformer,
        temperature: float = DEFAULT_TEMPERATURE,
        gather_across_devices: bool = False,
        **kwargs: Any,
    ) -> None:
        if not (isinstance(temperature, (int, float)) and temperature > 0):
            raise ValueError(f"temperature must be a number > 0 (e.g. 0.05), got {temperature!r}.")
        if "similarity_fct" in kwargs or "scale" in kwargs:
            raise ValueError(
                "MagnitudeInfoNCELoss always scores with dot products over temperature: pass `temperature`, not "
                "`scale`/`similarity_fct` (the head decides what is normalized)."
            )
        super().__init__(
            model, scale=1.0 / float(temperature), similarity_fct=dot_score,
            gather_across_devices=gather_across_devices, **kwargs,
        )
        self.tau = float(temperature)
        self._sums: dict[str, float] = {}
        self._count = 0
        self._warned_single_candidate = False
        self.latest_stats: dict[str, float] = {}

    # ------------------------------------------------------------------------------------------------
    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        """Embed every column (one forward for the anchors, one merged forward for the candidates),
        record the magnitude statistics, and return the InfoNCE loss (a scalar tensor)."""
        sentence_features = list(sentence_features)
        _check_column_roles(sentence_features)
        embeddings = embed_columns(self.model, sentence_features)
        candidates = sum(e.shape[0] for e in embeddings[1:])
        if candidates < 2 and not self._warned_single_candidate:
            self._warned_single_candidate = True
            logger.warning(
                "A batch of %d query with %d candidate document gives InfoNCE a softmax over one score: the loss "
                "is 0 and carries no gradient. Use batch_size >= 2, a hard-negative column, or drop_last=True "
                "(dataloader_drop_last in the training arguments). Warned once.",
                embeddings[0].shape[0], candidates,
            )
        if self.training or torch.is_grad_enabled():
            self._record(embeddings)
        return self.compute_loss_from_embeddings(embeddings, labels)

    @torch.no_grad()
    def _record(self, embeddings: list[Tensor]) -> None:
        queries = embeddings[0].detach().float()
        docs = [e.detach().float() for e in embeddings[1:]]
        batch = queries.shape[0]
        doc_norms = torch.linalg.vector_norm(torch.cat(docs, dim=0), dim=-1)  # (batch * (1 + k),)
        own_positive = torch.zeros(batch, doc_norms.shape[0], dtype=torch.bool, device=doc_norms.device)
        own_positive[torch.arange(batch), torch.arange(batch)] = True
        neg_counts = (~own_positive).sum(dim=1).clamp_min(1)
        neg_means = (doc_norms.unsqueeze(0) * (~own_positive)).sum(dim=1) / neg_counts
        stats = {
            "query_norm": float(torch.linalg.vector_norm(queries, dim=-1).mean()),
            "pos_doc_norm": float(doc_norms[:batch].mean()),
            "neg_doc_norm": float(neg_means.mean()) if doc_norms.shape[0] > 1 else float("nan"),
            "tau_eff": float(effective_temperature(queries, self.tau).mean()),
        }
        head = self.head
        if isinstance(head, LearnableNorm):
            stats["gamma_query"] = head.gamma_query
            stats["gamma_document"] = head.gamma_document
        for key, value in stats.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
        self._count += 1
        self.latest_stats = stats

    @property
    def head(self) -> MagnitudeHead | None:
        """The model's magnitude head (unwrapping DDP/compile wrappers), or None."""
        model = self.model
        while hasattr(model, "module") and not isinstance(model, SentenceTransformer):
            model = model.module
        return find_head(model) if isinstance(model, SentenceTransformer) else None

    def pop_stats(self) -> dict[str, float]:
        """Mean of each statistic over the forwards since the last call, then reset. Empty if none."""
        if not self._count:
            return {}
        means = {key: round(value / self._count, 6) for key, value in self._sums.items()}
        self._sums, self._count = {}, 0
        return means

    @property
    def temperature(self) -> float:
        return self.tau

    def get_config_dict(self) -> dict[str, Any]:
        config = super().get_config_dict()
        config.pop("scale", None)
        config["temperature"] = self.tau
        return config


def _check_column_roles(sentence_features: list[dict[str, Any]]) -> None:
    """Raise if the roles stamped by ``router_mapping`` contradict InfoNCE's layout (query first, then documents)."""
    if len(sentence_features) < 2:
        raise DataValidationError(
            f"InfoNCE needs a query column and at least one document column, but the batch has "
            f"{len(sentence_features)} column(s). Give the dataset (anchor, positive) or (anchor, positive, negative) "
            "columns, e.g. st_magnitude.data.load_training_triplets(...)."
        )
    roles = [resolve_role(features.get("task")) for features in sentence_features]
    if roles[0] == "document" or "query" in roles[1:]:
        raise DataValidationError(
            f"The training columns reach the loss with roles {roles}, but InfoNCE needs the query column first and "
            "documents after it. Put the anchor/query column first in the dataset (e.g. "
            "dataset.select_columns(['anchor', 'positive', 'negative'])) and map it to 'query' in router_mapping."
        )


class MagnitudeLoggingCallback(TrainerCallback):
    """Adds a :class:`MagnitudeInfoNCELoss`'s statistics to every training log entry.

    The values (``query_norm``, ``pos_doc_norm``, ``neg_doc_norm``, ``tau_eff`` and, for LearnableNorm,
    ``gamma_query``/``gamma_document``) are means over the steps since the previous log, written into the
    ``logs`` passed to later callbacks (progress printer) and into ``trainer.state.log_history``.
    Pass it as ``SentenceTransformerTrainer(..., callbacks=[MagnitudeLoggingCallback(loss)])``.
    """

    def __init__(self, loss: MagnitudeInfoNCELoss) -> None:
        if not isinstance(loss, MagnitudeInfoNCELoss):
            raise TypeError(f"MagnitudeLoggingCallback needs a MagnitudeInfoNCELoss, got {type(loss).__name__}.")
        self.loss = loss

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs is None or "loss" not in logs:
            return
        stats = self.loss.pop_stats()
        if not stats:
            return
        logs.update(stats)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(stats)
