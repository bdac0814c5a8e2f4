"""mteb wrapper, local tasks and `st-magnitude evaluate`: roles, declared similarity, guard, cross-checks."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import requires_real
from scipy.stats import spearmanr

import mteb
from st_magnitude.data import load_beir
from st_magnitude.errors import SymmetryViolationError
from st_magnitude.evaluation import evaluate_retrieval
from st_magnitude.heads import Cosine, DNorm, Dot, LearnableNorm, QNorm, attach_head
from st_magnitude.mteb import (
    LocalRetrievalTask,
    LocalSTSTask,
    MagnitudeEncoder,
    evaluate,
    get_task,
    subsample_beir,
)

warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad")

_SENTENCES = [
    ("the cat is on the house", "a cat sits on the house", 4.5),
    ("the dog is in the river", "music of the sun and moon", 0.2),
    ("protein cell gene study", "gene study of the cell protein", 4.0),
    ("free speech is a right", "people should have free speech", 3.6),
    ("heart disease risk and diet", "diet and risk of heart disease", 4.8),
    ("the car is by the tree", "a book on water", 0.5),
    ("cancer patients health result", "health of cancer patients", 3.9),
    ("school policy and law", "fire in the city", 0.1),
]


def _write_sts(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["sentence1\tsentence2\tscore"] + [f"{a}\t{b}\t{s}" for a, b, s in _SENTENCES]
    (folder / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _write_beir(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    docs = {f"d{i}": b for i, (_, b, _) in enumerate(_SENTENCES)}
    docs.update({"x1": "the moon and the sun", "x2": "water fire river", "x3": "a house of music"})
    queries = {f"q{i}": a for i, (a, _, _) in enumerate(_SENTENCES)}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for doc_id, text in docs.items():
            handle.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as handle:
        for qid, text in queries.items():
            handle.write(json.dumps({"_id": qid, "text": text}) + "\n")
    rows = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in range(len(_SENTENCES))]
    (folder / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def _run(wrapper, tasks):
    return mteb.evaluate(wrapper, tasks, cache=None, show_progress_bar=False, overwrite_strategy="always")


# ---------------------------------------------------------------------------------------------------------------
# Wrapper unit tests (tiny random BERT)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "declared"),
    [(Cosine(), "cosine"), (Dot(), "dot"), (QNorm(), "dot"), (DNorm(), "dot"), (LearnableNorm(), "dot"),
     (LearnableNorm(0.5, 0.5), "dot")],
)
def test_declared_similarity(tiny_model, head, declared: str) -> None:
    from mteb.models.model_meta import ScoringFunction
    from mteb.models.models_protocols import EncoderProtocol

    wrapper = MagnitudeEncoder(attach_head(tiny_model, head))
    assert isinstance(wrapper, EncoderProtocol)
    assert wrapper.mteb_model_meta.similarity_fn_name is ScoringFunction(declared)
    a = torch.tensor([[3.0, 4.0]])
    b = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    expected = [[3.0, 8.0]] if declared == "dot" else [[0.6, 0.8]]
    assert torch.allclose(torch.as_tensor(wrapper.similarity(a, b)).float(), torch.tensor(expected))


def test_cosine_declared_on_magnitude_head_warns(tiny_model, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="st_magnitude.mteb"):
        wrapper = MagnitudeEncoder(attach_head(tiny_model, QNorm()), similarity_fn_name="cosine")
    assert wrapper.similarity_fn_name == "cosine"
    assert "magnitude is dropped" in caplog.text
    with pytest.raises(ValueError):
        MagnitudeEncoder(tiny_model, similarity_fn_name="euclidean")


def test_revision_fingerprint_tracks_weights_and_head(tiny_model) -> None:
    attach_head(tiny_model, QNorm())
    rev_q = MagnitudeEncoder(tiny_model).mteb_model_meta.revision
    assert MagnitudeEncoder(tiny_model).mteb_model_meta.revision == rev_q
    attach_head(tiny_model, DNorm())
    assert MagnitudeEncoder(tiny_model).mteb_model_meta.revision != rev_q


def test_roles_reach_the_head_through_mteb(tiny_model, tmp_path: Path) -> None:
    """mteb's query/document prompt types become encode_query/encode_document: the NDCG equals ST's evaluator."""
    attach_head(tiny_model, QNorm())
    task = LocalRetrievalTask(_write_beir(tmp_path / "toy-beir"))
    result = _run(MagnitudeEncoder(tiny_model), [task])
    ndcg_mteb = result.task_results[0].get_score()
    task.load_data()
    ndcg_st = evaluate_retrieval(tiny_model, load_beir(tmp_path / "toy-beir"))["ndcg@10"]
    assert ndcg_mteb == pytest.approx(ndcg_st, abs=1e-4)
    q = tiny_model.encode_query(["the cat is on the house"])
    d = tiny_model.encode_document(["a cat sits on the house"])
    assert np.linalg.norm(q) == pytest.approx(1.0, abs=1e-5)  # QNorm: queries unit norm
    assert abs(np.linalg.norm(d) - 1.0) > 1e-2  # documents keep their magnitude


def test_sts_task_with_dot_head_scores_dot_products(tiny_model, tmp_path: Path) -> None:
    attach_head(tiny_model, Dot())
    task = LocalSTSTask(_write_sts(tmp_path / "toy-sts"))
    result = _run(MagnitudeEncoder(tiny_model), [task])
    scores = result.task_results[0].scores["test"][0]
    a = tiny_model.encode([s[0] for s in _SENTENCES])
    b = tiny_model.encode([s[1] for s in _SENTENCES])
    expected = spearmanr([s[2] for s in _SENTENCES], np.sum(a * b, axis=1)).statistic
    assert task.metadata.main_score == "spearman"
    assert scores["main_score"] == pytest.approx(expected, abs=1e-4)


def test_guard_refuses_before_encoding(tiny_model, tmp_path: Path) -> None:
    attach_head(tiny_model, DNorm())
    calls = []
    original = tiny_model.encode
    tiny_model.encode = lambda *a, **k: calls.append(1) or original(*a, **k)  # type: ignore[method-assign]
    task = LocalSTSTask(_write_sts(tmp_path / "toy-sts"))
    with pytest.raises(SymmetryViolationError, match="toy-sts"):
        _run(MagnitudeEncoder(tiny_model), [task])
    with pytest.raises(SymmetryViolationError):
        evaluate(tiny_model, [task])
    assert calls == []


def test_opt_in_fallback_is_cosine_and_recorded(tiny_model, tmp_path: Path) -> None:
    task = LocalSTSTask(_write_sts(tmp_path / "toy-sts"))
    base = [s[2] for s in _SENTENCES]
    a_raw = tiny_model.encode([s[0] for s in _SENTENCES])  # no head yet: pooled embeddings
    b_raw = tiny_model.encode([s[1] for s in _SENTENCES])
    cos = np.sum(a_raw * b_raw, axis=1) / np.linalg.norm(a_raw, axis=1) / np.linalg.norm(b_raw, axis=1)
    attach_head(tiny_model, DNorm())
    summary = evaluate(tiny_model, [task], symmetric_fallback="cosine")
    res = summary["results"]["toy-sts"]
    assert res["symmetric_fallback"] == "cosine"
    assert res["head"] == "DNorm(γ_q=0, γ_d=1)"
    assert res["main_score"] == pytest.approx(spearmanr(base, cos).statistic, abs=1e-4)


def test_subsample_keeps_judged_documents(tmp_path: Path) -> None:
    data = load_beir(_write_beir(tmp_path / "toy-beir"))
    sub = subsample_beir(data, max_queries=3, max_docs=5, seed=1)
    assert len(sub.queries) == 3 and len(sub.corpus) == 5
    assert all(d in sub.corpus for docs in sub.qrels.values() for d in docs)
    assert subsample_beir(data, max_queries=3, max_docs=5, seed=1).corpus.keys() == sub.corpus.keys()


def test_get_task_resolves_local_folders(tmp_path: Path) -> None:
    assert isinstance(get_task(str(_write_beir(tmp_path / "b"))), LocalRetrievalTask)
    sts = get_task(str(_write_sts(tmp_path / "sick-toy")))
    assert isinstance(sts, LocalSTSTask) and (sts.min_score, sts.max_score) == (1, 5)
    assert get_task(str(tmp_path / "b"), max_queries=2, max_docs=4).metadata.name == "b-q2-d4-s0"


def test_cli_refuses_and_writes_nothing(tiny_model, tmp_path: Path, capsys) -> None:
    from st_magnitude.cli import main

    model_dir = tmp_path / "dnorm-model"
    attach_head(tiny_model, DNorm()).save(str(model_dir))
    sts = _write_sts(tmp_path / "toy-sts")
    out = tmp_path / "out"
    code = main(["evaluate", "--model", str(model_dir), "--tasks", str(sts), "--output", str(out)])
    assert code == 2
    assert "SymmetryViolationError" in capsys.readouterr().err
    assert not (out / "results.json").exists()
    code = main(["evaluate", "--model", str(model_dir), "--tasks", str(sts), "--output", str(out),
                 "--symmetric-fallback", "cosine"])
    assert code == 0
    written = json.loads((out / "results.json").read_text())
    assert written["results"]["toy-sts"]["symmetric_fallback"] == "cosine"
    assert -1.0 <= written["results"]["toy-sts"]["main_score"] <= 1.0


# ---------------------------------------------------------------------------------------------------------------
# Real model, real data: the cross-check that keeps the cosine/FAISS pitfall fixed
# ---------------------------------------------------------------------------------------------------------------
def _memoize_encode(model) -> None:
    """Reuse each (role, text) encoding so the four evaluations below encode the texts once (2 slow CPU cores).

    Only the transformer forward pass is shared; mteb's and ST's pipelines (roles, similarity, search, metrics)
    run unchanged.
    """
    original = model.encode
    memo: dict[tuple[str | None, str], np.ndarray] = {}

    def encode(inputs, task=None, convert_to_tensor=False, convert_to_numpy=True, **kwargs):
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        missing = [t for t in dict.fromkeys(texts) if (task, t) not in memo]
        if missing:
            kwargs.pop("show_progress_bar", None)
            out = original(missing, task=task, convert_to_numpy=True, show_progress_bar=False, **kwargs)
            memo.update({(task, t): e for t, e in zip(missing, out)})
        stacked = np.stack([memo[(task, t)] for t in texts])
        return torch.from_numpy(stacked) if convert_to_tensor else stacked

    model.encode = encode


@requires_real
def test_wrapper_ndcg_equals_st_evaluator_and_cosine_declared_differs(minilm_path: str, data_dir: Path) -> None:
    from mteb.models.search_encoder_index.search_indexes.faiss_search_index import FaissSearchIndex
    from mteb.models.search_wrappers import SearchEncoderWrapper

    from st_magnitude.models import load_model

    model = attach_head(load_model(minilm_path), QNorm())
    model.max_seq_length = 128
    _memoize_encode(model)
    task = LocalRetrievalTask("beir-scifact", max_queries=25, max_docs=150, seed=0, data_dir=data_dir)
    task.load_data()
    ndcg_st = evaluate_retrieval(model, task.beir_data)["ndcg@10"]

    dot_wrapper = MagnitudeEncoder(model)
    ndcg_dot = _run(dot_wrapper, [task]).task_results[0].get_score()
    faiss_dot = _run(SearchEncoderWrapper(dot_wrapper, index_backend=FaissSearchIndex(dot_wrapper)), [task])
    cos_wrapper = MagnitudeEncoder(model, similarity_fn_name="cosine")
    ndcg_cos = _run(cos_wrapper, [task]).task_results[0].get_score()
    faiss_cos = _run(SearchEncoderWrapper(cos_wrapper, index_backend=FaissSearchIndex(cos_wrapper)), [task])

    assert ndcg_dot == pytest.approx(ndcg_st, abs=1e-3)  # wrapper == ST's InformationRetrievalEvaluator
    assert faiss_dot.task_results[0].get_score() == pytest.approx(ndcg_st, abs=1e-3)  # FAISS, dot declared
    assert abs(ndcg_cos - ndcg_st) > 5e-3  # cosine declared: magnitude dropped, a different (wrong) number
    assert faiss_cos.task_results[0].get_score() == pytest.approx(ndcg_cos, abs=1e-3)  # FAISS re-normalizes too
