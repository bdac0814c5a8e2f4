"""Loading and validating retrieval, training and STS data (BEIR folders, triplet files, STS TSVs).

Datasets are found by name under a data directory: ``data_dir`` argument, else the ``ST_MAGNITUDE_DATA``
environment variable, else ``../shared/data`` next to the working directory. A name that is an existing
folder is used as is; a name that looks like a Hub dataset id (``owner/name``) is loaded with
:func:`datasets.load_dataset` when online (BEIR layout: configs ``corpus`` and ``queries`` plus a
``<id>-qrels`` dataset, as published under ``BeIR/``).

Validation never drops silently: unknown ids in qrels, empty texts and qrels rows for dropped texts are
dropped *and counted* in :attr:`BeirData.report` (and logged); duplicate ids, malformed lines, missing
files and missing splits raise :class:`~st_magnitude.errors.DataValidationError` naming the fix.
"""

from __future__ import annotations

import csv
import gzip
import json
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from st_magnitude.errors import DataValidationError

logger = logging.getLogger(__name__)

__all__ = [
    "DATA_ENV",
    "get_data_dir",
    "resolve_dataset",
    "BeirData",
    "load_beir",
    "load_training_triplets",
    "subsample_beir",
    "mine_negatives",
    "StsData",
    "load_sts",
]

DATA_ENV = "ST_MAGNITUDE_DATA"


def get_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The data directory: ``data_dir``, else ``$ST_MAGNITUDE_DATA``, else ``../shared/data`` if it exists."""
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    guess = Path.cwd().parent / "shared" / "data"
    return guess if guess.is_dir() else None


def resolve_dataset(name: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Find dataset ``name`` as a folder: the path itself, or ``<data_dir>/<name>``.

    Returns None when ``name`` looks like a Hub id (``owner/name``) and no such folder exists.

    Raises:
        DataValidationError: if nothing is found, listing the datasets that are available.
    """
    path = Path(name)
    if path.is_dir():
        return path
    root = get_data_dir(data_dir)
    if root is not None and (root / str(name)).is_dir():
        return root / str(name)
    if "/" in str(name) and not path.exists():
        return None  # Hub dataset id
    available = sorted(p.name for p in root.iterdir() if p.is_dir()) if root is not None and root.is_dir() else []
    raise DataValidationError(
        f"Dataset {str(name)!r} not found (data dir: {root}). Available: {available or 'none'}. Pass "
        f"--data-dir / data_dir=..., set {DATA_ENV}, or give a path to a BEIR-format folder."
    )


def _open_text(path: Path) -> Any:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        with _open_text(path) as handle:
            for line_no, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataValidationError(f"{path}:{line_no}: not valid JSON ({exc.msg}).") from None
                if not isinstance(row, dict):
                    raise DataValidationError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}.")
                yield line_no, row
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # gzip.BadGzipFile is an OSError
        raise DataValidationError(f"{path}: cannot be read as UTF-8 JSON lines{' (gzip)' if path.suffix == '.gz' else ''}: "
                                  f"{type(exc).__name__}: {exc}") from None


def _text_of(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


@dataclass
class BeirData:
    """A retrieval set in memory.

    Attributes:
        name: dataset name.
        split: qrels split (e.g. ``"test"``).
        corpus: document id -> text (``title + " " + text``, as BEIR/mteb concatenate them).
        queries: query id -> text, only the queries judged in ``split`` (with at least one relevant doc).
        qrels: query id -> {document id -> grade}; grades > 0 are relevant.
        ignore_identical_ids: exclude a document whose id equals the query id from that query's ranking
            (BEIR does this for ArguAna, whose queries are themselves corpus documents).
        report: counts of everything dropped or noticed during validation.
    """

    name: str
    split: str
    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    ignore_identical_ids: bool = False
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def relevant_docs(self) -> dict[str, set[str]]:
        """query id -> set of relevant document ids (grade > 0), the form ST's evaluator takes."""
        return {q: {d for d, g in docs.items() if g > 0} for q, docs in self.qrels.items()}


def _token_jaccard(a: str, b: str) -> float:
    """Jaccard overlap of the lower-cased white-space token sets of two texts (0 when both are empty)."""
    ta, tb = set(a.lower().split()), set(b.lower().split())
    return len(ta & tb) / len(ta | tb) if ta | tb else 0.0


def load_beir(
    name: str | os.PathLike[str],
    split: str = "test",
    data_dir: str | os.PathLike[str] | None = None,
    ignore_identical_ids: bool | None = None,
) -> BeirData:
    """Load a BEIR-format retrieval set (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``).

    Args:
        name: dataset folder name under the data dir, a path, or a Hub dataset id (``BeIR/scifact``).
        split: qrels split to load.
        data_dir: data directory (see module docstring).
        ignore_identical_ids: None = automatic: True when at least half of the judged queries share their id
            with a corpus document whose text is a near-copy (token Jaccard >= 0.5) and no qrels row judges a
            document identical to its query (ArguAna's layout), else False; colliding numeric ids of unrelated
            texts do not count. The decision is recorded in ``report``.

    Raises:
        DataValidationError: missing files or split, malformed lines, duplicate ids, or a split with no
            usable judgement.
    """
    folder = resolve_dataset(name, data_dir)
    if folder is None:
        corpus_rows, query_rows, qrel_rows = _load_beir_from_hub(str(name), split)
        source = f"hub:{name}"
    else:
        corpus_path = _first_existing(folder, ["corpus.jsonl", "corpus.jsonl.gz"])
        queries_path = _first_existing(folder, ["queries.jsonl", "queries.jsonl.gz"])
        qrels_dir = folder / "qrels"
        qrels_path = qrels_dir / f"{split}.tsv"
        if not qrels_path.is_file():
            splits = sorted(p.stem for p in qrels_dir.glob("*.tsv")) if qrels_dir.is_dir() else []
            raise DataValidationError(
                f"{folder}: no qrels for split {split!r} (expected {qrels_path}). Available splits: "
                f"{splits or 'none'}; pass one of them as split=... / --split."
            )
        corpus_rows = ((f"{corpus_path}:{n}", r) for n, r in _iter_jsonl(corpus_path))
        query_rows = ((f"{queries_path}:{n}", r) for n, r in _iter_jsonl(queries_path))
        qrel_rows = _iter_qrels(qrels_path)
        source = str(folder)

    report: dict[str, Any] = {"source": source, "split": split}
    corpus: dict[str, str] = {}
    empty_docs = 0
    for where, row in corpus_rows:
        doc_id = row.get("_id")
        if doc_id is None:
            raise DataValidationError(f"{where}: corpus row has no '_id'.")
        doc_id = str(doc_id)
        if doc_id in corpus:
            raise DataValidationError(f"{where}: duplicate corpus id {doc_id!r}; ids must be unique.")
        text = " ".join(t for t in (_text_of(row.get("title")), _text_of(row.get("text"))) if t)
        if not text:
            empty_docs += 1
            corpus[doc_id] = ""
            continue
        corpus[doc_id] = text
    all_queries: dict[str, str] = {}
    empty_queries = 0
    for where, row in query_rows:
        qid = row.get("_id")
        if qid is None:
            raise DataValidationError(f"{where}: query row has no '_id'.")
        qid = str(qid)
        if qid in all_queries:
            raise DataValidationError(f"{where}: duplicate query id {qid!r}; ids must be unique.")
        text = _text_of(row.get("text"))
        if not text:
            empty_queries += 1
        all_queries[qid] = text

    qrels: dict[str, dict[str, int]] = {}
    dropped = {"unknown_query": 0, "unknown_doc": 0, "empty_query": 0, "empty_doc": 0, "duplicate_pair": 0}
    for where, qid, did, grade in qrel_rows:
        if qid not in all_queries:
            dropped["unknown_query"] += 1
        elif did not in corpus:
            dropped["unknown_doc"] += 1
        elif not all_queries[qid]:
            dropped["empty_query"] += 1
        elif not corpus[did]:
            dropped["empty_doc"] += 1
        elif did in qrels.get(qid, {}):
            if qrels[qid][did] != grade:
                raise DataValidationError(
                    f"{where}: ({qid}, {did}) is judged twice with different grades ({qrels[qid][did]} and {grade}); "
                    "fix the qrels file."
                )
            dropped["duplicate_pair"] += 1
        else:
            qrels.setdefault(qid, {})[did] = grade
    corpus = {d: t for d, t in corpus.items() if t}
    qrels = {q: docs for q, docs in qrels.items() if any(g > 0 for g in docs.values())}
    if not qrels:
        raise DataValidationError(f"{source}: split {split!r} has no query with a relevant, non-empty document.")
    queries = {q: all_queries[q] for q in qrels}

    self_hits = sum(1 for q, docs in qrels.items() if q in docs)
    overlap = sum(1 for q in queries if q in corpus)
    # A shared id only marks a self-copy (ArguAna) when the texts agree too: numeric ids ("1", "2", ...) of
    # independent query and corpus files collide by chance.
    copies = sum(1 for q in queries if q in corpus and _token_jaccard(queries[q], corpus[q]) >= 0.5)
    if ignore_identical_ids is None:
        ignore_identical_ids = copies >= 0.5 * len(queries) and self_hits == 0
    report.update(
        {
            "docs": len(corpus),
            "queries": len(queries),
            "qrels": sum(len(d) for d in qrels.values()),
            "dropped_empty_docs": empty_docs,
            "empty_queries_in_file": empty_queries,
            "dropped_qrels": dropped,
            "query_ids_also_doc_ids": overlap,
            "query_ids_also_doc_ids_same_text": copies,
            "ignore_identical_ids": bool(ignore_identical_ids),
        }
    )
    if empty_docs or any(dropped.values()):
        logger.warning("%s (%s): dropped during validation: %d empty docs, qrels %s", name, split, empty_docs, dropped)
    return BeirData(
        name=Path(str(name)).name,
        split=split,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        ignore_identical_ids=bool(ignore_identical_ids),
        report=report,
    )


def _first_existing(folder: Path, names: list[str]) -> Path:
    for candidate in names:
        if (folder / candidate).is_file():
            return folder / candidate
    raise DataValidationError(f"{folder}: missing {names[0]} (BEIR layout: corpus.jsonl, queries.jsonl, qrels/).")


def _iter_qrels(path: Path) -> Iterator[tuple[str, str, str, int]]:
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None:
            return
        start = 2
        if len(header) < 3 or not header[2].lstrip("-").isdigit():
            pass  # a header row ("query-id corpus-id score")
        else:
            start = 1
            yield f"{path}:1", header[0], header[1], int(header[2])
        for line_no, row in enumerate(reader, start=start):
            if not row:
                continue
            if len(row) < 3:
                raise DataValidationError(f"{path}:{line_no}: expected 'query-id<TAB>corpus-id<TAB>score'.")
            try:
                grade = int(row[2])
            except ValueError:
                raise DataValidationError(
                    f"{path}:{line_no}: relevance grade {row[2]!r} is not an integer (BEIR/TREC grades are 0, 1, 2, ...)."
                ) from None
            yield f"{path}:{line_no}", row[0], row[1], grade


def _load_beir_from_hub(dataset_id: str, split: str) -> tuple[Iterator, Iterator, Iterator]:
    """Read a BEIR dataset published on the Hub (``BeIR/<name>`` with ``BeIR/<name>-qrels``)."""
    from datasets import load_dataset

    try:
        corpus = load_dataset(dataset_id, "corpus", split="corpus")
        queries = load_dataset(dataset_id, "queries", split="queries")
        qrels = load_dataset(f"{dataset_id}-qrels", split=split)
    except Exception as exc:  # network, missing config, offline mode
        raise DataValidationError(
            f"Could not load {dataset_id!r} from the Hugging Face Hub ({type(exc).__name__}: {exc}). Offline, "
            f"use a local BEIR folder under {DATA_ENV}."
        ) from exc
    corpus_rows = ((f"{dataset_id}/corpus:{i}", dict(r)) for i, r in enumerate(corpus))
    query_rows = ((f"{dataset_id}/queries:{i}", dict(r)) for i, r in enumerate(queries))
    qrel_rows = (
        (f"{dataset_id}-qrels/{split}:{i}", str(r["query-id"]), str(r["corpus-id"]), int(r["score"]))
        for i, r in enumerate(qrels)
    )
    return corpus_rows, query_rows, qrel_rows


def load_training_triplets(
    name: str | os.PathLike[str],
    data_dir: str | os.PathLike[str] | None = None,
    max_rows: int | None = None,
    with_negatives: bool = True,
    seed: int = 0,
) -> "datasets.Dataset":  # noqa: F821
    """Training rows as a :class:`datasets.Dataset` with columns ``anchor``, ``positive`` [, ``negative``].

    Sources, in order: ``train.jsonl`` / ``train.jsonl.gz`` in the folder (keys ``query``, ``positive``,
    optional ``negative``), else a BEIR folder's ``qrels/train.tsv`` (every relevant (query, document) pair).

    Args:
        name: dataset name under the data dir, or a path.
        max_rows: keep only the first ``max_rows`` rows after a seeded shuffle (None = all).
        with_negatives: keep the ``negative`` column when the file has one.
        seed: shuffle seed for ``max_rows``.

    Raises:
        DataValidationError: no training file, a row missing ``query``/``positive``, or no usable row.
    """
    from datasets import Dataset

    folder = resolve_dataset(name, data_dir)
    if folder is None:
        raise DataValidationError(f"{name!r}: training data must be a local folder (train.jsonl or BEIR train qrels).")
    path = next((folder / f for f in ("train.jsonl", "train.jsonl.gz") if (folder / f).is_file()), None)
    rows: dict[str, list[str]] = {"anchor": [], "positive": []}
    dropped_empty = 0
    if path is not None:
        has_negative = None
        file_has_negative = False
        for line_no, row in _iter_jsonl(path):
            if "query" not in row or "positive" not in row:
                raise DataValidationError(
                    f"{path}:{line_no}: training rows need 'query' and 'positive' (optional 'negative'); got keys "
                    f"{sorted(row)}."
                )
            if has_negative is None:
                file_has_negative = "negative" in row
                has_negative = with_negatives and file_has_negative
                if has_negative:
                    rows["negative"] = []
            elif ("negative" in row) != file_has_negative:
                raise DataValidationError(
                    f"{path}:{line_no}: this row {'has' if 'negative' in row else 'lacks'} a 'negative' but the first "
                    "row does not agree; give every row a negative, or none (use with_negatives=False / "
                    "--no-negatives to ignore them)."
                )
            texts = [_text_of(row["query"]), _text_of(row["positive"])]
            if has_negative:
                texts.append(_text_of(row.get("negative")))
            if not all(texts):
                dropped_empty += 1
                continue
            rows["anchor"].append(texts[0])
            rows["positive"].append(texts[1])
            if has_negative:
                rows["negative"].append(texts[2])
    else:
        beir = load_beir(folder, split="train", ignore_identical_ids=False)
        for qid, docs in beir.qrels.items():
            for did, grade in docs.items():
                if grade > 0:
                    rows["anchor"].append(beir.queries[qid])
                    rows["positive"].append(beir.corpus[did])
    if dropped_empty:
        logger.warning("%s: dropped %d training rows with an empty text", name, dropped_empty)
    if not rows["anchor"]:
        raise DataValidationError(f"{folder}: no usable training row (all empty or none present).")
    dataset = Dataset.from_dict(rows)
    if max_rows is not None and max_rows < len(dataset):
        dataset = dataset.shuffle(seed=seed).select(range(max_rows))
    dataset.info.description = json.dumps({"source": str(folder), "dropped_empty_rows": dropped_empty})
    return dataset


@dataclass
class StsData:
    """An STS split: sentence pairs with gold scores (a symmetric task)."""

    name: str
    split: str
    sentences1: list[str]
    sentences2: list[str]
    scores: list[float]


def load_sts(name: str | os.PathLike[str], split: str = "test", data_dir: str | os.PathLike[str] | None = None) -> StsData:
    """Read ``<split>.tsv`` with columns ``sentence1``, ``sentence2``, ``score`` (unquoted, QUOTE_NONE).

    Raises:
        DataValidationError: missing file/columns, a non-numeric score, or an empty sentence.
    """
    folder = resolve_dataset(name, data_dir)
    if folder is None:
        raise DataValidationError(f"{name!r}: STS data must be a local folder with <split>.tsv files.")
    path = folder / f"{split}.tsv"
    if not path.is_file():
        splits = sorted(p.stem for p in folder.glob("*.tsv"))
        raise DataValidationError(f"{path} not found. Available splits: {splits or 'none'}.")
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        missing = {"sentence1", "sentence2", "score"} - set(reader.fieldnames or [])
        if missing:
            raise DataValidationError(f"{path}: missing columns {sorted(missing)} (need sentence1, sentence2, score).")
        for line_no, row in enumerate(reader, start=2):
            a, b = _text_of(row["sentence1"]), _text_of(row["sentence2"])
            if not a or not b:
                raise DataValidationError(f"{path}:{line_no}: empty sentence.")
            try:
                score = float(row["score"])
            except (TypeError, ValueError):
                raise DataValidationError(f"{path}:{line_no}: score {row['score']!r} is not a number.") from None
            if not math.isfinite(score):
                raise DataValidationError(f"{path}:{line_no}: score {row['score']!r} is not finite.")
            scores.append(score)
            s1.append(a)
            s2.append(b)
    if len(scores) < 2 or len(set(scores)) < 2:
        raise DataValidationError(
            f"{path}: needs at least 2 pairs with different gold scores (got {len(scores)} pairs); a Spearman ρ is "
            "undefined otherwise."
        )
    return StsData(name=folder.name, split=split, sentences1=s1, sentences2=s2, scores=scores)


def subsample_beir(data: BeirData, max_queries: int | None = None, max_docs: int | None = None, seed: int = 0) -> BeirData:
    """A smaller, seeded copy of ``data`` for quick runs: at most ``max_queries`` judged queries, every
    document judged for them, and random other documents up to ``max_docs`` in total.

    Relevant documents are never dropped (so ``max_docs`` is exceeded when they alone are more). Scores on
    a subsampled corpus are higher than on the full one (fewer distractors) and are comparable only with
    runs on the same subsample; the choice is recorded in ``report["subsample"]``.
    """
    import random

    rng = random.Random(seed)
    qids = sorted(data.queries)
    if max_queries is not None and max_queries < len(qids):
        qids = sorted(rng.sample(qids, max_queries))
    judged = sorted({d for q in qids for d in data.qrels[q]})
    keep = set(judged)
    if max_docs is not None and max_docs > len(keep):
        others = sorted(set(data.corpus) - keep)
        keep |= set(rng.sample(others, min(len(others), max_docs - len(keep))))
    elif max_docs is None:
        keep = set(data.corpus)
    corpus = {d: t for d, t in data.corpus.items() if d in keep}
    report = {
        **data.report,
        "docs": len(corpus),
        "queries": len(qids),
        "qrels": sum(len(data.qrels[q]) for q in qids),
        "subsample": {"max_queries": max_queries, "max_docs": max_docs, "seed": seed,
                      "full_docs": len(data.corpus), "full_queries": len(data.queries)},
    }
    return BeirData(
        name=data.name,
        split=data.split,
        corpus=corpus,
        queries={q: data.queries[q] for q in qids},
        qrels={q: data.qrels[q] for q in qids},
        ignore_identical_ids=data.ignore_identical_ids,
        report=report,
    )


def mine_negatives(
    dataset: "datasets.Dataset",  # noqa: F821
    model: Any,
    num_negatives: int = 1,
    range_min: int = 10,
    range_max: int = 50,
    relative_margin: float | None = 0.05,
    batch_size: int = 64,
    corpus: list[str] | None = None,
) -> "datasets.Dataset":  # noqa: F821
    """Replace the negatives of (anchor, positive[, negative]) rows by hard negatives mined with ``model``.

    A thin wrapper over :func:`sentence_transformers.util.mine_hard_negatives` (ST's own miner; nothing is
    re-implemented): candidates ranked ``range_min``..``range_max`` for each anchor, at least
    ``relative_margin`` below the positive's score (guarding against unjudged positives), sampled at random.
    Mine with the *base* model (before a magnitude head is attached), as is standard.

    Args:
        dataset: rows with ``anchor`` and ``positive`` (an existing ``negative`` column is dropped).
        model: the SentenceTransformer used to score candidates.
        num_negatives: negatives per row; the output has columns ``anchor, positive, negative_1..negative_k``
            (``negative`` when k = 1).
        corpus: candidate documents (default: every positive and negative text in ``dataset``).

    Returns:
        A new :class:`datasets.Dataset`; rows without enough valid candidates are dropped by ST and the count is
        logged.

    Raises:
        DataValidationError: if ``anchor``/``positive`` columns are missing.
    """
    from sentence_transformers.util import mine_hard_negatives

    missing = {"anchor", "positive"} - set(dataset.column_names)
    if missing:
        raise DataValidationError(f"mine_negatives needs columns 'anchor' and 'positive'; missing {sorted(missing)}.")
    if corpus is None:
        texts = list(dataset["positive"])
        if "negative" in dataset.column_names:
            texts += list(dataset["negative"])
        corpus = list(dict.fromkeys(texts))
    pairs = dataset.select_columns(["anchor", "positive"])
    mined = mine_hard_negatives(
        pairs, model, anchor_column_name="anchor", positive_column_name="positive", corpus=corpus,
        range_min=range_min, range_max=range_max, relative_margin=relative_margin, num_negatives=num_negatives,
        sampling_strategy="random", output_format="triplet" if num_negatives == 1 else "n-tuple",
        batch_size=batch_size, verbose=False,
    )
    if len(mined) < len(pairs):
        logger.warning(
            "mine_negatives: %d of %d rows kept (the others had no candidate ranked %d-%s with a relative margin of %s "
            "below the query's weakest positive)%s", len(mined), len(pairs), range_min, range_max, relative_margin,
            "; fewer than half: a run on these rows is not like for like with one on the original rows"
            if len(mined) < len(pairs) / 2 else "",
        )
    return mined
