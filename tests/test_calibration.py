"""Norm calibration: exact unit mean norm on the sample, saved and restored, rankings unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from st_magnitude import Cosine, DNorm, LearnableNorm, QNorm, attach_head
from st_magnitude.calibration import calibrate_head
from st_magnitude.models import load_model

QUERIES = ["cat dog", "protein gene", "heart disease", "free speech", "river city"]
DOCS = ["the dog is a cat", "gene and protein study", "disease of the heart", "speech is free", "a city river",
        "a book of music and the sun"]


def test_qnorm_documents_calibrated_to_unit_mean(tiny_model, tmp_path) -> None:
    model = attach_head(tiny_model, QNorm())
    before = model.encode_document(DOCS)
    scores_before = model.encode_query(QUERIES) @ before.T
    info = calibrate_head(model, (QUERIES, DOCS))
    assert info["query_scale"] == 1.0  # the normalized side is left alone
    after = model.encode_document(DOCS)
    assert np.linalg.norm(after, axis=1).mean() == pytest.approx(1.0, abs=1e-5)
    assert info["document_mean_norm"] == pytest.approx(np.linalg.norm(before, axis=1).mean(), rel=1e-6)
    # relative magnitudes and the ranking are kept
    scores_after = model.encode_query(QUERIES) @ after.T
    assert np.array_equal(np.argsort(-scores_before, axis=1), np.argsort(-scores_after, axis=1))
    model.save(str(tmp_path / "m"))
    loaded = load_model(str(tmp_path / "m"))
    assert loaded[-1].document_scale == pytest.approx(info["document_scale"], rel=0, abs=0)
    assert np.array_equal(loaded.encode_document(DOCS), after)


def test_dnorm_and_learnable_and_dataset_input(tiny_model) -> None:
    from datasets import Dataset

    rows = Dataset.from_dict({"anchor": QUERIES, "positive": DOCS[:5]})
    model = attach_head(tiny_model, DNorm(), calibrate_on=rows)
    assert model[-1].document_scale == 1.0
    assert np.linalg.norm(model.encode_query(QUERIES), axis=1).mean() == pytest.approx(1.0, abs=1e-5)
    attach_head(model, LearnableNorm(0.5, 0.5), calibrate_on=(QUERIES, DOCS))
    assert np.linalg.norm(model.encode_query(QUERIES), axis=1).mean() == pytest.approx(1.0, abs=1e-5)
    assert np.linalg.norm(model.encode_document(DOCS), axis=1).mean() == pytest.approx(1.0, abs=1e-5)
    info = calibrate_head(attach_head(model, Cosine()), (QUERIES, DOCS))
    assert (info["query_scale"], info["document_scale"]) == (1.0, 1.0)
    info = calibrate_head(attach_head(model, Cosine(query_scale=20.0, document_scale=20.0)), (QUERIES, DOCS))
    assert (info["query_scale"], info["document_scale"]) == (20.0, 20.0)  # user scales of normalized sides kept


def test_bad_input(tiny_model) -> None:
    with pytest.raises(TypeError, match="magnitude head"):
        calibrate_head(tiny_model, (QUERIES, DOCS))
    model = attach_head(tiny_model, QNorm())
    with pytest.raises(ValueError, match="no non-empty document texts"):
        calibrate_head(model, (QUERIES, []))
    with pytest.raises(ValueError, match="no document column \\(positive\\|document"):
        calibrate_head(model, {"a": QUERIES, "b": DOCS})
    # a column holding one string is not split into characters
    with pytest.raises(ValueError, match="single str, not a list of texts"):
        calibrate_head(model, {"anchor": "what is a cat", "positive": "a cat is an animal"})
    with pytest.raises(ValueError, match="None; give a list"):
        calibrate_head(model, (QUERIES, None))
    with pytest.raises(TypeError, match=r"calibrate_on\[1\] \(documents\)\[2\] is None"):
        calibrate_head(model, (QUERIES, DOCS[:2] + [None]))
    with pytest.raises(ValueError, match="pass one split"):
        from datasets import Dataset, DatasetDict

        calibrate_head(model, DatasetDict({"train": Dataset.from_dict({"anchor": QUERIES, "positive": DOCS[:5]})}))


def test_failed_calibration_leaves_head_and_model_unchanged(tiny_model) -> None:
    from st_magnitude import Dot

    model = attach_head(tiny_model, Dot(), calibrate_on=(QUERIES, DOCS))
    scales = (model[-1].query_scale, model[-1].document_scale)
    assert scales[0] != 1.0 and scales[1] != 1.0
    with pytest.raises(ValueError, match="no non-empty document texts"):
        calibrate_head(model, (QUERIES, ["  "]))
    assert (model[-1].query_scale, model[-1].document_scale) == scales
    # attach_head checks calibrate_on before touching the model
    modules_before = [type(m).__name__ for m in model]
    with pytest.raises(ValueError, match="no query column"):
        attach_head(model, DNorm(), calibrate_on={"positive": DOCS})
    assert [type(m).__name__ for m in model] == modules_before and isinstance(model[-1], Dot)


def test_only_needed_side_and_normalized_side_untouched(tiny_model) -> None:
    from datasets import Dataset

    # DNorm keeps only the query magnitude: a query column alone is enough; empty texts are skipped and counted
    model = attach_head(tiny_model, DNorm(document_scale=3.0))
    info = calibrate_head(model, Dataset.from_dict({"anchor": QUERIES + ["", "  "]}), n=np.int64(50))
    assert info["n_queries"] == 5 and info["skipped_empty"] == 2 and info["n_documents"] == 0
    assert model[-1].document_scale == 3.0 and info["document_scale"] == 3.0  # normalized side left as set
    assert np.linalg.norm(model.encode_query(QUERIES), axis=1).mean() == pytest.approx(1.0, abs=1e-5)
    model.train()
    calibrate_head(model, (QUERIES, []))
    assert model.training  # train/eval mode restored
