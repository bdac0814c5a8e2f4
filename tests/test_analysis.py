"""Magnitude diagnostics: Cohen's d with bootstrap CI, groups, figure, `st-magnitude analyze`."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import requires_real

from st_magnitude.analysis import analyze_magnitudes, cohens_d_bootstrap, pooled_model, summarize
from st_magnitude.heads import QNorm, attach_head

warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_cohens_d_hand_computed() -> None:
    a = [2.0, 4.0, 6.0, 8.0]  # mean 5, var (9+1+1+9)/3 = 20/3
    b = [1.0, 2.0, 3.0, 4.0]  # mean 2.5, var (2.25+0.25+0.25+2.25)/3 = 5/3
    pooled = (3 * 20 / 3 + 3 * 5 / 3) / 6  # = 25/6
    expected = 2.5 / math.sqrt(pooled)  # = 1.2247448...
    effect = cohens_d_bootstrap(a, b, n_resamples=300, seed=0)
    assert effect.d == pytest.approx(expected, rel=1e-12)
    assert effect.d == pytest.approx(1.224744871391589, rel=1e-12)
    assert (effect.n_a, effect.n_b) == (4, 4)
    assert cohens_d_bootstrap(b, a, n_resamples=300).d == pytest.approx(-expected)


def test_bootstrap_ci_brackets_and_shrinks_with_n() -> None:
    rng = np.random.default_rng(0)
    small = cohens_d_bootstrap(rng.normal(1.0, 1.0, 30), rng.normal(0.0, 1.0, 30), n_resamples=500)
    large = cohens_d_bootstrap(rng.normal(1.0, 1.0, 600), rng.normal(0.0, 1.0, 600), n_resamples=500)
    for e in (small, large):
        assert e.ci_low < e.d < e.ci_high
    assert (large.ci_high - large.ci_low) < (small.ci_high - small.ci_low)
    assert large.ci_low < 1.0 < large.ci_high  # true d = 1


def test_summarize() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s["count"], s["mean"], s["median"], s["min"], s["max"]) == (5, 3.0, 3.0, 1.0, 5.0)
    assert s["std"] == pytest.approx(math.sqrt(2.5))


def test_pooled_model_drops_the_head(tiny_model) -> None:
    raw = tiny_model.encode(["the cat is on the house"])
    attach_head(tiny_model, QNorm())
    headless = pooled_model(tiny_model)
    assert np.allclose(headless.encode_document(["the cat is on the house"]), raw, atol=1e-6)
    assert len(headless) == len(tiny_model) - 1


def _toy_beir(folder: Path) -> Path:
    words = "protein cell gene disease vitamin diet heart cancer study result effect patients risk health food".split()
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for i in range(40):
            text = " ".join(words[(i + j) % len(words)] for j in range(3 + i % 7))
            handle.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as handle:
        for i in range(8):
            handle.write(json.dumps({"_id": f"q{i}", "text": f"{words[i]} {words[i + 1]}"}) + "\n")
    rows = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in range(8)] + [f"q{i}\td{i + 8}\t1" for i in range(8)]
    (folder / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def test_analyze_toy_set_groups_and_outputs(tiny_model, tmp_path: Path) -> None:
    from st_magnitude.data import load_beir

    data = load_beir(_toy_beir(tmp_path / "toy"))
    attach_head(tiny_model, QNorm())
    report = analyze_magnitudes(tiny_model, data, top_k=5, n_random=10, n_resamples=200, output_dir=tmp_path / "out")
    assert report.norms["relevant"]["count"] == 16  # d0..d15
    assert report.norms["random"]["count"] == 10
    assert 2 <= report.norms["hard_negative"]["count"] <= 24  # top-5 of 8 queries minus judged docs
    pooled = pooled_model(tiny_model).encode_document([data.corpus[f"d{i}"] for i in range(16)])
    assert report.norms["relevant"]["mean"] == pytest.approx(float(np.linalg.norm(pooled, axis=1).mean()), rel=1e-5)
    # QNorm: queries unit norm after the head, so τ_eff = τ exactly
    assert report.effective_temperature["median"] == pytest.approx(0.05, rel=1e-5)
    assert (tmp_path / "out" / "norm_histograms.png").read_bytes()[:8] == PNG_MAGIC
    saved = json.loads((tmp_path / "out" / "magnitude_report.json").read_text())
    assert saved["cohens_d"]["relevant_vs_random"]["d"] == pytest.approx(report.cohens_d["relevant_vs_random"]["d"])


@requires_real
def test_analyze_cli_on_scifact(minilm_path: str, data_dir: Path, tmp_path: Path, capsys) -> None:
    from st_magnitude.cli import main
    from st_magnitude.data import load_beir
    from st_magnitude.data import subsample_beir

    code = main(["analyze", "--model", minilm_path, "--dataset", "beir-scifact", "--data-dir", str(data_dir),
                 "--max-queries", "12", "--max-docs", "60", "--max-seq-length", "256", "--n-resamples", "200",
                 "--output", str(tmp_path)])
    assert code == 0
    report = json.loads((tmp_path / "magnitude_report.json").read_text())
    sub = subsample_beir(load_beir("beir-scifact", data_dir=data_dir), max_queries=12, max_docs=60, seed=0)
    expected_relevant = len({d for docs in sub.qrels.values() for d, g in docs.items() if g > 0})
    assert report["norms"]["relevant"]["count"] == expected_relevant
    assert report["settings"]["n_docs"] == 60
    d = report["cohens_d"]["relevant_vs_random"]
    assert d["ci_low"] <= d["d"] <= d["ci_high"]
    assert -1.0 <= report["length_correlation"]["spearman"] <= 1.0
    # packaged MiniLM ends with Normalize: its query outputs are unit norm, τ_eff = τ
    assert report["effective_temperature"]["median"] == pytest.approx(0.05, rel=1e-4)
    assert (tmp_path / "norm_histograms.png").read_bytes()[:8] == PNG_MAGIC
    assert "Cohen's d" in capsys.readouterr().out
