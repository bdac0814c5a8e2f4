"""Real model, real data: the packaged all-MiniLM-L6-v2 on a subsample of SciFact from ../shared/data."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from conftest import requires_real
from st_magnitude import Cosine, QNorm, attach_head
from st_magnitude.data import BeirData, load_beir
from st_magnitude.evaluation import evaluate_retrieval
from st_magnitude.models import load_model

pytestmark = requires_real


@pytest.fixture(scope="module")
def scifact_subset(data_dir) -> BeirData:
    full = load_beir("beir-scifact", data_dir=data_dir)
    qids = sorted(full.queries)[:40]
    relevant = {d for q in qids for d in full.qrels[q]}
    rng = random.Random(0)
    others = rng.sample(sorted(set(full.corpus) - relevant), 160)
    corpus = {d: full.corpus[d] for d in sorted(relevant | set(others))}
    return BeirData("scifact-sub", "test", corpus, {q: full.queries[q] for q in qids}, {q: full.qrels[q] for q in qids})


def _ndcg10_by_hand(q: np.ndarray, d: np.ndarray, data: BeirData) -> float:
    doc_ids = list(data.corpus)
    total = 0.0
    for i, qid in enumerate(data.queries):
        order = np.argsort(-(d @ q[i]), kind="stable")[:10]
        rel = data.relevant_docs[qid]
        dcg = sum(1.0 / math.log2(r + 2) for r, j in enumerate(order) if doc_ids[j] in rel)
        idcg = sum(1.0 / math.log2(r + 2) for r in range(min(len(rel), 10)))
        total += dcg / idcg
    return total / len(data.queries)


def test_minilm_retrieval_scores(minilm_path: str, scifact_subset: BeirData) -> None:
    model = load_model(minilm_path)
    model.max_seq_length = 128
    texts = list(scifact_subset.corpus.values())[:8]
    reference = model.encode(texts)  # the base model ends with Normalize
    base = evaluate_retrieval(model, scifact_subset)
    # Real signal: the pretrained model finds SciFact evidence far above chance (~0.05 here).
    assert 0.6 < base["ndcg@10"] < 0.95

    attach_head(model, Cosine())
    assert np.allclose(model.encode(texts), reference, atol=1e-6)  # Cosine head == Normalize

    attach_head(model, QNorm())
    queries = list(scifact_subset.queries.values())
    q = model.encode_query(queries)
    d = model.encode_document(list(scifact_subset.corpus.values()))
    assert np.allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    assert np.linalg.norm(d, axis=1).std() > 0.05  # document magnitudes vary: they are kept
    qnorm = evaluate_retrieval(model, scifact_subset)
    assert qnorm["ndcg@10"] == pytest.approx(_ndcg10_by_hand(q, d, scifact_subset), abs=1e-6)
    assert qnorm["ndcg@10"] != pytest.approx(base["ndcg@10"], abs=1e-4)  # magnitude changes the ranking
