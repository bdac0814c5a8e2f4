"""Retrieval evaluation glue on top of sentence-transformers' ``InformationRetrievalEvaluator``.

Queries go through ``encode_query`` and documents through ``encode_document`` (so the head sees its role),
scores are plain dot products of the head outputs, and the metrics are ST's, not re-implemented. Note
that ST's evaluator computes NDCG with binary relevance (a judged document counts 1 whatever its grade),
unlike BEIR/mteb's graded NDCG; on sets with a single grade (SciFact, ArguAna) they coincide.
"""

from __future__ import annotations

from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
from torch import Tensor

from st_magnitude.data import BeirData
from st_magnitude.functional import dot_scores

__all__ = ["MagnitudeIREvaluator", "evaluate_retrieval", "REPORTED_METRICS"]

REPORTED_METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10")


class _DotExcludingIdentical:
    """Dot-product scores with the (query, document) pairs that share an id set to -inf.

    BEIR's ``ignore_identical_ids`` (ArguAna): a query that is itself a corpus document must not retrieve
    itself. Needs the whole corpus in one chunk so the mask lines up with the score matrix.
    """

    def __init__(self, query_ids: list[str], corpus_ids: list[str]) -> None:
        position = {cid: i for i, cid in enumerate(corpus_ids)}
        pairs = [(qi, position[q]) for qi, q in enumerate(query_ids) if q in position]
        self.rows = torch.tensor([p[0] for p in pairs], dtype=torch.long)
        self.cols = torch.tensor([p[1] for p in pairs], dtype=torch.long)
        self.shape = (len(query_ids), len(corpus_ids))

    def __call__(self, queries: Tensor, documents: Tensor) -> Tensor:
        scores = dot_scores(queries, documents)
        if tuple(scores.shape) != self.shape:
            raise RuntimeError(
                f"identical-id masking expects the full {self.shape} score matrix, got {tuple(scores.shape)}; "
                "keep corpus_chunk_size >= len(corpus)."
            )
        scores[self.rows.to(scores.device), self.cols.to(scores.device)] = float("-inf")
        return scores


class MagnitudeIREvaluator(InformationRetrievalEvaluator):
    """ST's ``InformationRetrievalEvaluator`` on a :class:`~st_magnitude.data.BeirData`, scoring with dot products.

    Dot products of the head outputs are the right score for every head (for Cosine they equal cosine).
    Adds BEIR's ``ignore_identical_ids``. Reports NDCG@10, MRR@10, Recall@{1,3,5,10,100}, MAP@100 under
    the score-function name ``dot`` (metric keys like ``<name>_dot_ndcg@10``).

    Args:
        data: the retrieval set.
        name: evaluator name (default: the dataset name).
        batch_size: encoding batch size.
        query_prompt, document_prompt: prompts prepended at encoding time (E5: ``"query: "``,
            ``"passage: "``); None uses the model's ``prompts["query"]``/``["document"]`` if set.
        show_progress_bar: show encoding progress.
        **kwargs: passed to ``InformationRetrievalEvaluator``.
    """

    def __init__(
        self,
        data: BeirData,
        name: str | None = None,
        batch_size: int = 64,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        show_progress_bar: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("precision_recall_at_k", [1, 3, 5, 10, 100])
        kwargs.setdefault("mrr_at_k", [10])
        kwargs.setdefault("ndcg_at_k", [10])
        kwargs.setdefault("map_at_k", [100])
        super().__init__(
            queries=data.queries,
            corpus=data.corpus,
            relevant_docs=data.relevant_docs,
            name=name if name is not None else data.name,
            batch_size=batch_size,
            show_progress_bar=show_progress_bar,
            query_prompt=query_prompt,
            corpus_prompt=document_prompt,
            score_functions={"dot": dot_scores},
            main_score_function="dot",
            corpus_chunk_size=max(len(data.corpus), 1) if data.ignore_identical_ids else 50000,
            **kwargs,
        )
        self.ignore_identical_ids = data.ignore_identical_ids
        if data.ignore_identical_ids:
            self.score_functions = {"dot": _DotExcludingIdentical(self.queries_ids, self.corpus_ids)}


def evaluate_retrieval(
    model: SentenceTransformer,
    data: BeirData,
    batch_size: int = 64,
    query_prompt: str | None = None,
    document_prompt: str | None = None,
    show_progress_bar: bool = False,
) -> dict[str, float]:
    """Evaluate ``model`` on ``data``; returns ``{"ndcg@10", "recall@100", "mrr@10", "map@100", "recall@10"}``.

    Values are fractions in [0, 1] from ST's ``InformationRetrievalEvaluator`` (dot-product scores).
    """
    evaluator = MagnitudeIREvaluator(
        data,
        batch_size=batch_size,
        query_prompt=query_prompt,
        document_prompt=document_prompt,
        show_progress_bar=show_progress_bar,
        write_csv=False,
    )
    metrics = evaluator(model)
    prefix = f"{evaluator.name}_dot_"
    wanted = ("ndcg@10", "recall@100", "mrr@10", "map@100", "recall@10")
    return {key: float(metrics[prefix + key]) for key in wanted}
