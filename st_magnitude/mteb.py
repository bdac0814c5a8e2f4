"""mteb 2.x integration: an encoder wrapper that keeps magnitudes and applies the symmetry guard, and local tasks.

* :class:`MagnitudeEncoder` satisfies mteb's ``EncoderProtocol`` (``mteb/models/models_protocols.py``): it maps
  mteb's ``prompt_type`` (query/document) to the head's role (``encode_query``/``encode_document``), declares
  the similarity mteb must use (``dot`` whenever the head keeps a magnitude -- mteb's FAISS backend,
  ``faiss_search_index.py``, re-normalizes *both* sides of a model that declares ``cosine``, which would
  silently turn QNorm/DNorm into Cosine) and runs :func:`st_magnitude.symmetry.check_task` on each task before
  encoding anything for it. ``mteb.evaluate(MagnitudeEncoder(model), tasks)`` works unchanged.
* :class:`LocalRetrievalTask` (a BEIR folder) and :class:`LocalSTSTask` (an STS ``<split>.tsv``) are real mteb
  tasks (subclasses of ``AbsTaskRetrieval``/``AbsTaskSTS`` with their own ``TaskMetadata``) loaded from disk,
  for offline use; :func:`get_task` resolves a name to a local task or, failing that, to ``mteb.get_task``.
* :func:`evaluate` runs a model on tasks (all guarded before anything is encoded) and returns
  ``{"results": {TASK: {"main_score": x, ...}}}``; ``st-magnitude evaluate`` is its command line.

This module is named ``st_magnitude.mteb``; it imports the top-level ``mteb`` package with absolute imports
(``from __future__ import annotations`` + ``import mteb``), which Python 3 resolves to the installed package.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from st_magnitude.data import BeirData, get_data_dir, load_beir, load_sts, subsample_beir
from st_magnitude.errors import DataValidationError
from st_magnitude.heads import find_head
from st_magnitude.symmetry import SYMMETRIC_FALLBACKS, SymmetryDecision, check_task

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = [
    "MagnitudeEncoder",
    "LocalRetrievalTask",
    "LocalSTSTask",
    "subsample_beir",
    "get_task",
    "get_tasks",
    "evaluate",
    "register_cli",
]

_MTEB_IMPORT_ERROR = "st_magnitude.mteb needs mteb>=2 (pip install 'mteb>=2,<3')."


def _mteb_bases() -> tuple[type, type, type]:
    try:
        from mteb.abstasks.retrieval import AbsTaskRetrieval
        from mteb.abstasks.sts import AbsTaskSTS
        from mteb.models.abs_encoder import AbsEncoder
    except ImportError as exc:  # pragma: no cover - mteb is a dependency
        raise ImportError(_MTEB_IMPORT_ERROR) from exc
    return AbsEncoder, AbsTaskRetrieval, AbsTaskSTS


_AbsEncoder, _AbsTaskRetrieval, _AbsTaskSTS = _mteb_bases()


# --------------------------------------------------------------------------------------------------------------
# The encoder wrapper
# --------------------------------------------------------------------------------------------------------------
def _model_fingerprint(model: SentenceTransformer, extra: str) -> str:
    """Short sha256 over the weights (names, shapes, bytes) and ``extra``: a revision that changes with the model.

    mteb caches results per (model name, revision); this keeps two different fine-tunes (or heads) apart.
    """
    digest = hashlib.sha256(extra.encode("utf-8"))
    for name, tensor in model.state_dict().items():
        digest.update(name.encode("utf-8"))
        digest.update(str(tuple(tensor.shape)).encode("utf-8"))
        digest.update(tensor.detach().cpu().contiguous().view(-1).numpy().view(np.uint8).tobytes())
    return digest.hexdigest()[:16]


class MagnitudeEncoder(_AbsEncoder):  # type: ignore[misc,valid-type]
    """mteb ``EncoderProtocol`` wrapper of a SentenceTransformer with a magnitude head.

    * Roles: mteb's ``prompt_type`` ``query``/``document`` -> ``model.encode_query``/``encode_document`` (the
      head reads the role; ST applies the model's own ``prompts["query"]``/``["document"]`` if set). Without a
      prompt type (symmetric tasks) -> ``model.encode`` without a role, which only symmetric heads accept.
    * Similarity: ``mteb_model_meta.similarity_fn_name`` is ``dot`` when the head keeps a magnitude (QNorm, DNorm,
      Dot, LearnableNorm with a γ < 1), else ``cosine``; :meth:`similarity` and :meth:`similarity_pairwise`
      follow it (mteb's ``AbsEncoder``). Declaring ``cosine`` for a magnitude head is wrong: mteb's FAISS backend
      and ``cos_sim`` re-normalize both sides. ``similarity_fn_name="cosine"`` is accepted only as a diagnostic
      (a warning is logged) -- the tests use it to show the number it gives is different.
    * Guard: the first ``encode`` call of each task runs :func:`st_magnitude.symmetry.check_task`; an asymmetric
      head on a symmetric task raises :class:`~st_magnitude.errors.SymmetryViolationError` before anything is
      encoded, unless ``symmetric_fallback="cosine"``: then both sides are the L2-normalized head outputs (the
      head only rescales, so this is the normalized pooled embedding) and the decision is recorded in
      :attr:`decisions` (and in :func:`evaluate`'s results).

    Args:
        model: the SentenceTransformer (head attached with :func:`~st_magnitude.heads.attach_head`, or none).
        symmetric_fallback: ``None`` (refuse asymmetric heads on symmetric tasks) or ``"cosine"`` (opt-in).
        similarity_fn_name: ``None`` = from the head (see above); ``"dot"`` or ``"cosine"`` to force.
        model_name: mteb model name ``org/name`` (default ``st-magnitude/<model card name or "model">``).
        revision: mteb revision (default: a sha256 fingerprint of the weights, head and settings, so mteb's
            result cache never mixes two models).

    Raises:
        ValueError: unknown ``symmetric_fallback`` or ``similarity_fn_name``, or a name without ``/``.

    Example::

        import mteb
        from st_magnitude.mteb import MagnitudeEncoder, get_task
        model = attach_head(load_model(), QNorm())
        result = mteb.evaluate(MagnitudeEncoder(model), [get_task("beir-scifact")], cache=None)
    """

    def __init__(
        self,
        model: SentenceTransformer,
        symmetric_fallback: str | None = None,
        similarity_fn_name: str | None = None,
        model_name: str | None = None,
        revision: str | None = None,
    ) -> None:
        from mteb.models.model_meta import ModelMeta, ScoringFunction

        if symmetric_fallback is not None and symmetric_fallback not in SYMMETRIC_FALLBACKS:
            raise ValueError(
                f"symmetric_fallback must be None or one of {list(SYMMETRIC_FALLBACKS)}, got {symmetric_fallback!r}."
            )
        self.model = model
        self.symmetric_fallback = symmetric_fallback
        self.decisions: dict[str, SymmetryDecision] = {}
        head = find_head(model)
        natural = head.similarity_fn_name if head is not None else (model.similarity_fn_name or "cosine")
        declared = similarity_fn_name or natural
        if declared not in ("dot", "cosine"):
            raise ValueError(f"similarity_fn_name must be 'dot' or 'cosine', got {declared!r}.")
        if head is not None and head.keeps_magnitude and declared == "cosine":
            logger.warning(
                "%s keeps a magnitude but similarity_fn_name='cosine' was declared: mteb will re-normalize both sides "
                "and the magnitude is dropped (diagnostic use only).",
                head.describe(),
            )
        self.similarity_fn_name = declared
        card_name = getattr(getattr(model, "model_card_data", None), "model_name", None)
        name = model_name or f"st-magnitude/{(card_name or 'model').replace('/', '__')}"
        if "/" not in name:
            raise ValueError(f"model_name must look like 'organization/name', got {name!r}.")
        head_desc = head.describe() if head is not None else "none"
        if revision is None:
            revision = _model_fingerprint(model, f"{head_desc}|{declared}|{symmetric_fallback}")
        self.mteb_model_meta = ModelMeta.create_empty(
            overwrites={
                "name": name,
                "revision": revision,
                "embed_dim": (getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension)(),
                "max_tokens": model.max_seq_length,
                "similarity_fn_name": ScoringFunction.DOT_PRODUCT if declared == "dot" else ScoringFunction.COSINE,
                "framework": ["Sentence Transformers", "PyTorch"],
                "open_weights": True,
            }
        )

    # ---- guard ---------------------------------------------------------------------------------------------
    def check(self, task_name: str, task_type: str) -> SymmetryDecision:
        """Run the symmetry guard for one task (cached per task name). See :func:`~st_magnitude.symmetry.check_task`."""
        decision = self.decisions.get(task_name)
        if decision is None or decision.task_type != task_type:
            decision = check_task(self.model, task_name, task_type, symmetric_fallback=self.symmetric_fallback)
            self.decisions[task_name] = decision
        return decision

    # ---- EncoderProtocol -----------------------------------------------------------------------------------
    def encode(
        self,
        inputs: Any,
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        prompt_type: Any = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """Encode an mteb DataLoader of text batches; returns ``(n, dim)`` float32.

        Raises:
            SymmetryViolationError: asymmetric head on a symmetric task without ``symmetric_fallback`` (before any
                encoding).
            MissingTaskError: an asymmetric head asked to encode without a role on an asymmetric task.
        """
        decision = self.check(task_metadata.name, task_metadata.type)
        sentences = [text for batch in inputs for text in batch["text"]]
        options = {
            "batch_size": int(kwargs.get("batch_size", 32)),
            "show_progress_bar": bool(kwargs.get("show_progress_bar", False)),
            "convert_to_numpy": True,
        }
        role = getattr(prompt_type, "value", prompt_type)
        if decision.uses_fallback:
            # Any role gives the same direction (the head only rescales x by a positive factor); normalize it.
            embeddings = self.model.encode_query(sentences, **options)
            norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
            return (embeddings / np.maximum(norms, 1e-12)).astype(np.float32)
        if role == "query":
            embeddings = self.model.encode_query(sentences, **options)
        elif role == "document":
            embeddings = self.model.encode_document(sentences, **options)
        else:
            embeddings = self.model.encode(sentences, **options)
        return np.asarray(embeddings, dtype=np.float32)


# --------------------------------------------------------------------------------------------------------------
# Local tasks
# --------------------------------------------------------------------------------------------------------------
def _local_metadata(
    name: str,
    task_type: str,
    path: str,
    split: str,
    main_score: str,
    description: str,
    revision: str,
) -> Any:
    from mteb.abstasks.task_metadata import TaskMetadata

    return TaskMetadata(
        name=name,
        description=description,
        dataset={"path": path, "revision": revision},
        type=task_type,
        category="t2t",
        modalities=["text"],
        eval_splits=[split],
        eval_langs=["eng-Latn"],
        main_score=main_score,
        license="not specified",
        annotations_creators="human-annotated",
        dialect=[],
        sample_creation="found",
        bibtex_citation="",
        domains=[],
        task_subtypes=[],
        reference=None,
        date=None,
    )


def _sample_suffix(max_queries: int | None, max_docs: int | None, seed: int) -> str:
    if max_queries is None and max_docs is None:
        return ""
    return f"-q{max_queries or 'all'}-d{max_docs or 'all'}-s{seed}"


class _InstanceMetadata:
    """Per-instance ``metadata`` for local tasks: mteb's ``unload_data`` pops a ``metadata`` instance attribute, so
    the ``TaskMetadata`` is kept under another name."""

    @property
    def metadata(self) -> Any:
        return self.__dict__["_st_magnitude_metadata"]

    @metadata.setter
    def metadata(self, value: Any) -> None:
        self.__dict__["_st_magnitude_metadata"] = value


class LocalRetrievalTask(_InstanceMetadata, _AbsTaskRetrieval):  # type: ignore[misc,valid-type]
    """An mteb Retrieval task loaded from a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``).

    Data goes through :func:`st_magnitude.data.load_beir` (validation, ``ignore_identical_ids`` for ArguAna-style
    sets) and optionally :func:`subsample_beir`. Documents are ``title + " " + text`` exactly as in
    :class:`~st_magnitude.data.BeirData` (passed as mteb ``text`` with an empty ``title``, so mteb encodes the same
    string as ST's evaluator). Main score ``ndcg_at_10`` (mteb/pytrec_eval graded NDCG@10).

    Args:
        name_or_path: dataset folder name under the data dir (e.g. ``"beir-scifact"``) or a path.
        split: qrels split (default ``"test"``).
        max_queries, max_docs, seed: optional subsample (see :func:`subsample_beir`); reflected in the task name
            (``beir-scifact-q50-d300-s0``) so mteb's result cache never mixes subsamples.
        data_dir: data directory (see :mod:`st_magnitude.data`).
        task_name: override the task name.

    Raises:
        DataValidationError: missing folder/files/split (raised by ``load_data``, i.e. at evaluation time, or
            immediately for a missing folder).
    """

    def __init__(
        self,
        name_or_path: str | os.PathLike[str],
        split: str = "test",
        max_queries: int | None = None,
        max_docs: int | None = None,
        seed: int = 0,
        data_dir: str | os.PathLike[str] | None = None,
        task_name: str | None = None,
    ) -> None:
        from st_magnitude.data import resolve_dataset

        folder = resolve_dataset(name_or_path, data_dir)
        if folder is None:
            raise DataValidationError(f"{name_or_path!r} is not a local BEIR folder; use mteb.get_task for Hub tasks.")
        self.folder = Path(folder)
        self.split = split
        self.max_queries, self.max_docs, self.seed = max_queries, max_docs, seed
        name = task_name or self.folder.name + _sample_suffix(max_queries, max_docs, seed)
        self.metadata = _local_metadata(
            name=name,
            task_type="Retrieval",
            path=str(self.folder),
            split=split,
            main_score="ndcg_at_10",
            description=f"Local BEIR-format retrieval set {self.folder.name} ({split} qrels), loaded by st-magnitude.",
            revision="local" + _sample_suffix(max_queries, max_docs, seed),
        )
        super().__init__()
        self.beir_data: BeirData | None = None

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        """Load (and subsample) the BEIR folder into mteb's ``RetrievalSplitData`` layout."""
        if self.data_loaded:
            return
        from datasets import Dataset

        data = load_beir(self.folder, split=self.split)
        data = subsample_beir(data, self.max_queries, self.max_docs, self.seed)
        self.beir_data = data
        self.ignore_identical_ids = data.ignore_identical_ids
        corpus_ids = list(data.corpus)
        query_ids = list(data.queries)
        self.dataset = {
            "default": {
                self.split: {
                    "corpus": Dataset.from_dict(
                        {"id": corpus_ids, "title": [""] * len(corpus_ids), "text": [data.corpus[d] for d in corpus_ids]}
                    ),
                    "queries": Dataset.from_dict({"id": query_ids, "text": [data.queries[q] for q in query_ids]}),
                    "relevant_docs": {q: dict(docs) for q, docs in data.qrels.items()},
                    "top_ranked": None,
                }
            }
        }
        self.data_loaded = True


class LocalSTSTask(_InstanceMetadata, _AbsTaskSTS):  # type: ignore[misc,valid-type]
    """An mteb STS task loaded from ``<folder>/<split>.tsv`` (``sentence1``, ``sentence2``, ``score``; QUOTE_NONE).

    Main score ``spearman``: Spearman ρ of the *model's declared similarity* (dot product for magnitude heads)
    with the gold scores, not mteb's default ``cosine_spearman`` (which would ignore a Dot head's magnitudes).
    ``min_score``/``max_score`` are the gold range (STS-B 0-5, SICK-R 1-5; they only rescale the gold scores, so
    correlations do not depend on them).

    Args:
        name_or_path: folder name under the data dir (``"stsb"``, ``"sick-r"``) or a path.
        split: file stem (default ``"test"``).
        max_pairs, seed: optional seeded subsample of pairs.
        data_dir: data directory.
        task_name: override the task name.
        min_score, max_score: gold score range (default: 1-5 for folders named ``sick*``, else 0-5).
    """

    def __init__(
        self,
        name_or_path: str | os.PathLike[str],
        split: str = "test",
        max_pairs: int | None = None,
        seed: int = 0,
        data_dir: str | os.PathLike[str] | None = None,
        task_name: str | None = None,
        min_score: float | None = None,
        max_score: float | None = None,
    ) -> None:
        from st_magnitude.data import resolve_dataset

        folder = resolve_dataset(name_or_path, data_dir)
        if folder is None:
            raise DataValidationError(f"{name_or_path!r} is not a local STS folder; use mteb.get_task for Hub tasks.")
        self.folder = Path(folder)
        self.split = split
        self.max_pairs, self.seed = max_pairs, seed
        is_sick = self.folder.name.lower().startswith("sick")
        self.min_score = (1 if is_sick else 0) if min_score is None else min_score
        self.max_score = 5 if max_score is None else max_score
        suffix = f"-n{max_pairs}-s{seed}" if max_pairs is not None else ""
        self.metadata = _local_metadata(
            name=task_name or self.folder.name + suffix,
            task_type="STS",
            path=str(self.folder),
            split=split,
            main_score="spearman",
            description=f"Local STS set {self.folder.name} ({split}.tsv), loaded by st-magnitude.",
            revision="local" + suffix,
        )
        super().__init__()

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        """Read the TSV with :func:`st_magnitude.data.load_sts` into a ``datasets.Dataset``."""
        if self.data_loaded:
            return
        from datasets import Dataset

        sts = load_sts(self.folder, split=self.split)
        rows = list(range(len(sts.scores)))
        if self.max_pairs is not None and self.max_pairs < len(rows):
            rows = sorted(random.Random(self.seed).sample(rows, self.max_pairs))
        self.dataset = {
            self.split: Dataset.from_dict(
                {
                    "sentence1": [sts.sentences1[i] for i in rows],
                    "sentence2": [sts.sentences2[i] for i in rows],
                    "score": [float(sts.scores[i]) for i in rows],
                }
            )
        }
        self.data_loaded = True


def get_task(
    name: str,
    data_dir: str | os.PathLike[str] | None = None,
    split: str = "test",
    max_queries: int | None = None,
    max_docs: int | None = None,
    max_pairs: int | None = None,
    seed: int = 0,
) -> Any:
    """Resolve a task name: a local folder (BEIR -> :class:`LocalRetrievalTask`, STS TSVs -> :class:`LocalSTSTask`),
    else a standard mteb task (``mteb.get_task(name)``, needs the Hub for its data).

    Raises:
        DataValidationError: a local folder that is neither layout.
        KeyError / ValueError: from mteb for an unknown standard task name.
    """
    root = get_data_dir(data_dir)
    candidates = [Path(name)] + ([root / name] if root is not None else [])
    folder = next((p for p in candidates if p.is_dir()), None)
    if folder is not None:
        if (folder / "qrels").is_dir():
            return LocalRetrievalTask(folder, split=split, max_queries=max_queries, max_docs=max_docs, seed=seed)
        if (folder / f"{split}.tsv").is_file():
            return LocalSTSTask(folder, split=split, max_pairs=max_pairs, seed=seed)
        raise DataValidationError(
            f"{folder}: neither a BEIR folder (qrels/<split>.tsv) nor an STS folder ({split}.tsv with sentence1, "
            "sentence2, score)."
        )
    import mteb

    try:
        return mteb.get_task(name)
    except (KeyError, ValueError) as exc:
        local = sorted(p.name for p in root.iterdir() if p.is_dir()) if root is not None and root.is_dir() else []
        raise DataValidationError(
            f"Unknown task {name!r}: not a local folder (data dir {root}; available: {local or 'none'}) and not an "
            f"mteb task ({exc})."
        ) from None


def get_tasks(names: Iterable[str], **kwargs: Any) -> list[Any]:
    """:func:`get_task` for each name."""
    return [get_task(n, **kwargs) for n in names]


# --------------------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------------------
def evaluate(
    model: SentenceTransformer | MagnitudeEncoder,
    tasks: Sequence[Any],
    symmetric_fallback: str | None = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    cache: Any = None,
) -> dict[str, Any]:
    """Run ``model`` on mteb ``tasks`` after guarding *all* of them, and return a JSON-ready summary.

    Every task is checked with :func:`~st_magnitude.symmetry.check_task` first, so a refused task stops the run
    before anything is encoded. Then ``mteb.evaluate(MagnitudeEncoder(...), tasks, cache=cache)`` runs unchanged.

    Returns:
        ``{"model": {...}, "results": {TASK: {"main_score": float, "main_score_name": str, "task_type": str,
        "split": str, "symmetric_fallback": None | "cosine", "head": str, "scores": {metric: value}}}}``.
        Scores are mteb's (fractions; NDCG@10 in [0, 1], Spearman ρ in [-1, 1]).

    Raises:
        SymmetryViolationError: an asymmetric head on a symmetric task without ``symmetric_fallback``.
    """
    import mteb

    wrapper = (
        model
        if isinstance(model, MagnitudeEncoder)
        else MagnitudeEncoder(model, symmetric_fallback=symmetric_fallback)
    )
    for task in tasks:  # the guard, for every task, before any encoding
        wrapper.check(task.metadata.name, task.metadata.type)
    result = mteb.evaluate(
        wrapper,
        list(tasks),
        encode_kwargs={"batch_size": batch_size, "show_progress_bar": show_progress_bar},
        cache=cache,
        show_progress_bar=show_progress_bar,
        overwrite_strategy="always",
    )
    summary: dict[str, Any] = {
        "model": {
            "name": wrapper.mteb_model_meta.name,
            "revision": wrapper.mteb_model_meta.revision,
            "similarity_fn_name": wrapper.similarity_fn_name,
            "symmetric_fallback": wrapper.symmetric_fallback,
        },
        "results": {},
    }
    for task_result in result.task_results:
        name = task_result.task_name
        decision = wrapper.decisions[name]
        split, entries = next(iter(task_result.scores.items()))
        scores = entries[0]
        for entry in entries:  # record the fallback in mteb's own result object too
            entry["st_magnitude_symmetric_fallback"] = decision.fallback
        main_name = _task_main_score(tasks, name)
        summary["results"][name] = {
            "main_score": float(scores["main_score"]),
            "main_score_name": main_name,
            "task_type": decision.task_type,
            "split": split,
            "symmetric_fallback": decision.fallback,
            "head": decision.head,
            "scores": {k: v for k, v in scores.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
        }
    if result.exceptions:
        summary["exceptions"] = [str(e) for e in result.exceptions]
    return summary


def _task_main_score(tasks: Sequence[Any], name: str) -> str:
    for task in tasks:
        if task.metadata.name == name:
            return str(task.metadata.main_score)
    return "main_score"


def format_table(summary: dict[str, Any]) -> str:
    """A plain-text table of :func:`evaluate`'s summary: task, type, main score name and value, fallback."""
    rows = [("task", "type", "metric", "score", "fallback")]
    for name, res in summary["results"].items():
        rows.append((name, res["task_type"], res["main_score_name"], f"{res['main_score']:.4f}", str(res["symmetric_fallback"] or "-")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------------
def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``st-magnitude evaluate``."""
    parser = subparsers.add_parser(
        "evaluate",
        help="run mteb tasks (local folders or standard names) with the symmetry guard",
        description="Evaluate a model with mteb. Asymmetric heads (QNorm, DNorm, unequal-γ LearnableNorm) are refused "
        "on symmetric tasks (STS, clustering, ...) before anything is encoded, unless --symmetric-fallback cosine.",
    )
    parser.add_argument("--model", default=None, help="saved model folder (default: packaged all-MiniLM-L6-v2)")
    parser.add_argument("--tasks", required=True, help="comma-separated: local folders (beir-scifact, stsb) or mteb names")
    parser.add_argument("--symmetric-fallback", choices=list(SYMMETRIC_FALLBACKS), default=None,
                        help="score symmetric tasks (STS, clustering, ...) of an asymmetric head with both sides "
                        "normalized, recorded in results.json (default: refuse them with SymmetryViolationError)")
    parser.add_argument("--output", required=True, help="directory for results.json")
    parser.add_argument("--data-dir", default=None, help="data directory (default $ST_MAGNITUDE_DATA or ../shared/data)")
    parser.add_argument("--split", default="test", help="split to evaluate (default test)")
    parser.add_argument("--max-queries", type=int, default=None, help="subsample retrieval queries")
    parser.add_argument("--max-docs", type=int, default=None, help="subsample retrieval corpus (judged docs kept)")
    parser.add_argument("--max-pairs", type=int, default=None, help="subsample STS pairs")
    parser.add_argument("--seed", type=int, default=0, help="subsampling seed (default 0)")
    parser.add_argument("--batch-size", type=int, default=32, help="encoding batch size (default 32)")
    parser.add_argument("--max-seq-length", type=int, default=None, help="token limit (default: the model's)")
    parser.set_defaults(func=_cli_evaluate)


def _cli_evaluate(args: argparse.Namespace) -> int:
    import sys

    from st_magnitude.models import load_model

    names = [n.strip() for n in args.tasks.split(",") if n.strip()]
    tasks = get_tasks(
        names,
        data_dir=args.data_dir,
        split=args.split,
        max_queries=args.max_queries,
        max_docs=args.max_docs,
        max_pairs=args.max_pairs,
        seed=args.seed,
    )
    model = load_model(args.model)
    if args.max_seq_length:
        model.max_seq_length = args.max_seq_length
    wrapper = MagnitudeEncoder(model, symmetric_fallback=args.symmetric_fallback)
    for task in tasks:  # refuse before encoding and before writing anything
        wrapper.check(task.metadata.name, task.metadata.type)
    summary = evaluate(wrapper, tasks, batch_size=args.batch_size, show_progress_bar=sys.stderr.isatty())
    summary["command"] = "st-magnitude evaluate " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else None
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(format_table(summary))
    print(f"wrote {out / 'results.json'}")
    return 0 if not summary.get("exceptions") else 1

