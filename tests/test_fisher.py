"""Tests of st_magnitude.fisher: hand-computed FIM spectra, vmap vs loop gradients, determinism, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import requires_real
from st_magnitude.fisher import (
    CONTEXT_HEADS,
    PooledEmbeddings,
    default_rtol,
    fisher_condition_number,
    fisher_eigenvalues,
    magnitude_signal,
    per_example_gradients,
    recommend_head,
    spectrum_report,
)

F64 = torch.float64


def _hand_case() -> PooledEmbeddings:
    # Two rows, q = 0 so every score is 0 and softmax = (1/2, 1/2) over (positive, negative).
    # Dot head, shift adapter b: s_c = (q+b)·(c+b), ∂s_c/∂b = q + c = c at b = 0, so
    # g = -(1/τ)[p - (p+n)/2] = -(1/(2τ))(p - n) = -10 (p - n) at τ = 0.05.
    q = torch.zeros(2, 2, dtype=F64)
    p = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=F64)
    n = torch.zeros(2, 2, dtype=F64)
    return PooledEmbeddings(q, p, n)


def test_hand_computed_linear_case_kappa_is_4() -> None:
    # g_1 = (-10, 0), g_2 = (0, -20) -> F = ½ diag(100, 400) = diag(50, 200) -> κ = 200/50 = 4.
    grads, losses = per_example_gradients(_hand_case(), "dot", params="pooled-shift", temperature=0.05, batch_size=1)
    assert torch.allclose(grads, torch.tensor([[-10.0, 0.0], [0.0, -20.0]], dtype=F64))
    assert torch.allclose(losses, torch.full((2,), math.log(2.0), dtype=F64))
    eig = fisher_eigenvalues(grads)
    np.testing.assert_allclose(eig, [200.0, 50.0], rtol=1e-12)
    summary = spectrum_report(eig, n_samples=2, n_params=2)
    assert summary["kappa"] == pytest.approx(4.0, rel=1e-12)
    assert summary["rank"] == 2
    assert summary["floor"] == pytest.approx(200.0 * 2 * np.finfo(np.float32).eps)
    # 99 % of the trace (250) needs both eigenvalues -> κ99 = 200 / 50 as well.
    assert summary["spectrum"]["k_99"] == 2 and summary["spectrum"]["kappa_99"] == pytest.approx(4.0)


def test_hand_computed_quadratic_case_with_affine_params() -> None:
    # Affine adapter a ⊙ x + b with q = (1, 1): s_c = (a⊙q + b)·(a⊙c + b).
    # ∂s_c/∂a = 2 q⊙c at a = 1 (both factors), ∂s_c/∂b = q + c. With p = (1, 0), n = (0, 1): s_p = s_n = 1,
    # π = (½, ½), g = -(1/τ)(∂s_p - ½∂s_p - ½∂s_n) = -10 (∂s_p - ∂s_n):
    #   ∂s_p - ∂s_n = (2(1,0) - 2(0,1), (2,1) - (1,2)) = (2, -2, 1, -1) -> g = (-20, 20, -10, 10).
    # One row -> F = g gᵀ, rank 1, λ = ‖g‖² = 1000, κ = 1 (one eigenvalue above the floor).
    emb = PooledEmbeddings(
        torch.tensor([[1.0, 1.0]], dtype=F64), torch.tensor([[1.0, 0.0]], dtype=F64), torch.tensor([[0.0, 1.0]], dtype=F64)
    )
    grads, _ = per_example_gradients(emb, "dot", params="pooled-affine", batch_size=1)
    assert torch.allclose(grads, torch.tensor([[-20.0, 20.0, -10.0, 10.0]], dtype=F64))
    summary = spectrum_report(fisher_eigenvalues(grads), n_samples=1, n_params=4)
    assert summary["lambda_max"] == pytest.approx(1000.0)
    assert summary["rank"] == 1
    assert summary["kappa"] == pytest.approx(1.0)


def test_floor_excludes_exact_null_direction() -> None:
    # Rows g = (1, 0, 0) and (0, 1e-3, 0): F = diag(0.5, 5e-7, 0); the third eigenvalue is exactly 0.
    grads = np.array([[1.0, 0.0, 0.0], [0.0, 1e-3, 0.0]])
    summary = spectrum_report(fisher_eigenvalues(grads), n_samples=2, n_params=3)
    assert summary["rank"] == 2
    assert summary["kappa"] == pytest.approx(0.5 / 5e-7)
    assert spectrum_report(fisher_eigenvalues(grads), 2, 3, rtol=1e-5)["rank"] == 1  # a coarser floor


def test_bootstrap_weights_equal_duplicated_rows() -> None:
    rng = np.random.default_rng(0)
    g = rng.normal(size=(5, 3))
    weights = np.array([2, 0, 1, 1, 3])
    np.testing.assert_allclose(fisher_eigenvalues(g, weights), fisher_eigenvalues(np.repeat(g, weights, axis=0)), rtol=1e-10)


@pytest.mark.parametrize("head", ["qnorm", "dnorm", "cosine", "dot"])
def test_vmap_gradients_equal_loop_autograd(head: str) -> None:
    """vmap(grad) per-example gradients equal a plain autograd loop over rows, in-batch negatives included."""
    from st_magnitude.heads import make_head

    def normalize(x: torch.Tensor, gamma: float) -> torch.Tensor:  # x / ‖x‖^γ in float64
        return x / x.norm(dim=-1, keepdim=True) ** gamma

    torch.manual_seed(0)
    n, dim, batch = 6, 4, 3
    emb = PooledEmbeddings(torch.randn(n, dim, dtype=F64) * 3, torch.randn(n, dim, dtype=F64) * 2, torch.randn(n, dim, dtype=F64))
    grads, losses = per_example_gradients(emb, head, params="pooled-affine", temperature=0.05, batch_size=batch)
    h = make_head(head)
    for i in range(n):
        start = (i // batch) * batch
        a = torch.ones(dim, dtype=F64, requires_grad=True)
        b = torch.zeros(dim, dtype=F64, requires_grad=True)
        q = normalize(emb.queries[i] * a + b, h.gamma_query)
        docs = torch.cat([emb.positives[start : start + batch], emb.negatives[start : start + batch]]) * a + b
        docs = normalize(docs, h.gamma_document)
        loss = torch.nn.functional.cross_entropy((docs @ q / 0.05)[None], torch.tensor([i - start]))
        loss.backward()
        assert float(losses[i]) == pytest.approx(loss.item(), rel=1e-10)
        assert torch.allclose(grads[i], torch.cat([a.grad, b.grad]), rtol=1e-9, atol=1e-12)


def _tiny_rows():
    from datasets import Dataset

    words = "protein cell gene disease vitamin diet heart cancer study result effect patients risk health food".split()
    rows = {"anchor": [], "positive": [], "negative": []}
    for i in range(24):
        rows["anchor"].append(f"{words[i % 15]} {words[(i * 2) % 15]} query")
        rows["positive"].append(f"the {words[i % 15]} document on {words[(i * 2) % 15]} and {words[(i * 3) % 15]}")
        rows["negative"].append(f"a passage about {words[(i + 5) % 15]} {words[(i * 7) % 15]}")
    return Dataset.from_dict(rows)


def test_cosine_global_scale_is_an_exact_null_direction(tiny_model) -> None:
    """Scaling every embedding (δa ∝ 1, δb = 0) leaves Cosine scores unchanged: g_i · (1, 0) = 0 exactly;
    under Dot the same direction multiplies every logit, so the gradient along it is non-zero."""
    rows = _tiny_rows()
    from st_magnitude.fisher import encode_pooled

    emb = encode_pooled(tiny_model, rows)
    dim = emb.dim
    direction = torch.cat([torch.ones(dim, dtype=F64), torch.zeros(dim, dtype=F64)])
    g_cos, _ = per_example_gradients(emb, "cosine", params="pooled-affine", batch_size=8)
    g_dot, _ = per_example_gradients(emb, "dot", params="pooled-affine", batch_size=8)
    assert float((g_cos @ direction).abs().max()) < 1e-9 * float(g_cos.abs().max())
    assert float((g_dot @ direction).abs().max()) > 1e-3 * float(g_dot.abs().max())


def test_recommendation_is_deterministic_for_a_fixed_seed(tiny_model) -> None:
    rows = _tiny_rows()
    first = recommend_head(tiny_model, rows, n_samples=20, batch_size=4, n_bootstrap=30, seed=3)
    second = recommend_head(tiny_model, rows, n_samples=20, batch_size=4, n_bootstrap=30, seed=3)
    a, b = first.to_dict(), second.to_dict()
    for d in (a, b):
        d.pop("seconds")
        for r in d["reports"].values():
            r.pop("seconds")
    assert a == b
    assert set(a["kappa"]) == set(CONTEXT_HEADS)
    assert a["recommended"] == ("qnorm" if first.kappa["qnorm"] <= first.kappa["dnorm"] else "dnorm")
    assert 0.0 <= first.confidence <= 1.0
    assert first.settings["n_samples"] == 20 and first.settings["n_batches"] == 5
    # Another seed samples other rows, so κ changes.
    other = recommend_head(tiny_model, rows, n_samples=20, batch_size=4, n_bootstrap=0, seed=4)
    assert other.kappa["qnorm"] != first.kappa["qnorm"]


def test_cli_writes_recommendation_json(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from st_magnitude.cli import main

    train_dir = tmp_path / "train-toy"
    train_dir.mkdir()
    rows = _tiny_rows()
    with open(train_dir / "train.jsonl", "w", encoding="utf-8") as handle:
        for q, p, n in zip(rows["anchor"], rows["positive"], rows["negative"]):
            handle.write(json.dumps({"query": q, "positive": p, "negative": n}) + "\n")
    out = tmp_path / "out"
    code = main(
        ["recommend", "--model", str(tiny_bert_dir), "--train", str(train_dir), "--samples", "16",
         "--batch-size", "4", "--bootstrap", "20", "--output", str(out)]
    )
    assert code == 0
    data = json.loads((out / "recommendation.json").read_text())
    assert {"kappa", "recommended", "confidence", "kappa_ci", "kappa_99", "rank", "recommended_by_kappa_99", "rule",
            "settings", "seconds", "reports"} <= set(data)
    assert set(data["kappa"]) == {"qnorm", "dnorm", "cosine", "dot"}
    assert data["recommended"] == min(("qnorm", "dnorm"), key=lambda h: data["kappa"][h])
    assert data["settings"]["n_samples"] == 16 and data["settings"]["params"] == "pooled-shift"
    rep = data["reports"]["qnorm"]
    assert {"kappa", "floor", "rank", "lambda_max", "lambda_min", "spectrum", "eigenvalues"} <= set(rep)
    assert rep["n_params"] == 32 and rep["n_eigenvalues"] == 16  # min(n = 16, P = dim = 32)
    assert rep["floor"] == pytest.approx(rep["lambda_max"] * default_rtol(16, 32))
    assert rep["kappa"] == pytest.approx(rep["lambda_max"] / rep["lambda_min"])
    assert (out / "recommendation.md").is_file()
    assert data["advice"] in ("cosine", data["recommended"])
    assert data["advice"] == (data["recommended"] if data["magnitude_signal"]["signal"] else "cosine")
    assert "Should I use magnitude at all?" in (out / "recommendation.md").read_text()


@requires_real
def test_minilm_cosine_null_direction_and_finite_kappa(minilm_path: str, data_dir: Path) -> None:
    """On the packaged MiniLM (16 scifact rows): the Cosine FIM has the exact global-scale null direction;
    the single-side heads' default (shift, P = 384) spectra give κ = λmax/λmin over 1..16 eigenvalues."""
    from st_magnitude.fisher import encode_pooled, _sample_rows
    from st_magnitude.models import load_model

    model = load_model(minilm_path)
    rows = _sample_rows("train-scifact", 16, seed=0, data_dir=data_dir)
    emb = encode_pooled(model, rows, max_seq_length=32)
    direction = torch.cat([torch.ones(emb.dim, dtype=F64), torch.zeros(emb.dim, dtype=F64)])
    g_cos, _ = per_example_gradients(emb, "cosine", params="pooled-affine", batch_size=8)
    assert float((g_cos @ direction).abs().max()) < 1e-9 * float(g_cos.abs().max())
    for head in ("qnorm", "dnorm"):
        rep = fisher_condition_number(None, head, None, embeddings=emb, batch_size=8)
        assert rep.n_params == 384 and rep.n_eigenvalues == 16 and 1 <= rep.rank <= 16
        assert math.isfinite(rep.kappa) and rep.kappa == pytest.approx(rep.lambda_max / rep.lambda_min)


def test_magnitude_signal_hand_case() -> None:
    # Batch of 2: row 0 (positive norm 3) and row 1 (positive norm 1). The hardest in-batch negative of query 0 is
    # row 1's positive and vice versa, so the groups are the same two norms: d = 0 exactly.
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], dtype=F64)
    p = torch.tensor([[3.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 4.0]], dtype=F64)
    out = magnitude_signal(PooledEmbeddings(q, p, None), batch_size=2, n_resamples=200)
    assert out["d"] == pytest.approx(0.0, abs=1e-12) and out["signal"] is False
    assert out["n_positive"] == 4 and out["n_negative"] == 4
    with pytest.raises(ValueError, match="batch_size >= 2"):
        magnitude_signal(PooledEmbeddings(q, p, None), batch_size=1)


def test_magnitude_signal_with_hard_negatives_detects_longer_positives() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(64, 8, generator=gen, dtype=F64)
    positives = q / q.norm(dim=1, keepdim=True) * (2.0 + 0.1 * torch.randn(64, 1, generator=gen, dtype=F64))
    hard = positives * 0.25  # hard negatives a quarter as long as their positives
    out = magnitude_signal(PooledEmbeddings(q, positives, hard), batch_size=8, n_resamples=300)
    assert out["n_negative"] == 64 + 64 and out["mean_norm_positive"] > out["mean_norm_negative"]
    assert out["d"] > 1.0 and out["ci_low"] >= 0.2 and out["signal"] is True
    assert "hard-negative column" in out["negatives"]
