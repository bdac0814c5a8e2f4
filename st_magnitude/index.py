"""FAISS indexes that score the way the head does, and streamed corpus encoding.

A magnitude-keeping head (``QNorm``, ``Dot``, ``DNorm``, ``LearnableNorm`` with γ < 1) ranks by the inner
product of the head outputs, so the index must use inner product with documents left *unnormalized*; a
cosine/L2 index over normalized vectors would erase the document magnitude the model learned. Only
``Cosine`` gets normalized vectors (cosine = inner product of unit vectors).

Exact search (``kind="flat"``) is a plain ``faiss.IndexFlatIP``. Graph and cluster indexes (HNSW, IVF)
are built for metric spaces; inner product is not a metric (a vector need not be its own nearest
neighbour), so by default they run on the *MIPS-to-nearest-neighbour reduction* of Bachrach et al.
("Speeding up the Xbox recommender system using a Euclidean transformation for inner-product spaces",
RecSys 2014, section 4): with M = max document norm,

    d̃ = [d, sqrt(M² − ‖d‖²)],   q̃ = [q, 0],   ‖q̃ − d̃‖² = ‖q‖² + M² − 2 q·d,

so the L2 order over d̃ is exactly the inner-product order over d, and the L2 index searches a true
metric space. Scores returned by :func:`search` are always the original inner products (recovered as
``(‖q‖² + M² − ‖q̃ − d̃‖²) / 2``), never transformed distances. faiss's native inner-product HNSW/IVF
(``transform="none"``) is available for comparison (``benchmarks/index_bench.py``).

Public API: :func:`build_index`, :func:`search`, :func:`search_texts`, :func:`save_index`,
:func:`load_index`, :func:`mips_transform`, :func:`encode_corpus`, :class:`MagnitudeIndex`,
:class:`IndexMismatchError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from st_magnitude.errors import IndexMismatchError
from st_magnitude.heads import resolve_role

if TYPE_CHECKING:  # faiss and torch are imported lazily
    from sentence_transformers import SentenceTransformer

    from st_magnitude.heads import MagnitudeHead

logger = logging.getLogger(__name__)

__all__ = [
    "IndexKind",
    "IndexMismatchError",
    "HeadSpec",
    "MagnitudeIndex",
    "head_spec",
    "mips_transform",
    "mips_query_transform",
    "build_index",
    "search",
    "search_texts",
    "save_index",
    "load_index",
    "encode_corpus",
    "INDEX_FORMAT_VERSION",
]

IndexKind = Literal["flat", "hnsw", "ivf"]
INDEX_FORMAT_VERSION = 1
"""Version of the ``index.json`` sidecar written by :func:`save_index`."""

_GAMMA_TOL = 1e-6



@dataclass(frozen=True)
class HeadSpec:
    """What an index needs to know about the head whose document embeddings it holds.

    Attributes:
        name: head class name (``"QNorm"``, ``"Cosine"``, ...).
        gamma_query: γ_q of the head (1 = queries normalized).
        gamma_document: γ_d of the head (1 = documents normalized).
    """

    name: str
    gamma_query: float
    gamma_document: float

    @property
    def keeps_magnitude(self) -> bool:
        """True when a side keeps its magnitude, so the score is an inner product of unnormalized vectors."""
        return min(self.gamma_query, self.gamma_document) < 1.0 - _GAMMA_TOL

    @property
    def metric(self) -> Literal["ip", "cosine"]:
        """``"ip"`` for magnitude-keeping heads, ``"cosine"`` only when both sides are normalized."""
        return "ip" if self.keeps_magnitude else "cosine"

    def matches(self, other: HeadSpec) -> bool:
        """Same head class and the same γ values (within 1e-6)."""
        return (
            self.name == other.name
            and abs(self.gamma_query - other.gamma_query) <= _GAMMA_TOL
            and abs(self.gamma_document - other.gamma_document) <= _GAMMA_TOL
        )

    def describe(self) -> str:
        return f"{self.name}(γ_q={self.gamma_query:.4g}, γ_d={self.gamma_document:.4g})"


def head_spec(head: MagnitudeHead | SentenceTransformer | HeadSpec | str | None) -> HeadSpec:
    """Turn a head, a model (its head; a model ending in ST ``Normalize`` counts as Cosine), a head name
    (``"qnorm"``, ``"cosine"``, ...) or a :class:`HeadSpec` into a :class:`HeadSpec`.

    Raises:
        ValueError: for ``None`` or a model with neither a magnitude head nor a trailing ``Normalize``
            (its similarity is ambiguous: attach a head with ``attach_head`` or pass ``head=``).
    """
    if isinstance(head, HeadSpec):
        return head
    from st_magnitude.heads import MagnitudeHead, find_head, make_head

    if isinstance(head, str):
        head = make_head(head)
    if isinstance(head, MagnitudeHead):
        return HeadSpec(type(head).__name__, float(head.gamma_query), float(head.gamma_document))
    if head is not None and hasattr(head, "encode_document"):
        found = find_head(head)
        if found is not None:
            return head_spec(found)
        from sentence_transformers.base.modules import Normalize

        if len(head) > 0 and isinstance(head[len(head) - 1], Normalize):
            return HeadSpec("Cosine", 1.0, 1.0)
        raise ValueError(
            "The model has no magnitude head and no trailing Normalize, so it is unclear whether to index with "
            "inner product or cosine. Attach one (st_magnitude.attach_head(model, QNorm())) or pass head=... ."
        )
    raise ValueError(
        "build_index needs to know the head: pass head=QNorm() (or 'qnorm', 'cosine', ...) with raw embeddings, "
        "or pass a model with a head attached."
    )


# --------------------------------------------------------------------------------------------------------
# The MIPS -> L2 reduction (Bachrach et al., RecSys 2014, section 4)
# --------------------------------------------------------------------------------------------------------
def mips_transform(documents: np.ndarray, max_norm: float | None = None) -> tuple[np.ndarray, float]:
    """Append ``sqrt(M² − ‖d‖²)`` to each document, so L2 order equals inner-product order.

    Args:
        documents: ``(n, dim)`` float32 document embeddings (unnormalized).
        max_norm: M; default the largest ‖d‖ in ``documents``. Must be ≥ every ‖d‖ (documents added
            later to an index must not exceed the M it was built with).

    Returns:
        ``(augmented (n, dim + 1) float32, M)``.

    Raises:
        ValueError: if a document norm exceeds ``max_norm`` by more than float32 rounding.

    Source: Bachrach et al., RecSys 2014, section 4 (Euclidean transformation of inner-product spaces).
    """
    x = np.ascontiguousarray(documents, dtype=np.float32)
    sq = np.einsum("ij,ij->i", x, x, dtype=np.float64)
    m = float(math.sqrt(sq.max())) if max_norm is None else float(max_norm)
    if len(sq) and sq.max() > m * m * (1 + 1e-5) + 1e-12:
        raise ValueError(
            f"A document norm ({math.sqrt(sq.max()):.6g}) exceeds the index's M = {m:.6g}; the MIPS transform "
            "needs M >= every document norm. Rebuild the index over all documents (build_index computes M)."
        )
    extra = np.sqrt(np.clip(m * m - sq, 0.0, None)).astype(np.float32)
    return np.hstack([x, extra[:, None]]), m


def mips_query_transform(queries: np.ndarray) -> np.ndarray:
    """Append a 0 to each query: ``(nq, dim) -> (nq, dim + 1)`` (Bachrach et al., RecSys 2014, section 4)."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    return np.hstack([q, np.zeros((q.shape[0], 1), dtype=np.float32)])


# --------------------------------------------------------------------------------------------------------
# Index
# --------------------------------------------------------------------------------------------------------
@dataclass
class MagnitudeIndex:
    """A faiss index plus everything needed to query it correctly and to refuse a wrong head.

    Attributes:
        index: the faiss index (dimension ``dim`` or ``dim + 1`` when ``transform == "mips_l2"``).
        head: the head whose document embeddings were indexed.
        kind: ``"flat"``, ``"hnsw"`` or ``"ivf"``.
        transform: ``"none"`` (inner product directly) or ``"mips_l2"`` (Bachrach reduction, L2 index).
        dim: embedding dimension (before the transform).
        max_norm: M of the transform (``None`` without it).
        doc_ids: optional document ids, one per indexed row (``search`` returns row numbers; map with these).
        params: build parameters (HNSW M, efConstruction, efSearch, IVF nlist/nprobe).
    """

    index: Any
    head: HeadSpec
    kind: str
    transform: str
    dim: int
    max_norm: float | None = None
    doc_ids: list[str] | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def metric(self) -> str:
        """``"ip"`` or ``"cosine"`` (from the head)."""
        return self.head.metric

    @property
    def ntotal(self) -> int:
        """Number of indexed documents."""
        return int(self.index.ntotal)

    def set_search_params(self, ef_search: int | None = None, nprobe: int | None = None) -> None:
        """Change HNSW ``efSearch`` or IVF ``nprobe`` (the recall/speed knob) after building or loading."""
        import faiss

        if ef_search is not None and self.kind == "hnsw":
            faiss.downcast_index(self.index).hnsw.efSearch = int(ef_search)
            self.params["ef_search"] = int(ef_search)
        if nprobe is not None and self.kind == "ivf":
            faiss.extract_index_ivf(self.index).nprobe = int(nprobe)
            self.params["nprobe"] = int(nprobe)

    def describe(self) -> str:
        return (
            f"MagnitudeIndex({self.kind}, {self.metric}, transform={self.transform}, head={self.head.describe()}, "
            f"n={self.ntotal}, dim={self.dim})"
        )


def _as_float32_2d(x: Any, what: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.ascontiguousarray(np.asarray(x), dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"{what} must be a 2-D array (n, dim), got shape {arr.shape}.")
    if not np.isfinite(arr).all():
        from st_magnitude.errors import NonFiniteEmbeddingError

        raise NonFiniteEmbeddingError(f"{what} contain NaN or inf; faiss would return garbage rankings.")
    return arr


def build_index(
    embeddings: np.ndarray | SentenceTransformer,
    corpus: Sequence[str] | None = None,
    *,
    head: MagnitudeHead | HeadSpec | str | None = None,
    kind: IndexKind = "flat",
    transform: Literal["auto", "mips_l2", "none"] = "auto",
    doc_ids: Sequence[str] | None = None,
    hnsw_m: int = 32,
    ef_construction: int = 40,
    ef_search: int = 64,
    nlist: int | None = None,
    nprobe: int = 16,
    train_size: int = 100_000,
    batch_size: int = 64,
    seed: int = 0,
    add_batch: int = 100_000,
) -> MagnitudeIndex:
    """Build a faiss index whose metric matches the head.

    Either pass document embeddings (``(n, dim)`` float32, the head's *document* outputs, e.g. from
    ``model.encode_document`` or :func:`encode_corpus`) with ``head=``, or a model plus ``corpus`` texts
    (encoded here with ``model.encode_document``; the head is the model's own).

    Metric: inner product over unnormalized documents for magnitude-keeping heads; cosine (inner product
    of L2-normalized vectors) for ``Cosine``.

    Args:
        embeddings: ``(n, dim)`` document embeddings, or a SentenceTransformer with ``corpus``.
        corpus: texts to encode when ``embeddings`` is a model.
        head: the head that produced the embeddings (object, name or :class:`HeadSpec`); with a model,
            default its own head, and a different one is an error.
        kind: ``"flat"`` (exact, ``IndexFlatIP``), ``"hnsw"`` (``IndexHNSWFlat``) or ``"ivf"``
            (``IndexIVFFlat``).
        transform: ``"auto"`` = ``"none"`` (faiss's native inner-product index) for every kind, set by
            measurement: at efSearch 16 native IP-HNSW reached recall@10 0.965 vs 0.412 for the transformed
            L2-HNSW on 20k synthetic vectors, and 0.997 vs 0.971 on 1k real ArguAna embeddings
            (benchmarks/index_bench.py; Morozov & Babenko, NeurIPS 2018, report the same). ``"mips_l2"`` is the
            Bachrach et al. (RecSys 2014) reduction to an L2 search, exact in the limit, kept as an option.
        doc_ids: optional ids stored with the index (saved by :func:`save_index`).
        hnsw_m, ef_construction, ef_search: HNSW graph degree, build beam and search beam (faiss defaults
            are 32, 40, 16; we search with 64).
        nlist: IVF cells (default ``4 * sqrt(n)`` rounded, faiss's rule of thumb); nprobe: cells visited.
        train_size: IVF k-means training sample size.
        batch_size: encoding batch size when a model is given.
        seed: seed of the IVF training sample.
        add_batch: rows added per ``index.add`` call (bounds the memory of the transformed copy).

    Returns:
        A :class:`MagnitudeIndex`.

    Raises:
        ValueError: unknown ``kind``/``transform``, wrong shapes, or no way to tell the head.
        IndexMismatchError: ``head`` differs from the model's head.
        NonFiniteEmbeddingError: NaN/inf in the embeddings.
    """
    import faiss

    if kind not in ("flat", "hnsw", "ivf"):
        raise ValueError(f"kind must be 'flat', 'hnsw' or 'ivf', got {kind!r}.")
    if transform not in ("auto", "mips_l2", "none"):
        raise ValueError(f"transform must be 'auto', 'mips_l2' or 'none', got {transform!r}.")
    for name, value, low in (("hnsw_m", hnsw_m, 2), ("ef_construction", ef_construction, 1),
                             ("ef_search", ef_search, 1), ("nprobe", nprobe, 1), ("add_batch", add_batch, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
    if isinstance(corpus, str):
        raise TypeError("corpus must be a sequence of texts, not a single string (wrap it in a list).")
    if hasattr(embeddings, "encode_document"):
        model = embeddings
        if corpus is None:
            raise ValueError("build_index(model, corpus): pass the document texts to encode.")
        spec = head_spec(model)
        if head is not None and not head_spec(head).matches(spec):
            raise IndexMismatchError(
                f"head={head_spec(head).describe()} differs from the model's head {spec.describe()}; drop head= "
                "or attach that head to the model first."
            )
        texts = list(corpus)
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(
                f"build_index: corpus[{bad}] is {texts[bad]!r} ({type(texts[bad]).__name__}), not a string; drop "
                "or fill missing texts first."
            )
        x = model.encode_document(texts, batch_size=batch_size, convert_to_numpy=True)
    else:
        spec = head_spec(head)
        x = embeddings
    x = _as_float32_2d(x, "document embeddings")
    n, dim = x.shape
    if doc_ids is not None and len(doc_ids) != n:
        raise ValueError(f"doc_ids has {len(doc_ids)} entries for {n} embeddings.")
    if spec.metric == "cosine":
        x = x.copy()
        faiss.normalize_L2(x)
    if transform == "auto":
        transform = "none"
    use_l2 = transform == "mips_l2"
    max_norm = float(np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64).max())) if use_l2 and n else None
    d_index = dim + 1 if use_l2 else dim
    metric = faiss.METRIC_L2 if use_l2 else faiss.METRIC_INNER_PRODUCT
    params: dict[str, Any] = {}
    if kind == "flat":
        index = faiss.IndexFlat(d_index, metric)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(d_index, int(hnsw_m), metric)
        index.hnsw.efConstruction = int(ef_construction)
        index.hnsw.efSearch = int(ef_search)
        params.update(hnsw_m=int(hnsw_m), ef_construction=int(ef_construction), ef_search=int(ef_search))
    else:
        nlist = int(nlist) if nlist is not None else max(1, min(n // 39, int(round(4 * math.sqrt(max(n, 1))))))
        if n < 1 or not 1 <= nlist <= n:
            raise ValueError(f"IVF needs 1 <= nlist <= number of documents ({n}), got nlist={nlist}.")
        quantizer = faiss.IndexFlat(d_index, metric)
        index = faiss.IndexIVFFlat(quantizer, d_index, nlist, metric)
        index.nprobe = int(nprobe)
        params.update(nlist=nlist, nprobe=int(nprobe))
        rng = np.random.default_rng(seed)
        sample = np.sort(rng.choice(n, size=min(n, int(train_size)), replace=False))
        xs = x[sample]
        index.train(mips_transform(xs, max_norm)[0] if use_l2 else xs)
    for start in range(0, n, int(add_batch)):
        block = x[start : start + int(add_batch)]
        index.add(mips_transform(block, max_norm)[0] if use_l2 else block)
    return MagnitudeIndex(
        index=index,
        head=spec,
        kind=kind,
        transform=transform,
        dim=dim,
        max_norm=max_norm,
        doc_ids=list(map(str, doc_ids)) if doc_ids is not None else None,
        params=params,
    )


def search(index: MagnitudeIndex, query_embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` documents for each query, with the head's inner-product scores.

    Args:
        index: a :class:`MagnitudeIndex`.
        query_embeddings: ``(nq, dim)`` float32 query outputs of the *same* head (``model.encode_query``).
            For a Cosine index they are L2-normalized here (a no-op for Cosine outputs).
        k: number of results per query (capped at ``index.ntotal``).

    Returns:
        ``(scores, ids)``: ``(nq, k)`` float32 inner products q·d of the original (untransformed) vectors,
        best first, and ``(nq, k)`` int64 row numbers (``-1`` where an approximate index found fewer than
        ``k``; the score there is ``-inf``). With the MIPS transform, scores are recovered exactly in
        real arithmetic as ``(‖q‖² + M² − dist) / 2`` (float32 rounding ~1e-6 · M²).

    Raises:
        IndexMismatchError: if the query dimension differs from the index's.
    """
    import faiss

    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}.")
    q = _as_float32_2d(query_embeddings, "query embeddings")
    if q.shape[1] != index.dim:
        raise IndexMismatchError(
            f"Queries have dimension {q.shape[1]} but the index was built for {index.dim}-d embeddings "
            f"({index.describe()}); encode queries with the model that built the index."
        )
    k = int(min(k, max(index.ntotal, 1)))
    if index.metric == "cosine":
        q = q.copy()
        faiss.normalize_L2(q)
    if index.transform == "mips_l2":
        dist, ids = index.index.search(mips_query_transform(q), k)
        qsq = np.einsum("ij,ij->i", q, q, dtype=np.float64)[:, None]
        scores = ((qsq + float(index.max_norm) ** 2 - dist.astype(np.float64)) / 2.0).astype(np.float32)
    else:
        scores, ids = index.index.search(q, k)
    scores = np.where(ids < 0, -np.inf, scores).astype(np.float32)
    return scores, ids.astype(np.int64)


def search_texts(
    index: MagnitudeIndex, model: SentenceTransformer, queries: Sequence[str], k: int, batch_size: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """Encode ``queries`` with ``model.encode_query`` and :func:`search`; checks the model's head first.

    Raises:
        IndexMismatchError: if the model's head differs from the index's head.
    """
    spec = head_spec(model)
    if not spec.matches(index.head):
        raise IndexMismatchError(
            f"The index holds documents of {index.head.describe()} but the model's head is {spec.describe()}; "
            "queries and documents must come from the same head. Rebuild the index or load the matching model."
        )
    q = model.encode_query(list(queries), batch_size=batch_size, convert_to_numpy=True)
    return search(index, q, k)


# --------------------------------------------------------------------------------------------------------
# Save / load
# --------------------------------------------------------------------------------------------------------
def save_index(index: MagnitudeIndex, path: str | os.PathLike[str]) -> Path:
    """Write ``index.faiss`` and ``index.json`` (head name and γ, kind, transform, dim, M, ids) to folder ``path``.

    Returns:
        The folder.
    """
    import faiss

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    faiss.write_index(index.index, str(folder / "index.faiss"))
    meta = {
        "format_version": INDEX_FORMAT_VERSION,
        "head": asdict(index.head),
        "metric": index.metric,
        "kind": index.kind,
        "transform": index.transform,
        "dim": index.dim,
        "max_norm": index.max_norm,
        "ntotal": index.ntotal,
        "params": index.params,
        "faiss_version": faiss.__version__,
    }
    (folder / "index.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    if index.doc_ids is not None:
        (folder / "doc_ids.json").write_text(json.dumps(index.doc_ids), encoding="utf-8")
    return folder


def _read_sidecar(meta_file: Path) -> dict[str, Any]:
    """Read and validate ``index.json``; every defect raises :class:`IndexMismatchError` naming the field."""
    fix = "Save the index again with st_magnitude.index.save_index()."
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise IndexMismatchError(f"{meta_file} is not valid JSON ({err}). {fix}") from err
    if not isinstance(meta, dict):
        raise IndexMismatchError(f"{meta_file} must hold a JSON object, got {type(meta).__name__}. {fix}")
    missing = [k for k in ("head", "kind", "transform", "dim", "max_norm", "ntotal") if k not in meta]
    if missing:
        raise IndexMismatchError(f"{meta_file} lacks {', '.join(missing)}. {fix}")
    head = meta["head"]
    if (
        not isinstance(head, dict)
        or set(head) != {"name", "gamma_query", "gamma_document"}
        or not isinstance(head["name"], str)
        or not all(_is_real(head[g]) and 0.0 <= head[g] <= 1.0 for g in ("gamma_query", "gamma_document"))
    ):
        raise IndexMismatchError(
            f"{meta_file}: 'head' must be {{'name': str, 'gamma_query': float in [0, 1], 'gamma_document': "
            f"float in [0, 1]}}, got {head!r}. {fix}"
        )
    if meta["kind"] not in ("flat", "hnsw", "ivf"):
        raise IndexMismatchError(f"{meta_file}: kind must be 'flat', 'hnsw' or 'ivf', got {meta['kind']!r}. {fix}")
    if meta["transform"] not in ("none", "mips_l2"):
        raise IndexMismatchError(f"{meta_file}: transform must be 'none' or 'mips_l2', got {meta['transform']!r}. {fix}")
    for key in ("dim", "ntotal"):
        if isinstance(meta[key], bool) or not isinstance(meta[key], int) or meta[key] < (1 if key == "dim" else 0):
            raise IndexMismatchError(f"{meta_file}: {key} must be a non-negative integer, got {meta[key]!r}. {fix}")
    max_norm = meta["max_norm"]
    if meta["transform"] == "mips_l2" and not (_is_real(max_norm) and math.isfinite(max_norm) and max_norm > 0):
        raise IndexMismatchError(
            f"{meta_file}: a mips_l2 index needs the positive finite max document norm M, got {max_norm!r}. {fix}"
        )
    if "params" in meta and not isinstance(meta["params"], dict):
        raise IndexMismatchError(f"{meta_file}: params must be a JSON object, got {meta['params']!r}. {fix}")
    return meta


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_index(
    path: str | os.PathLike[str],
    head: MagnitudeHead | SentenceTransformer | HeadSpec | str | None = None,
    dim: int | None = None,
) -> MagnitudeIndex:
    """Load an index saved by :func:`save_index`, optionally checking it against a head/model and dimension.

    Args:
        path: folder with ``index.faiss`` and ``index.json``.
        head: expected head (object, model, name or :class:`HeadSpec`); None skips the check.
        dim: expected embedding dimension; None skips the check (a model given as ``head`` also checks its
            ``get_embedding_dimension()``).

    Raises:
        FileNotFoundError: missing files.
        IndexMismatchError: the index was built for another head (class or γ) or dimension, or its files
            disagree with each other, or ``index.json``/``doc_ids.json`` are malformed (each defect named).
    """
    import faiss

    folder = Path(path)
    meta_file, index_file = folder / "index.json", folder / "index.faiss"
    for f in (meta_file, index_file):
        if not f.is_file():
            raise FileNotFoundError(f"{f} not found; save the index with st_magnitude.index.save_index(index, {folder}).")
    meta = _read_sidecar(meta_file)
    spec = HeadSpec(**meta["head"])
    if head is not None:
        expected = head_spec(head)
        if not expected.matches(spec):
            raise IndexMismatchError(
                f"{folder} was built for documents of {spec.describe()}, not {expected.describe()}: its metric "
                f"({spec.metric}) and stored vectors are that head's. Rebuild the index with build_index(..., "
                f"head={expected.name}()) or load the model it was built with."
            )
        if dim is None and hasattr(head, "get_embedding_dimension"):
            dim = head.get_embedding_dimension()
    if dim is not None and int(dim) != int(meta["dim"]):
        raise IndexMismatchError(
            f"{folder} holds {meta['dim']}-d embeddings but {dim}-d were expected; it was built with another model."
        )
    index = faiss.read_index(str(index_file))
    expected_d = meta["dim"] + (1 if meta["transform"] == "mips_l2" else 0)
    if index.d != expected_d or index.ntotal != meta["ntotal"]:
        raise IndexMismatchError(
            f"{index_file} (d={index.d}, n={index.ntotal}) does not match {meta_file} (d={expected_d}, "
            f"n={meta['ntotal']}); the files come from different saves."
        )
    ids_file = folder / "doc_ids.json"
    doc_ids = None
    if ids_file.is_file():
        try:
            doc_ids = json.loads(ids_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise IndexMismatchError(f"{ids_file} is not valid JSON ({err}); save the index again.") from err
        if not isinstance(doc_ids, list) or len(doc_ids) != index.ntotal:
            got = f"{len(doc_ids)} ids" if isinstance(doc_ids, list) else type(doc_ids).__name__
            raise IndexMismatchError(
                f"{ids_file} holds {got} but the index holds {index.ntotal} documents; the files come from "
                "different saves. Save the index again with save_index()."
            )
    result = MagnitudeIndex(
        index=index,
        head=spec,
        kind=meta["kind"],
        transform=meta["transform"],
        dim=int(meta["dim"]),
        max_norm=meta["max_norm"],
        doc_ids=doc_ids,
        params=dict(meta.get("params", {})),
    )
    return result


# --------------------------------------------------------------------------------------------------------
# Streamed corpus encoding
# --------------------------------------------------------------------------------------------------------
def _corpus_fingerprint(corpus: Sequence[str], chunk_size: int) -> str:
    h = hashlib.sha256()
    h.update(f"{len(corpus)}:{chunk_size}".encode())
    for i in range(len(corpus)):
        text = corpus[i]
        if not isinstance(text, str):
            raise TypeError(
                f"encode_corpus: corpus[{i}] is {text!r} ({type(text).__name__}), not a string. Drop or fill "
                "missing texts first (e.g. [t or '' for t in corpus] if an empty document is what you mean)."
            )
        h.update(hashlib.sha256(text.encode("utf-8")).digest())
    return h.hexdigest()


def _model_fingerprint(model: SentenceTransformer) -> dict[str, Any]:
    try:
        spec = asdict(head_spec(model))
    except ValueError:
        spec = None
    return {
        "modules": [type(m).__module__ + "." + type(m).__name__ for m in model.children()],
        "head": spec,
        "dim": model.get_embedding_dimension(),
        "max_seq_length": getattr(model, "max_seq_length", None),
    }


def encode_corpus(
    model: SentenceTransformer,
    corpus: Sequence[str],
    path: str | os.PathLike[str],
    batch_size: int = 64,
    chunk_size: int = 10_000,
    role: Literal["document", "query"] = "document",
    processes: int | None = None,
    pool: dict[str, Any] | None = None,
    show_progress_bar: bool = True,
    keep_chunks: bool = False,
) -> np.ndarray:
    """Encode ``corpus`` chunk by chunk to disk, resumable, with bounded memory; return a read-only memmap.

    Each chunk of ``chunk_size`` texts is encoded (``model.encode_document`` for ``role="document"``, so the
    head sees its role) and written atomically to ``path/chunks/chunk_NNNNN.npy`` (temporary file + rename,
    so a crash never leaves a half-written chunk). When every chunk exists they are copied into
    ``path/embeddings.npy`` (a ``.npy`` file, opened as a memmap) and ``path/meta.json`` is marked complete.
    Calling again after an interruption re-encodes only the missing chunks; calling again after completion
    only opens the file. Memory holds one chunk of texts and embeddings at a time (``corpus`` may be any
    lazy sequence, e.g. a ``datasets`` column), so peak RSS does not grow with the corpus
    (``benchmarks/streaming_rss.py``).

    Args:
        model: the SentenceTransformer (with its head attached).
        corpus: texts, any ``Sequence[str]`` (``len`` and integer indexing; read one chunk at a time).
        path: output folder (created).
        batch_size: encoding batch size.
        chunk_size: texts per on-disk chunk (the unit of resume; default 10,000).
        role: ``"document"`` (default) or ``"query"``.
        processes: if > 1, encode through ST's multi-process pool
            (``model.start_multi_process_pool(["cpu"] * processes)``, or CUDA devices when available), started
            and stopped here.
        pool: an already started ST pool (``model.start_multi_process_pool(...)``); overrides ``processes``.
        show_progress_bar: a tqdm bar over documents (per chunk).
        keep_chunks: keep the chunk files after assembly (default: delete them).

    Returns:
        ``np.memmap``-backed ``(len(corpus), dim)`` float32 array (read-only) of ``path/embeddings.npy``.

    Raises:
        TypeError: ``corpus`` is a single string or holds a non-string item (``None``, a number), named by index.
        ValueError: ``path`` holds an encoding of a different corpus, chunk size or model (delete the folder
            or choose another path), or an empty corpus.
    """
    from tqdm.auto import tqdm

    if isinstance(corpus, str):
        raise TypeError("encode_corpus: corpus must be a sequence of texts, not a single string.")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"encode_corpus: chunk_size must be an integer >= 1, got {chunk_size!r}.")
    role = resolve_role(role)
    if role is None:
        raise ValueError("encode_corpus: role must be 'document' or 'query'.")
    n = len(corpus)
    if n == 0:
        raise ValueError("encode_corpus: the corpus is empty.")
    folder = Path(path)
    chunks_dir = folder / "chunks"
    chunks_dir.mkdir(parents=True, exist_ok=True)
    meta_file = folder / "meta.json"
    dim = int(model.get_embedding_dimension())
    meta = {
        "n": n,
        "dim": dim,
        "chunk_size": int(chunk_size),
        "role": role,
        "corpus_sha256": _corpus_fingerprint(corpus, int(chunk_size)),
        "model": _model_fingerprint(model),
    }
    if meta_file.is_file():
        old = json.loads(meta_file.read_text(encoding="utf-8"))
        complete = old.pop("complete", False)
        old.pop("seconds", None)
        if old != meta:
            diff = sorted(k for k in set(old) | set(meta) if old.get(k) != meta.get(k))
            raise ValueError(
                f"{folder} holds an encoding with different {diff}; resume needs the same corpus, chunk_size, "
                "role and model. Delete the folder or pass another path."
            )
        if complete and (folder / "embeddings.npy").is_file():
            return np.load(folder / "embeddings.npy", mmap_mode="r")
    else:
        meta_file.write_text(json.dumps(meta, indent=2), encoding="utf-8")

    n_chunks = math.ceil(n / chunk_size)
    chunk_path = [chunks_dir / f"chunk_{i:05d}.npy" for i in range(n_chunks)]

    def chunk_done(i: int) -> bool:
        p = chunk_path[i]
        if not p.is_file():
            return False
        try:
            arr = np.load(p, mmap_mode="r")
        except (ValueError, OSError):
            return False
        return arr.shape == (min(chunk_size, n - i * chunk_size), dim)

    todo = [i for i in range(n_chunks) if not chunk_done(i)]
    done_docs = n - sum(min(chunk_size, n - i * chunk_size) for i in todo)
    if done_docs:
        logger.info("encode_corpus: resuming, %d of %d chunks already on disk", n_chunks - len(todo), n_chunks)
    own_pool = None
    if pool is None and processes is not None and processes > 1:
        import torch

        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] or ["cpu"] * int(processes)
        own_pool = pool = model.start_multi_process_pool(devices[: int(processes)] if devices[0] != "cpu" else devices)
    encode = model.encode_document if resolve_role(role) == "document" else model.encode_query
    start_time = time.perf_counter()
    try:
        with tqdm(total=n, initial=done_docs, desc="encode_corpus", unit="doc", disable=not show_progress_bar) as bar:
            for i in todo:
                lo, hi = i * chunk_size, min(n, (i + 1) * chunk_size)
                texts = [str(corpus[j]) for j in range(lo, hi)]
                kwargs: dict[str, Any] = {"batch_size": batch_size, "convert_to_numpy": True, "show_progress_bar": False}
                if pool is not None:
                    kwargs["pool"] = pool
                emb = np.asarray(encode(texts, **kwargs), dtype=np.float32)
                tmp = chunk_path[i].with_suffix(".tmp.npy")
                np.save(tmp, emb)
                os.replace(tmp, chunk_path[i])
                bar.update(hi - lo)
                del texts, emb
    finally:
        if own_pool is not None:
            model.stop_multi_process_pool(own_pool)

    out_tmp = folder / "embeddings.tmp.npy"
    out = np.lib.format.open_memmap(out_tmp, mode="w+", dtype=np.float32, shape=(n, dim))
    for i in range(n_chunks):
        out[i * chunk_size : min(n, (i + 1) * chunk_size)] = np.load(chunk_path[i], mmap_mode="r")
    out.flush()
    del out
    os.replace(out_tmp, folder / "embeddings.npy")
    meta["complete"] = True
    meta["seconds"] = round(time.perf_counter() - start_time, 3)
    meta_file.write_text(json.dumps(meta, indent=2), encoding="utf-8")
    if not keep_chunks:
        for p in chunk_path:
            p.unlink(missing_ok=True)
    return np.load(folder / "embeddings.npy", mmap_mode="r")
