"""The main job end to end on a tiny model and a hand-made BEIR folder: outputs, structure, reproducibility."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from st_magnitude.ablation import AblationConfig, config_from_args, render_markdown, run_ablation
from st_magnitude.cli import build_parser

from test_data import write_beir

TOPICS = ["cat dog", "protein gene", "heart disease", "free speech", "river city", "music book", "vitamin diet",
          "school law"]


@pytest.fixture()
def toy_data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    corpus = [{"_id": f"d{i}", "title": t, "text": f"the {t} study result"} for i, t in enumerate(TOPICS)]
    queries = [{"_id": f"q{i}", "text": f"{t}?"} for i, t in enumerate(TOPICS)]
    write_beir(root / "beir-toy", corpus, queries, [(f"q{i}", f"d{i}", 1) for i in range(len(TOPICS))])
    (root / "train-toy").mkdir()
    rows = [{"query": t, "positive": f"a {t} document", "negative": f"an unrelated note on {TOPICS[(i + 3) % 8]}"}
            for i, t in enumerate(TOPICS)]
    (root / "train-toy" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _config(tiny_bert_dir: Path, data: Path, out: Path) -> AblationConfig:
    return AblationConfig(
        model=str(tiny_bert_dir), train="train-toy", eval=["beir-toy"], heads=["cosine", "qnorm", "learnable"],
        max_steps=3, batch_size=4, seed=7, output=str(out), data_dir=str(data), logging_steps=1,
        gamma_learning_rate=0.05, eval_batch_size=8,
    )


def test_ablation_outputs_and_reproducibility(tiny_bert_dir: Path, toy_data: Path, tmp_path: Path) -> None:
    first = run_ablation(_config(tiny_bert_dir, toy_data, tmp_path / "run1"))
    out = tmp_path / "run1"
    saved = json.loads((out / "results.json").read_text())
    assert set(saved["results"]) == {"base", "cosine", "qnorm", "learnable"}
    for row in saved["results"].values():
        assert set(row["beir-toy"]) >= {"ndcg@10", "recall@100", "mrr@10"}
        assert 0.0 <= row["beir-toy"]["ndcg@10"] <= 1.0
        assert row["beir-toy"]["recall@100"] == 1.0  # 8 documents: all are in the top 100
    assert saved["datasets"]["beir-toy"]["in_domain"] is True
    assert saved["datasets"]["train"]["rows"] == saved["datasets"]["train"]["rows_before_mining"] == 8  # no mining
    train = saved["train"]
    assert train["qnorm"]["final_gamma"] == {"query": 1.0, "document": 0.0}
    assert train["qnorm"]["steps"] == 3 and len(train["qnorm"]["log"]) == 3
    assert [e["step"] for e in train["learnable"]["log"]] == [1, 2, 3]
    assert "gamma_query" in train["learnable"]["log"][0]
    # The log holds the γ used in each step's forward (before that step's update); Adam moves γ by at most
    # about its learning rate (0.05) per step.
    assert train["learnable"]["final_gamma"]["query"] == pytest.approx(train["learnable"]["log"][-1]["gamma_query"], abs=0.06)
    assert train["learnable"]["final_gamma"]["query"] < 1.0  # γ left its initial value
    assert (out / "ablation.png").stat().st_size > 1000 and (out / "gamma.png").is_file()
    table = (out / "results.md").read_text()
    assert "| qnorm |" in table and "beir-toy (ID)" in table
    # Calibration is on by default: only the magnitude-keeping head (QNorm's raw document side) is scaled.
    assert train["cosine"]["calibration"] is None and train["learnable"]["calibration"] is None
    cal = train["qnorm"]["calibration"]
    assert cal["query_scale"] == 1.0 and cal["n_documents"] > 0
    assert cal["document_scale"] == pytest.approx(1 / cal["document_mean_norm"], rel=1e-12)
    assert "Norm-calibrated before training" in table
    assert f"`--calibrate`): qnorm (0 queries / {cal['n_documents']} documents)." in table

    second = run_ablation(_config(tiny_bert_dir, toy_data, tmp_path / "run2"))
    for row in first["results"]:
        assert second["results"][row]["beir-toy"] == pytest.approx(first["results"][row]["beir-toy"], abs=1e-6)
    assert second["train"]["learnable"]["final_gamma"] == pytest.approx(first["train"]["learnable"]["final_gamma"], abs=1e-6)


def test_cli_preset_and_overrides() -> None:
    args = build_parser().parse_args(["ablation", "--preset", "quick", "--heads", "qnorm,dnorm", "--max-steps", "5"])
    config = config_from_args(args)
    assert config.heads == ["qnorm", "dnorm"] and config.max_steps == 5
    assert config.batch_size == 16 and config.eval == ["beir-nfcorpus", "beir-scifact"]
    with pytest.raises(ValueError, match="Unknown heads"):
        AblationConfig(heads=["cosin"]).validate()
    with pytest.raises(ValueError, match=r"Heads \['qnorm'\] are listed twice"):
        AblationConfig(heads=["qnorm", "cosine", "qnorm"]).validate()
    with pytest.raises(ValueError, match="max_steps must be an integer, got '2'"):
        AblationConfig(max_steps="2").validate()


def test_markdown_relative_change() -> None:
    results = {
        "config": {"eval": ["beir-a"], "max_steps": 1, "batch_size": 2, "train": "train-a", "temperature": 0.05, "seed": 1},
        "datasets": {"beir-a": {"in_domain": True}},
        "results": {"cosine": {"beir-a": {"ndcg@10": 0.5}}, "qnorm": {"beir-a": {"ndcg@10": 0.55}}},
        "train": {},
    }
    assert "0.5500 (+10.0%)" in render_markdown(results)


def test_router_mapping_for_columns() -> None:
    from st_magnitude.ablation import router_mapping_for

    assert router_mapping_for(["anchor", "positive", "negative_1", "negative_2"]) == {
        "anchor": "query", "positive": "document", "negative_1": "document", "negative_2": "document"}
    with pytest.raises(ValueError, match="at least one document column"):
        router_mapping_for(["anchor"])


def test_mined_negatives_and_prompts(tiny_bert_dir: Path, toy_data: Path, tmp_path: Path) -> None:
    from st_magnitude.data import load_training_triplets, mine_negatives
    from st_magnitude.models import load_model

    pairs = load_training_triplets(toy_data / "train-toy")
    mined = mine_negatives(pairs, load_model(str(tiny_bert_dir)), num_negatives=1, range_min=0, range_max=4,
                           relative_margin=None)
    assert mined.column_names == ["anchor", "positive", "negative"]
    for row in mined:
        assert row["negative"] != row["positive"] and row["negative"] in list(pairs["positive"]) + list(pairs["negative"])
    config = _config(tiny_bert_dir, toy_data, tmp_path / "run")
    config.heads, config.query_prompt, config.document_prompt = ["cosine", "qnorm"], "query: ", "passage: "
    config.save_models, config.calibrate = True, "both"
    results = run_ablation(config)
    assert list(results["results"]) == ["base", "cosine", "qnorm", "qnorm+cal"]
    assert results["train"]["qnorm"]["calibration"] is None
    cal = results["train"]["qnorm+cal"]["calibration"]
    assert cal["query_scale"] == 1.0 and cal["document_scale"] == pytest.approx(1 / cal["document_mean_norm"])
    saved = load_model(str(tmp_path / "run" / "models" / "qnorm+cal"))
    assert saved[-1].document_scale == pytest.approx(cal["document_scale"], rel=1e-12)
    assert saved.prompts["query"] == "query: " and saved.prompts["document"] == "passage: "


def test_eval_seed_fixes_the_subsample_across_training_seeds(tiny_bert_dir: Path, toy_data: Path, tmp_path: Path) -> None:
    from st_magnitude.data import load_beir, subsample_beir

    reports = []
    for seed in (7, 8):
        config = _config(tiny_bert_dir, toy_data, tmp_path / f"s{seed}")
        config.heads, config.max_steps, config.include_base, config.seed = ["cosine"], 1, False, seed
        config.eval_max_queries, config.eval_max_docs, config.eval_seed = 3, 5, 11
        reports.append(run_ablation(config)["datasets"]["beir-toy"])
    expected = subsample_beir(load_beir("beir-toy", data_dir=str(toy_data)), 3, 5, seed=11)
    for report in reports:
        assert report["subsample"]["seed"] == 11
        assert (report["queries"], report["docs"]) == (3, 5) == (len(expected.queries), len(expected.corpus))
    with pytest.raises(ValueError, match="eval_seed must be an integer"):
        AblationConfig(eval_seed=1.5).validate()
    with pytest.raises(ValueError, match="eval_seed must be >= 0"):
        AblationConfig(eval_seed=-7, eval_max_queries=3).validate()
    with pytest.raises(ValueError, match="set --eval-max-queries or --eval-max-docs too"):
        AblationConfig(eval_seed=3).validate()
