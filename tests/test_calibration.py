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


def test_bad_input(tiny_model) -> None:
    with pytest.raises(TypeError, match="magnitude head"):
        calibrate_head(tiny_model, (QUERIES, DOCS))
    model = attach_head(tiny_model, QNorm())
    with pytest.raises(ValueError, match="no document texts"):
        calibrate_head(model, (QUERIES, []))
    with pytest.raises(ValueError, match="anchor\\|query"):
        calibrate_head(model, {"a": QUERIES, "b": DOCS})
