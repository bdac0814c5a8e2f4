"""MagnitudeInfoNCELoss: exact values, recorded statistics, training through ST's trainer."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset

from st_magnitude import LearnableNorm, MagnitudeInfoNCELoss, MagnitudeLoggingCallback, QNorm, attach_head
from st_magnitude.errors import MissingTaskError
from st_magnitude.heads import gamma_learning_rate_mapping

ROUTER = {"anchor": "query", "positive": "document", "negative": "document"}


def test_loss_value_by_hand(tiny_model) -> None:
    loss = MagnitudeInfoNCELoss(attach_head(tiny_model, QNorm()), temperature=0.5)
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    # logits = q @ d.T / 0.5 = [[4, 0], [0, 2]]
    expected = -0.5 * ((4 - math.log(math.exp(4) + 1)) + (2 - math.log(1 + math.exp(2))))
    value = loss.compute_loss_from_embeddings([q, d], None)
    assert math.isclose(float(value), expected, rel_tol=1e-6)
    assert loss.temperature == 0.5 and loss.get_config_dict()["temperature"] == 0.5


def test_bad_temperature_and_scale_rejected(tiny_model) -> None:
    with pytest.raises(ValueError, match="temperature"):
        MagnitudeInfoNCELoss(tiny_model, temperature=0.0)
    with pytest.raises(ValueError, match="temperature"):
        MagnitudeInfoNCELoss(tiny_model, scale=20.0)


def test_statistics_recorded(tiny_model) -> None:
    model = attach_head(tiny_model, QNorm())
    loss = MagnitudeInfoNCELoss(model, temperature=0.05)
    q = torch.tensor([[3.0, 4.0], [0.6, 0.8]])  # norms 5, 1
    d_pos = torch.tensor([[2.0, 0.0], [0.0, 4.0]])  # norms 2, 4
    d_neg = torch.tensor([[6.0, 0.0], [0.0, 8.0]])  # norms 6, 8
    loss._record([q, d_pos, d_neg])
    stats = loss.pop_stats()
    assert stats["query_norm"] == pytest.approx(3.0)
    assert stats["pos_doc_norm"] == pytest.approx(3.0)
    # query 0 sees negatives of norm 4, 6, 8 (mean 6); query 1 sees 2, 6, 8 (mean 16/3)
    assert stats["neg_doc_norm"] == pytest.approx((6 + 16 / 3) / 2)
    assert stats["tau_eff"] == pytest.approx((0.05 / 5 + 0.05 / 1) / 2)
    assert loss.pop_stats() == {}


def _train(model, loss, router_mapping, steps: int = 4, lr_mapping=None):
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    rows = {
        "anchor": ["cat dog", "protein gene", "heart disease", "free speech", "river city", "music book"] * 2,
        "positive": ["the dog is a cat", "gene and protein", "disease of the heart", "speech is free",
                     "the city river", "a book of music"] * 2,
    }
    args = SentenceTransformerTrainingArguments(
        output_dir="/tmp/st_magnitude_test_train", max_steps=steps, per_device_train_batch_size=4,
        learning_rate=1e-3, logging_steps=2, save_strategy="no", report_to="none", use_cpu=True, seed=0,
        router_mapping=router_mapping, learning_rate_mapping=lr_mapping or {}, disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=Dataset.from_dict(rows), loss=loss,
        callbacks=[MagnitudeLoggingCallback(loss)],
    )
    trainer.train()
    return trainer


def test_training_changes_weights_and_logs_statistics(tiny_model) -> None:
    head = LearnableNorm()
    model = attach_head(tiny_model, head)
    before = model[0].auto_model.embeddings.word_embeddings.weight.detach().clone()
    loss = MagnitudeInfoNCELoss(model)
    trainer = _train(model, loss, ROUTER, lr_mapping=gamma_learning_rate_mapping(0.05))
    after = model[0].auto_model.embeddings.word_embeddings.weight.detach()
    assert not torch.equal(before, after)
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert [e["step"] for e in logged] == [2, 4]
    for entry in logged:
        for key in ("query_norm", "pos_doc_norm", "neg_doc_norm", "tau_eff", "gamma_query", "gamma_document"):
            assert key in entry and math.isfinite(entry[key])
    # γ_q = γ_d = 1 at start: outputs are unit vectors, so τ_eff = τ exactly in the first logged window
    # unless γ already moved; either way the logged γ equals the head's γ at the last step.
    assert logged[-1]["gamma_query"] == pytest.approx(head.gamma_query, abs=0.06)
    # the γ learning rate (0.05) is used, not the encoder's: a group with lr 0.05 exists
    lrs = sorted({g["initial_lr"] for g in trainer.optimizer.param_groups if "initial_lr" in g} |
                 {g.get("lr") for g in trainer.optimizer.param_groups})
    assert any(abs(lr - 0.05) < 1e-12 for lr in lrs if lr is not None)


def test_training_without_router_mapping_raises(tiny_model) -> None:
    model = attach_head(tiny_model, QNorm())
    with pytest.raises(MissingTaskError, match="router_mapping"):
        _train(model, MagnitudeInfoNCELoss(model), router_mapping={}, steps=1)


def _features(model, texts: list[str], task: str) -> dict:
    features = model.tokenize(texts)
    features["task"] = task
    return features


def test_single_column_batch_is_refused(tiny_model) -> None:
    from st_magnitude.errors import DataValidationError

    model = attach_head(tiny_model, QNorm())
    loss = MagnitudeInfoNCELoss(model)
    with pytest.raises(DataValidationError, match=r"1 column\(s\).*\(anchor, positive\)"):
        loss([_features(model, ["a question"], "query")])


def test_batch_of_one_warns_once_and_loss_is_zero(tiny_model, caplog) -> None:
    model = attach_head(tiny_model, QNorm())
    loss = MagnitudeInfoNCELoss(model)
    batch = [_features(model, ["a question"], "query"), _features(model, ["an answer"], "document")]
    with caplog.at_level("WARNING", logger="st_magnitude.losses"):
        first = loss(batch)
        loss(batch)
    assert float(first) == pytest.approx(0.0, abs=1e-6)  # softmax over one score
    assert sum("softmax over one score" in r.message for r in caplog.records) == 1
    # With a hard-negative column there are two candidates: no warning, a positive loss.
    caplog.clear()
    fresh = MagnitudeInfoNCELoss(model)
    with caplog.at_level("WARNING", logger="st_magnitude.losses"):
        value = fresh(batch + [_features(model, ["something else"], "document")])
    assert float(value) > 0
    assert not [r for r in caplog.records if r.name == "st_magnitude.losses"]
