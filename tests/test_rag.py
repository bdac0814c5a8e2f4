"""rag-eval: SQuAD normalization, answer/gold recall, NDCG, head-applied encoding, reader plumbing, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from st_magnitude.heads import Cosine, QNorm, attach_head
from st_magnitude.rag import (
    QAData,
    encode_with_heads,
    evaluate_rag,
    exact_match_score,
    f1_score,
    has_answer,
    load_generator,
    load_qa,
    normalize_answer,
    retrieval_metrics,
    run_reader,
)

from conftest import requires_real


def test_normalize_answer_matches_squad_script() -> None:
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("Levi's Stadium") == "levis stadium"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words


def test_has_answer_whole_tokens() -> None:
    passage = normalize_answer("In 1990, the team won 100 games.")
    assert has_answer(passage, [normalize_answer("1990")])
    assert has_answer(passage, ["won 100"])
    assert not has_answer(passage, ["10"])  # not inside "100"
    assert not has_answer(passage, [""])


def test_em_f1_squad_definitions() -> None:
    assert exact_match_score("the Denver Broncos", ["Denver Broncos", "Broncos"]) == 1.0
    assert exact_match_score("Broncos team", ["Denver Broncos"]) == 0.0
    # pred {denver, broncos, team} vs gold {denver, broncos}: P = 2/3, R = 1, F1 = 0.8
    assert f1_score("Denver Broncos team", ["Denver Broncos"]) == pytest.approx(0.8)
    assert f1_score("Carolina", ["Denver Broncos", "Carolina Panthers"]) == pytest.approx(2 / 3)
    assert f1_score("", ["x"]) == 0.0


def _toy_data() -> QAData:
    return QAData(
        name="toy",
        doc_ids=["p0", "p1", "p2"],
        doc_texts=["t0", "t1", "t2"],
        passages=["The Broncos won in 2016.", "Carolina lost.", "Nothing here about it."],
        query_ids=["q0", "q1"],
        questions=["who won", "who lost"],
        gold={"q0": {"p0"}, "q1": {"p1"}},
        answers={"q0": ["Broncos"], "q1": ["Carolina", "the Panthers"]},
    )


def test_retrieval_metrics_known_values() -> None:
    data = _toy_data()
    # q0: gold p0 at rank 2 (answer also in p0); q1: gold p1 at rank 3, answer only in p1.
    ranked = np.array([[2, 0, 1] + [-1] * 7, [0, 2, 1] + [-1] * 7])
    m = retrieval_metrics(ranked, data, ks=(1, 2, 5))
    assert m["answer_recall@1"] == 0.0 and m["answer_recall@2"] == 0.5 and m["answer_recall@5"] == 1.0
    assert m["gold_recall@1"] == 0.0 and m["gold_recall@2"] == 0.5 and m["gold_recall@5"] == 1.0
    assert m["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / 2)
    # Answer-recall is lenient: an answer string in a non-gold passage counts.
    data.passages[2] = "Broncos again."
    m2 = retrieval_metrics(ranked, data, ks=(1,))
    assert m2["answer_recall@1"] == 0.5 and m2["gold_recall@1"] == 0.0


def test_encode_with_heads_equals_attached_head(tiny_model) -> None:
    questions, docs = ["gene protein", "free speech"], ["the cat dog", "protein cell gene study", "law school"]
    attach_head(tiny_model, Cosine())  # the model's own head is removed, then restored
    out = encode_with_heads(tiny_model, [QNorm(), Cosine()], questions, docs, show_progress_bar=False)
    assert type(tiny_model[len(tiny_model) - 1]).__name__ == "Cosine"
    for label, head in (("QNorm", QNorm()), ("Cosine", Cosine())):
        attach_head(tiny_model, head)
        np.testing.assert_allclose(out[label][0], tiny_model.encode_query(questions, convert_to_numpy=True), atol=1e-6)
        np.testing.assert_allclose(out[label][1], tiny_model.encode_document(docs, convert_to_numpy=True), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out["Cosine"][1], axis=1), 1.0, atol=1e-5)
    assert np.ptp(np.linalg.norm(out["QNorm"][1], axis=1)) > 1e-3


def test_evaluate_rag_ranks_like_brute_force(tiny_model) -> None:
    data = _toy_data()
    data.doc_texts = ["cat dog house", "protein cell gene", "free speech law"]
    data.questions = ["gene protein", "speech law"]
    res = evaluate_rag(tiny_model, data, heads=["qnorm", "cosine"], ks=(1, 3), show_progress_bar=False,
                       return_rankings=True)
    attach_head(tiny_model, QNorm())
    q = tiny_model.encode_query(data.questions, convert_to_numpy=True)
    d = tiny_model.encode_document(data.doc_texts, convert_to_numpy=True)
    np.testing.assert_array_equal(res["rankings"]["QNorm"][1][:, :3], np.argsort(-(q @ d.T), axis=1))
    assert set(res["heads"]) == {"QNorm", "Cosine"}
    assert res["heads"]["QNorm"]["gold_recall@3"] == 1.0  # every passage is in the top 3 of 3


@pytest.fixture(scope="module")
def tiny_generator(tiny_bert_dir):
    """A random 1-layer GPT-2 built in-process on the tiny WordPiece tokenizer (the Hub is unreachable)."""
    import torch
    from transformers import BertTokenizerFast, GPT2Config, GPT2LMHeadModel

    tok = BertTokenizerFast.from_pretrained(str(tiny_bert_dir))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=tok.vocab_size, n_positions=512, n_embd=16, n_layer=1, n_head=2,
                                       bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
                                       pad_token_id=tok.pad_token_id))
    return model, tok


def test_reader_plumbing_with_tiny_in_process_model(tiny_generator) -> None:
    model, tok = tiny_generator
    generate = load_generator(model, tok, max_new_tokens=4)
    data = _toy_data()
    ranked = np.array([[0, 1, 2], [1, 0, 2]])
    out = run_reader(generate, data, ranked, reader_k=2)
    preds = out["predictions"]
    assert list(preds) == ["q0", "q1"] and all(isinstance(p, str) for p in preds.values())
    # Deterministic (greedy) and scored by the SQuAD definitions.
    assert generate([__import__("st_magnitude.rag", fromlist=["build_prompt"]).build_prompt(
        "who won", [data.passages[0], data.passages[1]])])[0] == preds["q0"]
    assert out["exact_match"] == pytest.approx(np.mean([exact_match_score(preds[q], data.answers[q]) for q in preds]))
    assert out["f1"] == pytest.approx(np.mean([f1_score(preds[q], data.answers[q]) for q in preds]))
    # With a stub generator that echoes the answer, EM = F1 = 1.
    perfect = run_reader(lambda ps: ["Broncos" if "who won" in p else "Carolina" for p in ps], data, ranked)
    assert perfect["exact_match"] == 1.0 and perfect["f1"] == 1.0


@requires_real
def test_load_qa_squad(data_dir) -> None:
    data = load_qa("qa-squad-dev", data_dir=data_dir)
    assert len(data.doc_ids) == 2067 and len(data.query_ids) == 10570
    q = data.query_ids[0]
    assert data.answers[q][0] == "Denver Broncos"
    gold_row = data.doc_ids.index(next(iter(data.gold[q])))
    assert has_answer(normalize_answer(data.passages[gold_row]), [normalize_answer(data.answers[q][0])])
    # Gold-passage ranking = answer-recall 1.0 and gold-recall 1.0 (every answer is in its gold paragraph).
    small = data.subsample(200)
    ranked = np.array([[small.doc_ids.index(next(iter(small.gold[q])))] + [-1] * 9 for q in small.query_ids])
    m = retrieval_metrics(ranked, small, ks=(1,))
    assert m["answer_recall@1"] == 1.0 and m["gold_recall@1"] == 1.0 and m["ndcg@10"] == 1.0


def test_cli_rag_eval_on_tiny_folder(tmp_path, tiny_bert_dir, tiny_model) -> None:
    from st_magnitude.cli import main

    folder = tmp_path / "qa"
    (folder / "qrels").mkdir(parents=True)
    docs = {"p0": "cat dog house", "p1": "protein cell gene", "p2": "free speech law"}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items()))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "gene protein"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tp1\t1\n")
    (folder / "answers.jsonl").write_text(json.dumps({"_id": "q0", "answers": ["cell"]}) + "\n")
    model_dir = tmp_path / "model"
    tiny_model.save(str(model_dir))
    rc = main(["rag-eval", "--model", str(model_dir), "--dataset", str(folder), "--k", "1,3", "--heads", "qnorm,cosine",
               "--output", str(tmp_path / "out"), "--quiet"])
    assert rc == 0
    res = json.loads((tmp_path / "out" / "rag_eval.json").read_text())
    for head in ("QNorm", "Cosine"):
        assert res["heads"][head]["answer_recall@3"] == 1.0 and res["heads"][head]["gold_recall@3"] == 1.0
    assert (tmp_path / "out" / "rag_eval.md").read_text().startswith("# rag-eval: qa (1 questions, 3 passages)")
