"""FAISS indexes with the head's metric, the MIPS -> L2 reduction, save/load checks, streamed encoding."""

from __future__ import annotations

import json

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")

from st_magnitude.heads import Cosine, Dot, QNorm, attach_head  # noqa: E402
from st_magnitude.index import (  # noqa: E402
    HeadSpec,
    IndexMismatchError,
    build_index,
    encode_corpus,
    load_index,
    mips_query_transform,
    mips_transform,
    save_index,
    search,
    search_texts,
)

# Three documents: d0 points along the query but is short, d1 is long and 37° off, d2 is orthogonal.
DOCS = np.array([[1.0, 0.0], [3.0 * 0.8, 3.0 * 0.6], [0.0, 2.0]], dtype=np.float32)
QUERY = np.array([[1.0, 0.0]], dtype=np.float32)
# Inner products: d0 = 1.0, d1 = 2.4, d2 = 0.0  -> IP order  [1, 0, 2]
# Cosines:        d0 = 1.0, d1 = 0.8, d2 = 0.0  -> cosine order [0, 1, 2]


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_qnorm_index_ranks_by_inner_product(kind: str) -> None:
    index = build_index(DOCS, head=QNorm(), kind=kind, nlist=1)
    scores, ids = search(index, QUERY, k=3)
    assert ids.tolist() == [[1, 0, 2]]
    np.testing.assert_allclose(scores, [[2.4, 1.0, 0.0]], atol=1e-5)
    assert index.metric == "ip"


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_cosine_index_ranks_by_cosine(kind: str) -> None:
    index = build_index(DOCS, head=Cosine(), kind=kind, nlist=1)
    scores, ids = search(index, QUERY * 5.0, k=3)  # query magnitude must not matter for Cosine
    assert ids.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(scores, [[1.0, 0.8, 0.0]], atol=1e-5)
    assert index.metric == "cosine"


def test_index_from_model_uses_model_head(tiny_model) -> None:
    texts = ["cat dog house", "the protein cell gene study", "free speech law", "music book water"]
    attach_head(tiny_model, QNorm())
    index = build_index(tiny_model, texts, kind="flat")
    docs = tiny_model.encode_document(texts, convert_to_numpy=True)
    queries = tiny_model.encode_query(["gene protein", "law speech"], convert_to_numpy=True)
    expected = queries @ docs.T
    scores, ids = search_texts(index, tiny_model, ["gene protein", "law speech"], k=4)
    np.testing.assert_array_equal(ids, np.argsort(-expected, axis=1))
    np.testing.assert_allclose(scores, -np.sort(-expected, axis=1), rtol=1e-5, atol=1e-5)
    # Documents are stored raw (QNorm keeps document magnitude): norms are not all 1.
    norms = np.linalg.norm(docs, axis=1)
    assert np.ptp(norms) > 1e-3
    # A different head on the same model is refused.
    with pytest.raises(IndexMismatchError, match="head"):
        build_index(tiny_model, texts, head=Cosine())
    attach_head(tiny_model, Cosine())
    with pytest.raises(IndexMismatchError, match="QNorm"):
        search_texts(index, tiny_model, ["gene"], k=1)


def test_mips_transform_is_exact_on_random_set() -> None:
    rng = np.random.default_rng(0)
    docs = (rng.standard_normal((500, 16)) * rng.lognormal(0.0, 0.5, size=(500, 1))).astype(np.float32)
    queries = rng.standard_normal((50, 16)).astype(np.float32)
    aug, m = mips_transform(docs)
    np.testing.assert_allclose(np.linalg.norm(aug, axis=1), m, rtol=1e-5)  # all on the sphere of radius M
    exact = queries @ docs.T
    expected_ids = np.argsort(-exact, axis=1, kind="stable")[:, :10]
    # L2 brute force over the transformed vectors gives exactly the MIPS top-10 ...
    l2 = faiss.IndexFlatL2(17)
    l2.add(aug)
    _, l2_ids = l2.search(mips_query_transform(queries), 10)
    np.testing.assert_array_equal(l2_ids, expected_ids)
    # ... and so does build_index(flat, mips_l2) with the original scores recovered.
    index = build_index(docs, head=Dot(), kind="flat", transform="mips_l2")
    scores, ids = search(index, queries, 10)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, np.take_along_axis(exact, expected_ids, 1), atol=1e-4)
    # HNSW over the transform with a wide beam: exact on this small set.
    hnsw = build_index(docs, head=QNorm(), kind="hnsw", ef_search=500, ef_construction=200)
    _, hnsw_ids = search(hnsw, queries, 10)
    np.testing.assert_array_equal(hnsw_ids, expected_ids)


def test_mips_transform_rejects_norm_above_m() -> None:
    with pytest.raises(ValueError, match="exceeds the index's M"):
        mips_transform(np.array([[3.0, 4.0]], dtype=np.float32), max_norm=4.0)


def test_save_load_roundtrip_and_mismatch(tmp_path) -> None:
    rng = np.random.default_rng(1)
    docs = rng.standard_normal((60, 8)).astype(np.float32)
    index = build_index(docs, head=QNorm(), kind="hnsw", transform="mips_l2", doc_ids=[f"d{i}" for i in range(60)])
    save_index(index, tmp_path / "idx")
    meta = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert meta["head"] == {"name": "QNorm", "gamma_query": 1.0, "gamma_document": 0.0}
    assert meta["max_norm"] == pytest.approx(float(np.linalg.norm(docs, axis=1).max()), rel=1e-6)
    loaded = load_index(tmp_path / "idx", head=QNorm(), dim=8)
    q = rng.standard_normal((5, 8)).astype(np.float32)
    s1, i1 = search(index, q, 5)
    s2, i2 = search(loaded, q, 5)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2)
    assert loaded.doc_ids[:2] == ["d0", "d1"] and loaded.transform == "mips_l2"
    with pytest.raises(IndexMismatchError, match="QNorm.*not Cosine"):
        load_index(tmp_path / "idx", head=Cosine())
    with pytest.raises(IndexMismatchError, match="8-d embeddings but 16-d"):
        load_index(tmp_path / "idx", head="qnorm", dim=16)
    with pytest.raises(IndexMismatchError, match="dimension 4"):
        search(loaded, q[:, :4], 3)
    with pytest.raises(FileNotFoundError, match="save_index"):
        load_index(tmp_path / "nothing")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: "{not json", "not valid JSON"),
        (lambda m: {k: v for k, v in m.items() if k != "max_norm"}, "lacks max_norm"),
        (lambda m: {**m, "head": {"name": "QNorm", "gamma_query": 1.0}}, "'head' must be"),
        (lambda m: {**m, "head": {**m["head"], "gamma_document": 1.5}}, "'head' must be"),
        (lambda m: {**m, "kind": "lsh"}, "kind must be"),
        (lambda m: {**m, "transform": "l2"}, "transform must be"),
        (lambda m: {**m, "dim": "8"}, "dim must be"),
        (lambda m: {**m, "max_norm": None}, "positive finite max document norm"),
    ],
)
def test_malformed_sidecar_is_named(tmp_path, edit, message: str) -> None:
    docs = np.random.default_rng(2).standard_normal((20, 8)).astype(np.float32)
    save_index(build_index(docs, head=QNorm(), kind="flat", transform="mips_l2"), tmp_path / "idx")
    meta_file = tmp_path / "idx" / "index.json"
    edited = edit(json.loads(meta_file.read_text()))
    meta_file.write_text(edited if isinstance(edited, str) else json.dumps(edited))
    with pytest.raises(IndexMismatchError, match=message):
        load_index(tmp_path / "idx")


def test_doc_ids_of_another_save_are_refused(tmp_path) -> None:
    docs = np.random.default_rng(3).standard_normal((10, 4)).astype(np.float32)
    save_index(build_index(docs, head=QNorm(), doc_ids=[str(i) for i in range(10)]), tmp_path / "idx")
    (tmp_path / "idx" / "doc_ids.json").write_text(json.dumps(["a", "b"]))
    with pytest.raises(IndexMismatchError, match="holds 2 ids but the index holds 10"):
        load_index(tmp_path / "idx")


def test_learnable_gamma_mismatch_is_detected() -> None:
    a = HeadSpec("LearnableNorm", 1.0, 0.3)
    assert not a.matches(HeadSpec("LearnableNorm", 1.0, 0.31)) and a.metric == "ip"
    assert HeadSpec("Cosine", 1.0, 1.0).metric == "cosine"


def test_build_index_requires_head() -> None:
    with pytest.raises(ValueError, match="head"):
        build_index(DOCS)


class _CrashingModel:
    """Wraps an ST model; raises on the ``fail_at``-th encode call (a simulated crash mid-corpus)."""

    def __init__(self, model, fail_at: int | None) -> None:
        self.model, self.fail_at, self.calls = model, fail_at, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def children(self):
        return self.model.children()

    def __len__(self):
        return len(self.model)

    def __getitem__(self, i):
        return self.model[i]

    def encode_document(self, texts, **kwargs):
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise KeyboardInterrupt("simulated crash")
        return self.model.encode_document(texts, **kwargs)


def test_encode_corpus_resumes_after_crash(tiny_model, tmp_path) -> None:
    attach_head(tiny_model, QNorm())
    corpus = [f"doc {i} the cat dog music water {i % 7}" for i in range(23)]
    crashing = _CrashingModel(tiny_model, fail_at=3)  # chunks 0 and 1 finish, chunk 2 crashes
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(crashing, corpus, tmp_path / "enc", batch_size=4, chunk_size=5, show_progress_bar=False)
    done = sorted(p.name for p in (tmp_path / "enc" / "chunks").glob("chunk_*.npy"))
    assert done == ["chunk_00000.npy", "chunk_00001.npy"]
    resumed = _CrashingModel(tiny_model, fail_at=None)
    emb = encode_corpus(resumed, corpus, tmp_path / "enc", batch_size=4, chunk_size=5, show_progress_bar=False)
    assert resumed.calls == 3  # chunks 2, 3, 4 only: the two finished chunks were not re-encoded
    expected = tiny_model.encode_document(corpus, batch_size=4, convert_to_numpy=True)
    assert isinstance(emb, np.memmap) and emb.shape == (23, 32)
    np.testing.assert_allclose(emb, expected, rtol=1e-5, atol=1e-6)
    assert json.loads((tmp_path / "enc" / "meta.json").read_text())["complete"] is True
    assert not list((tmp_path / "enc" / "chunks").glob("*.npy"))
    # A finished encoding is only reopened; another corpus in the same folder is refused.
    again = _CrashingModel(tiny_model, fail_at=1)
    encode_corpus(again, corpus, tmp_path / "enc", chunk_size=5, show_progress_bar=False)
    assert again.calls == 0
    with pytest.raises(ValueError, match="corpus_sha256"):
        encode_corpus(tiny_model, corpus[:-1] + ["changed"], tmp_path / "enc", chunk_size=5, show_progress_bar=False)


@pytest.mark.parametrize("bad", [None, 3])
def test_non_string_texts_are_refused_before_encoding(tiny_model, tmp_path, bad) -> None:
    model = attach_head(tiny_model, QNorm())
    with pytest.raises(TypeError, match=r"corpus\[1\] is .*not a string"):
        encode_corpus(model, ["a document", bad], tmp_path / "enc", batch_size=2)
    assert not (tmp_path / "enc" / "embeddings.npy").exists()
    with pytest.raises(TypeError, match=r"corpus\[1\] is .*not a string"):
        build_index(model, ["a document", bad])


def test_encode_corpus_through_st_multi_process_pool(tiny_model, tmp_path) -> None:
    # Two CPU worker processes of ST's pool give the same embeddings as the in-process encoder.
    model = attach_head(tiny_model, QNorm())
    corpus = [f"doc {i} the cat dog music water {i % 5}" for i in range(12)]
    emb = encode_corpus(model, corpus, tmp_path / "mp", batch_size=4, chunk_size=6, processes=2,
                        show_progress_bar=False)
    expected = model.encode_document(corpus, batch_size=4, convert_to_numpy=True)
    np.testing.assert_allclose(emb, expected, rtol=1e-5, atol=1e-6)
    # The QNorm head ran in the workers with the document role: norms are kept, not 1.
    assert not np.allclose(np.linalg.norm(emb, axis=1), 1.0)
