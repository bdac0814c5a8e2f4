"""Data loading and validation on small hand-written BEIR folders (and the real shared data when present)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from st_magnitude.data import load_beir, load_sts, load_training_triplets
from st_magnitude.errors import DataValidationError


def write_beir(root: Path, corpus, queries, qrels, split: str = "test") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "qrels").mkdir(exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    (root / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    )
    return root


def test_load_counts_drops(tmp_path: Path) -> None:
    root = write_beir(
        tmp_path / "toy",
        corpus=[{"_id": "d1", "title": "T", "text": "one"}, {"_id": "d2", "title": "", "text": " "},
                {"_id": "d3", "text": "three"}],
        queries=[{"_id": "q1", "text": "first"}, {"_id": "q2", "text": "second"}],
        qrels=[("q1", "d1", 1), ("q1", "d2", 1), ("q2", "dX", 1), ("qX", "d1", 1), ("q2", "d3", 0)],
    )
    data = load_beir(root)
    assert data.corpus == {"d1": "T one", "d3": "three"}
    assert data.queries == {"q1": "first"}  # q2 has no relevant document left
    assert data.relevant_docs == {"q1": {"d1"}}
    assert data.report["dropped_empty_docs"] == 1
    assert data.report["dropped_qrels"] == {"unknown_query": 1, "unknown_doc": 1, "empty_query": 0,
                                            "empty_doc": 1, "duplicate_pair": 0}
    assert data.ignore_identical_ids is False


def test_errors(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "dup", corpus=[{"_id": "d1", "text": "a"}, {"_id": "d1", "text": "b"}],
                      queries=[{"_id": "q1", "text": "x"}], qrels=[("q1", "d1", 1)])
    with pytest.raises(DataValidationError, match="duplicate corpus id 'd1'"):
        load_beir(root)
    with pytest.raises(DataValidationError, match=r"Available splits: \['test'\]"):
        load_beir(root, split="dev")
    with pytest.raises(DataValidationError, match="not found"):
        load_beir("no-such-set", data_dir=tmp_path)
    bad = tmp_path / "bad"
    write_beir(bad, corpus=[{"_id": "d1", "text": "a"}], queries=[{"_id": "q1", "text": "x"}], qrels=[("q1", "d1", 1)])
    (bad / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n{oops\n')
    with pytest.raises(DataValidationError, match="queries.jsonl:2: not valid JSON"):
        load_beir(bad)


def test_identical_ids_detected(tmp_path: Path) -> None:
    root = write_beir(
        tmp_path / "arg",
        corpus=[{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}],
        queries=[{"_id": "a", "text": "x"}],
        qrels=[("a", "b", 1)],
    )
    assert load_beir(root).ignore_identical_ids is True
    assert load_beir(root, ignore_identical_ids=False).ignore_identical_ids is False


def test_numeric_id_collisions_do_not_trigger_identical_id_exclusion(tmp_path: Path) -> None:
    # Query "1" and document "1" share an id by numbering only: their texts differ, so nothing is excluded.
    root = write_beir(
        tmp_path / "numeric",
        corpus=[{"_id": "1", "text": "protein folding in yeast"}, {"_id": "2", "text": "statins and cholesterol"}],
        queries=[{"_id": "1", "text": "do statins lower cholesterol"}],
        qrels=[("1", "2", 1)],
    )
    data = load_beir(root)
    assert data.ignore_identical_ids is False
    assert data.report["query_ids_also_doc_ids"] == 1 and data.report["query_ids_also_doc_ids_same_text"] == 0


def test_training_triplets(tmp_path: Path) -> None:
    folder = tmp_path / "train-toy"
    folder.mkdir()
    rows = [{"query": "q1", "positive": "p1", "negative": "n1"}, {"query": "q2", "positive": "", "negative": "n2"},
            {"query": "q3", "positive": "p3", "negative": "n3"}]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = load_training_triplets(folder)
    assert ds.column_names == ["anchor", "positive", "negative"]
    assert ds["anchor"] == ["q1", "q3"]
    assert json.loads(ds.info.description)["dropped_empty_rows"] == 1
    assert load_training_triplets(folder, with_negatives=False).column_names == ["anchor", "positive"]
    (folder / "train.jsonl").write_text(json.dumps({"question": "x", "answer": "y"}) + "\n")
    with pytest.raises(DataValidationError, match="need 'query' and 'positive'"):
        load_training_triplets(folder)


def test_real_shared_data(data_dir: Path) -> None:
    nf = load_beir("beir-nfcorpus", data_dir=data_dir)
    assert (len(nf.corpus), len(nf.queries), sum(len(v) for v in nf.qrels.values())) == (3633, 323, 12334)
    arguana = load_beir("beir-arguana", data_dir=data_dir)
    assert arguana.ignore_identical_ids is True and len(arguana.queries) == 1401
    train = load_training_triplets("train-nfcorpus", data_dir=data_dir)
    assert len(train) == 11439 and train.column_names == ["anchor", "positive", "negative"]
    sts = load_sts("stsb", data_dir=data_dir)
    assert len(sts.scores) == 1379 and sts.scores[0] == 2.5
