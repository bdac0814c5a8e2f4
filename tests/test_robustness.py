"""Robustness catalogue: one test per bad input; the behaviour is documented in docs/robustness.md.

Every case ends in a clear error or a documented, tested behaviour.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from st_magnitude.errors import DataValidationError, MissingTaskError, NonFiniteEmbeddingError, UnknownRoleError
from st_magnitude.functional import dot_scores, magnitude_normalize
from st_magnitude.heads import Dot, LearnableNorm, QNorm, attach_head
from st_magnitude.losses import MagnitudeInfoNCELoss

ROUTER = {"anchor": "query", "positive": "document", "negative": "document"}


def _tiny(tiny_bert_dir, head, dropout: bool = True):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    config = {} if dropout else {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    transformer = Transformer(str(tiny_bert_dir), max_seq_length=64, config_kwargs=config)
    return attach_head(SentenceTransformer(modules=[transformer, Pooling(32, pooling_mode="mean")], device="cpu"), head)


def _train(model, data: dict, router_mapping, tmp_path, **kwargs):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    defaults = dict(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, report_to="none",
        save_strategy="no", use_cpu=True, disable_tqdm=True, router_mapping=router_mapping, seed=0,
    )
    defaults.update(kwargs.pop("args", {}))
    trainer = SentenceTransformerTrainer(
        model=model, args=SentenceTransformerTrainingArguments(**defaults), train_dataset=Dataset.from_dict(data),
        loss=MagnitudeInfoNCELoss(model), **kwargs,
    )
    return trainer


PAIRS = {"anchor": ["a cat", "heart diet"], "positive": ["the cat in the house", "a diet for the heart"]}


# ---- inputs at encode time -------------------------------------------------------------------------------
def test_empty_string_gets_special_token_embedding(tiny_model):
    """'' encodes to the embedding of [CLS] [SEP] (finite, non-zero), exactly like an explicit ' '."""
    model = attach_head(tiny_model, QNorm())
    empty = model.encode_document(["", "cat"], convert_to_tensor=True)
    space = model.encode_document([" "], convert_to_tensor=True)
    assert torch.isfinite(empty).all() and float(empty[0].norm()) > 0
    torch.testing.assert_close(empty[0], space[0], rtol=0, atol=1e-5)  # batch padding: last-bit differences
    assert float(model.encode_query([""], convert_to_tensor=True).norm()) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("batch", [["a cat", None], [1, 2], ["ok", 3.5]], ids=["none", "ints", "float"])
def test_non_string_inputs_are_refused(tiny_model, batch):
    model = attach_head(tiny_model, QNorm())
    with pytest.raises(ValueError, match=r"Unsupported input type: (NoneType|int|float)"):
        model.encode_query(batch)


def test_long_text_is_truncated_to_max_seq_length(tiny_model):
    """Texts longer than max_seq_length (64 tokens here, 256 for MiniLM) are cut; the tail has no effect."""
    model = attach_head(tiny_model, QNorm())
    words = ("cat dog house car tree river city music book water " * 10).split()  # 100 words, > 62 tokens
    long_a = " ".join(words)
    long_b = " ".join(words + ["heart"] * 50)
    tokens = model.tokenize([long_a])["input_ids"]
    assert tokens.shape[1] == model.max_seq_length == 64
    a, b = model.encode_document([long_a, long_b], convert_to_tensor=True)
    assert torch.equal(a, b)


@pytest.mark.parametrize("task", ["sts", "anchor", "classification", 3])
def test_unknown_role_is_refused(tiny_model, task):
    model = attach_head(tiny_model, QNorm())
    with pytest.raises(UnknownRoleError, match=r"Unknown role task="):
        model.encode(["a cat"], task=task)


def test_role_synonyms_map_to_roles(tiny_model):
    model = attach_head(tiny_model, QNorm())
    assert torch.equal(model.encode(["cat"], task="passage", convert_to_tensor=True),
                       model.encode_document(["cat"], convert_to_tensor=True))


# ---- training inputs ---------------------------------------------------------------------------------------
def test_missing_router_mapping_fails_at_first_step(tiny_bert_dir, tmp_path):
    trainer = _train(_tiny(tiny_bert_dir, QNorm()), PAIRS, None, tmp_path)
    with pytest.raises(MissingTaskError, match="router_mapping"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_misnamed_columns_fail_at_first_step(tiny_bert_dir, tmp_path):
    """router_mapping keys that match no column leave every column without a role."""
    data = {"question": PAIRS["anchor"], "answer": PAIRS["positive"]}
    trainer = _train(_tiny(tiny_bert_dir, QNorm()), data, ROUTER, tmp_path)
    with pytest.raises(MissingTaskError, match="router_mapping"):
        trainer.train()


def test_columns_in_wrong_order_fail(tiny_bert_dir, tmp_path):
    data = {"positive": PAIRS["positive"], "anchor": PAIRS["anchor"]}
    trainer = _train(_tiny(tiny_bert_dir, QNorm()), data, ROUTER, tmp_path)
    with pytest.raises((DataValidationError, ValueError), match="anchor"):
        trainer.train()


# ---- embeddings and precision ------------------------------------------------------------------------------
def test_zero_embedding_stays_zero():
    x = torch.zeros(2, 3)
    for gamma in (0.0, 0.5, 1.0):
        assert torch.equal(magnitude_normalize(x, gamma), x)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_inf_embeddings_raise(bad):
    x = torch.tensor([[1.0, 2.0], [bad, 0.0]])
    with pytest.raises(NonFiniteEmbeddingError, match=r"1 embedding\(s\) contain NaN or inf"):
        magnitude_normalize(x, 1.0)
    head = QNorm()
    with pytest.raises(NonFiniteEmbeddingError):
        head({"sentence_embedding": x}, task="document")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_norms_do_not_overflow(dtype):
    """‖x‖² = 4·300² = 360000 overflows fp16 (max 65504); the norm is taken in float32, so x/‖x‖ = 0.5 exactly."""
    x = torch.full((1, 4), 300.0, dtype=dtype)
    assert torch.isinf((x * x).sum()) if dtype == torch.float16 else True
    out = magnitude_normalize(x, 1.0)
    assert out.dtype == dtype
    assert torch.equal(out.float(), torch.full((1, 4), 0.5))
    half = magnitude_normalize(x, 0.5)  # output norm = ‖x‖^0.5 = sqrt(600)
    assert float(half.float().norm()) == pytest.approx(600 ** 0.5, rel=1e-2)


def test_fp16_scores_that_overflow_raise():
    """Raw (Dot) fp16 embeddings whose dot product exceeds 65504 give inf scores: refused, not ranked."""
    q = torch.full((1, 4), 200.0, dtype=torch.float16)
    d = torch.full((2, 4), 200.0, dtype=torch.float16)  # q·d = 160000 > 65504
    with pytest.raises(NonFiniteEmbeddingError, match="score row"):
        dot_scores(q, d)
    assert torch.equal(dot_scores(q.float(), d.float()), torch.full((1, 2), 160000.0))


# ---- evaluation data ---------------------------------------------------------------------------------------
def _beir(tmp_path: Path, qrels: str) -> Path:
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": "d1", "title": "", "text": "a cat"}, {"_id": "d2", "title": "Dogs", "text": "a dog"}]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "cat"}) + "\n" + json.dumps({"_id": "q2", "text": "dog"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return folder


def test_qrels_pointing_at_missing_documents_are_dropped_and_counted(tmp_path, caplog):
    from st_magnitude.data import load_beir

    folder = _beir(tmp_path, "q1\td1\t1\nq1\td404\t1\nq2\td405\t1\n")
    with caplog.at_level("WARNING"):
        data = load_beir(folder, split="test")
    assert data.qrels == {"q1": {"d1": 1}}  # q2 judged only a missing document: no longer evaluated
    assert data.queries == {"q1": "cat"}
    assert data.report["dropped_qrels"]["unknown_doc"] == 2
    assert any("dropped during validation" in r.getMessage() for r in caplog.records)


def test_empty_eval_set_raises(tmp_path):
    from st_magnitude.data import load_beir

    with pytest.raises(DataValidationError, match="has no query with a relevant, non-empty document"):
        load_beir(_beir(tmp_path, ""), split="test")
    with pytest.raises(DataValidationError, match="has no query with a relevant"):
        load_beir(_beir(tmp_path / "b", "q1\td404\t1\n"), split="test")


# ---- killed training, resumed -----------------------------------------------------------------------------
class _Killed(Exception):
    pass


def test_killed_run_resumes_from_last_checkpoint(tiny_bert_dir, tmp_path):
    """Kill after step 3 (checkpoint at step 2), resume: steps 3 and 4 run once each, and the result equals an
    uninterrupted run (losses within 1e-5, weights and γ within 1e-5)."""
    from transformers import TrainerCallback

    words = "cat dog house car tree river city music".split()
    data = {"anchor": [f"{w} {v}" for w, v in zip(words, words[1:] + words[:1])],
            "positive": [f"the {w} and the {v}" for w, v in zip(words, words[1:] + words[:1])]}
    args = dict(max_steps=4, per_device_train_batch_size=4, save_strategy="steps", save_steps=2, logging_steps=1,
                learning_rate=1e-3)

    class Steps(TrainerCallback):
        def __init__(self, kill_at=None):
            self.done, self.kill_at = [], kill_at

        def on_step_end(self, args, state, control, **kwargs):
            self.done.append(state.global_step)
            if state.global_step == self.kill_at:
                raise _Killed

    def trained(out, callback, resume=False):
        torch.manual_seed(0)
        model = _tiny(tiny_bert_dir, LearnableNorm(0.9, 1.0), dropout=False)
        trainer = _train(model, data, ROUTER, tmp_path, args={**args, "output_dir": str(out)}, callbacks=[callback])
        trainer.train(resume_from_checkpoint=resume or None)
        return model, trainer

    full_cb = Steps()
    full, full_trainer = trained(tmp_path / "full", full_cb)
    killed_cb = Steps(kill_at=3)
    with pytest.raises(_Killed):
        trained(tmp_path / "run", killed_cb)
    assert killed_cb.done == [1, 2, 3] and (tmp_path / "run" / "checkpoint-2").is_dir()
    resumed_cb = Steps()
    resumed, trainer = trained(tmp_path / "run", resumed_cb, resume=True)

    assert full_cb.done == [1, 2, 3, 4]
    assert resumed_cb.done == [3, 4]  # step 3 (not checkpointed) redone once; 1-2 not repeated
    logged = [e["step"] for e in trainer.state.log_history if "loss" in e]
    assert logged == [1, 2, 3, 4]
    full_losses = [e["loss"] for e in full_trainer.state.log_history if "loss" in e]
    resumed_losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    np.testing.assert_allclose(resumed_losses, full_losses, atol=1e-5)
    head_full, head_resumed = full[len(full) - 1], resumed[len(resumed) - 1]
    assert head_full.gamma_query != pytest.approx(0.9, abs=1e-4)  # γ moved, so restoring it matters
    assert head_resumed.gamma_query == pytest.approx(head_full.gamma_query, abs=1e-5)
    assert head_resumed.gamma_document == pytest.approx(head_full.gamma_document, abs=1e-5)
    for (name, p), (_, p_ref) in zip(resumed.named_parameters(), full.named_parameters()):
        torch.testing.assert_close(p, p_ref, rtol=0, atol=1e-5, msg=name)
