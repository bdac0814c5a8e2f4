"""Hand-computed checks of the pure maths in st_magnitude.functional."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from st_magnitude.errors import NonFiniteEmbeddingError
from st_magnitude.functional import cohens_d, dot_scores, effective_temperature, magnitude_normalize


def test_gamma_limits_match_normalize_and_identity() -> None:
    x = torch.tensor([[3.0, 4.0], [0.0, 2.0]])
    assert torch.equal(magnitude_normalize(x, 0.0), x)
    assert torch.allclose(magnitude_normalize(x, 1.0), torch.nn.functional.normalize(x, dim=-1), atol=0, rtol=0)
    # Tensor gammas at the limits agree to 1e-6 with the float short-cuts.
    assert torch.allclose(magnitude_normalize(x, torch.tensor(1.0)), torch.nn.functional.normalize(x, dim=-1), atol=1e-6)
    assert torch.allclose(magnitude_normalize(x, torch.tensor(0.0)), x, atol=1e-6)


def test_half_gamma_by_hand() -> None:
    x = torch.tensor([[3.0, 4.0]])  # ‖x‖ = 5
    out = magnitude_normalize(x, 0.5)
    assert torch.allclose(out, torch.tensor([[3.0 / math.sqrt(5), 4.0 / math.sqrt(5)]]), atol=1e-7)
    assert math.isclose(float(out.norm()), math.sqrt(5), rel_tol=1e-6)  # ‖x‖^(1-γ)


def test_scale_multiplies_output() -> None:
    x = torch.tensor([[3.0, 4.0]])
    assert torch.allclose(magnitude_normalize(x, 0.0, scale=0.2), torch.tensor([[0.6, 0.8]]))


def test_zero_vector_gives_zero_not_nan() -> None:
    x = torch.zeros(2, 3)
    for gamma in (0.0, 0.3, 1.0, torch.tensor(0.7)):
        out = magnitude_normalize(x, gamma)
        assert torch.equal(out, torch.zeros(2, 3))


def test_non_finite_input_raises() -> None:
    with pytest.raises(NonFiniteEmbeddingError, match="NaN or inf"):
        magnitude_normalize(torch.tensor([[1.0, float("nan")], [1.0, 2.0]]), 1.0)
    with pytest.raises(NonFiniteEmbeddingError, match="1 embedding"):
        magnitude_normalize(torch.tensor([[1.0, float("inf")], [1.0, 2.0]]), 0.5)


def test_half_precision_norm_does_not_overflow() -> None:
    # ‖x‖² = 2 * 300² = 180000 > fp16 max (65504): a naive fp16 norm would be inf.
    x = torch.tensor([[300.0, 300.0]], dtype=torch.float16)
    out = magnitude_normalize(x, 1.0)
    assert out.dtype == torch.float16
    assert torch.allclose(out.float(), torch.tensor([[0.70710678, 0.70710678]]), atol=1e-3)


def test_gamma_out_of_range_raises() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        magnitude_normalize(torch.ones(1, 2), 1.5)


def test_dot_scores_and_effective_temperature() -> None:
    q = torch.tensor([[3.0, 4.0]])
    d = torch.tensor([[0.0, 2.0], [1.0, 0.0]])
    assert torch.equal(dot_scores(q, d), torch.tensor([[8.0, 3.0]]))
    assert torch.allclose(effective_temperature(q, 0.05), torch.tensor([0.01]))


def test_cohens_d_by_hand() -> None:
    a, b = [2.0, 4.0, 6.0], [1.0, 2.0, 3.0]
    # means 4 and 2; sample variances 4 and 1; pooled sd = sqrt((2*4 + 2*1)/4) = sqrt(2.5)
    assert math.isclose(cohens_d(a, b), 2.0 / math.sqrt(2.5), rel_tol=1e-12)
    assert math.isclose(cohens_d(b, a), -2.0 / math.sqrt(2.5), rel_tol=1e-12)
    with pytest.raises(ValueError, match="at least 2"):
        cohens_d([1.0], np.array([1.0, 2.0]))
