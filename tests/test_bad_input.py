"""Bad inputs found by a break-it pass: each gives a clear error, never a silent wrong number."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from st_magnitude import LearnableNorm, QNorm, attach_head
from st_magnitude.ablation import AblationConfig
from st_magnitude.calibration import calibrate_head
from st_magnitude.data import load_beir, load_sts, load_training_triplets
from st_magnitude.errors import ConfigurationError, DataValidationError, HeadConfigError, UnknownRoleError
from st_magnitude.functional import cohens_d, magnitude_normalize
from st_magnitude.index import build_index, encode_corpus, search

from test_data import write_beir


def test_learnable_similarity_is_dot_after_gamma_moves(tiny_model, tmp_path: Path) -> None:
    from st_magnitude.models import load_model

    model = attach_head(tiny_model, LearnableNorm())
    assert model.similarity_fn_name == "dot"  # even at γ = 1: γ moves during training
    with torch.no_grad():
        model[-1].raw_gamma_document.fill_(0.0)
    q, d = model.encode_query(["cat dog"]), model.encode_document(["the dog is a cat river"])
    assert float(model.similarity(q, d).reshape(())) == pytest.approx(float((q @ d.T).reshape(())), rel=1e-6)
    model.save(str(tmp_path / "m"))
    assert load_model(str(tmp_path / "m")).similarity_fn_name == "dot"


def test_nan_gamma_raises(tiny_model) -> None:
    model = attach_head(tiny_model, LearnableNorm(0.5, 0.5))
    with torch.no_grad():
        model[-1].raw_gamma_query.fill_(float("nan"))
    with pytest.raises(HeadConfigError, match="diverged"):
        model.encode_query(["a b"])


def test_magnitude_normalize_input_checks() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        magnitude_normalize(torch.ones(1, 2), torch.tensor(float("nan")))
    with pytest.raises(TypeError, match="gamma"):
        magnitude_normalize(torch.ones(1, 2), True)
    with pytest.raises(TypeError, match="floating-point"):
        magnitude_normalize(torch.ones(1, 2, dtype=torch.int64), 1.0)
    big = torch.tensor([[1e20, 1e20]])  # ‖x‖² overflows float32
    assert torch.allclose(magnitude_normalize(big, 1.0), torch.tensor([[0.70710678, 0.70710678]]))
    with pytest.raises(ValueError, match="finite"):
        cohens_d([1.0, float("nan"), 3.0], [1.0, 2.0, 3.0])


def test_ablation_config_errors() -> None:
    for bad in (dict(heads=[]), dict(heads=["bogus"]), dict(max_steps=0), dict(batch_size=1),
                dict(temperature=float("inf")), dict(gamma_learning_rate=float("nan")), dict(eval_max_queries=0)):
        with pytest.raises(ConfigurationError):
            AblationConfig(**bad).validate()


def test_cli_reports_config_errors_without_traceback(capsys) -> None:
    from st_magnitude.cli import main

    assert main(["ablation", "--heads", "bogus"]) == 2
    assert "ConfigurationError: Unknown heads ['bogus']" in capsys.readouterr().err


def test_data_errors(tmp_path: Path) -> None:
    folder = tmp_path / "gz"
    folder.mkdir()
    (folder / "train.jsonl.gz").write_text('{"query": "a", "positive": "b"}\n')  # not gzip
    with pytest.raises(DataValidationError, match="gzip"):
        load_training_triplets(folder)
    rows = [{"query": "a", "positive": "b"}] + [{"query": f"q{i}", "positive": f"p{i}", "negative": f"n{i}"} for i in range(3)]
    (folder / "train.jsonl.gz").unlink()
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataValidationError, match="negative"):
        load_training_triplets(folder)
    beir = write_beir(tmp_path / "b", [{"_id": "d1", "text": "x"}], [{"_id": "q1", "text": "y"}], [("q1", "d1", "0.7")])
    with pytest.raises(DataValidationError, match="not an integer"):
        load_beir(beir)
    beir = write_beir(tmp_path / "c", [{"_id": "d1", "text": "x"}], [{"_id": "q1", "text": "y"}],
                      [("q1", "d1", 0), ("q1", "d1", 2)])
    with pytest.raises(DataValidationError, match="different grades"):
        load_beir(beir)
    sts = tmp_path / "sts"
    sts.mkdir()
    (sts / "test.tsv").write_text("sentence1\tsentence2\tscore\na\tb\tnan\nx\tz\t1.0\n")
    with pytest.raises(DataValidationError, match="not finite"):
        load_sts(sts)
    (sts / "test.tsv").write_text("sentence1\tsentence2\tscore\na\tb\t1.0\nx\tz\t1.0\n")
    with pytest.raises(DataValidationError, match="different gold scores"):
        load_sts(sts)


def test_index_and_calibration_argument_checks(tiny_model, tmp_path: Path) -> None:
    docs = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="hnsw_m"):
        build_index(docs, head="qnorm", kind="hnsw", hnsw_m=0)
    with pytest.raises(ValueError, match="nlist"):
        build_index(docs, head="qnorm", kind="ivf", nlist=100)
    index = build_index(docs, head="qnorm")
    with pytest.raises(ValueError, match="k must be"):
        search(index, docs[:2], 0)
    model = attach_head(tiny_model, QNorm())
    with pytest.raises(TypeError, match="single string"):
        build_index(model, "alpha beta")
    with pytest.raises(UnknownRoleError):
        encode_corpus(model, ["a b", "c"], tmp_path / "enc", role="bogus")
    passage = encode_corpus(model, ["cat dog", "protein gene cell"], tmp_path / "enc2", role="passage",
                            show_progress_bar=False)
    assert np.allclose(passage, model.encode_document(["cat dog", "protein gene cell"]), atol=1e-6)
    with pytest.raises(ValueError, match="two lists"):
        calibrate_head(model, ("what is x", "x is y"))
    with pytest.raises(ValueError, match="positive integer"):
        calibrate_head(model, (["a"], ["b"]), n=0)


def test_bad_head_config_json(tiny_model, tmp_path: Path) -> None:
    from st_magnitude.models import load_model

    attach_head(tiny_model, QNorm()).save(str(tmp_path / "m"))
    (tmp_path / "m" / "2_QNorm" / "config.json").write_text("{not json")
    with pytest.raises(HeadConfigError, match="not valid JSON"):
        load_model(str(tmp_path / "m"))
