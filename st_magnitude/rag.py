"""Retrieval for RAG: answer-recall@k, gold-passage recall@k and NDCG@10 per head, plus an optional reader.

``st-magnitude rag-eval --model PATH --dataset qa-squad-dev --k 1,5,20 --output DIR`` encodes the passages
and questions, retrieves through :mod:`st_magnitude.index` (the index metric follows the head) and reports:

* **answer-recall@k** (DPR's "top-k retrieval accuracy", Karpukhin et al., EMNLP 2020, section 5.1): a question
  counts as answered when one of its top-k passages contains a gold answer string after the SQuAD answer
  normalization (lower-case, strip punctuation, drop the articles a/an/the, collapse white space;
  ``normalize_answer`` of the official SQuAD v1.1 evaluation script), matched on whole tokens. This is
  lenient: short answers ("two", "1990") occur in non-gold passages (qa-squad-dev MANIFEST), so it is
  reported next to
* **gold-recall@k**: the gold paragraph is among the top k;
* **NDCG@10** with the single gold paragraph as the relevant document (binary relevance; DCG from
  sentence-transformers' ``InformationRetrievalEvaluator.compute_dcg_at_k``).

With ``--heads cosine,qnorm`` the model's own head (or trailing ``Normalize``) is removed, the passages and
questions are encoded once, and each head is applied to the same pooled embeddings (identical to encoding
with that head attached, since the head is the last module). Without ``--heads`` the model's own head is used.

Optional reader (``--generator MODEL``): a transformers ``text-generation`` pipeline (decoder-only models)
or ``AutoModelForSeq2SeqLM.generate`` (encoder-decoder models) answers each question from its top
``--reader-k`` passages; EM and F1 follow the SQuAD v1.1 evaluation script (max over gold answers).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import re
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from st_magnitude.errors import DataValidationError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from st_magnitude.heads import MagnitudeHead

logger = logging.getLogger(__name__)

__all__ = [
    "normalize_answer",
    "has_answer",
    "exact_match_score",
    "f1_score",
    "QAData",
    "load_qa",
    "retrieval_metrics",
    "encode_with_heads",
    "evaluate_rag",
    "build_prompt",
    "load_generator",
    "run_reader",
    "register_cli",
]


# --------------------------------------------------------------------------------------------------------
# SQuAD v1.1 answer normalization and scores (official evaluate-v1.1.py, Rajpurkar et al., EMNLP 2016)
# --------------------------------------------------------------------------------------------------------
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower-case, remove punctuation, remove articles (a, an, the), collapse white space.

    Exactly ``normalize_answer`` of the official SQuAD v1.1 evaluation script (the same normalization
    DPR's ``has_answer``/EM use). Example: ``"The  Denver Broncos!"`` -> ``"denver broncos"``.
    """
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def has_answer(normalized_passage: str, normalized_answers: Sequence[str]) -> bool:
    """True if a (normalized) answer occurs in the (normalized) passage as a whole-token sequence.

    Both sides must already be :func:`normalize_answer` output; matching on token boundaries follows DPR's
    ``has_answer`` (``"10"`` does not match inside ``"100"``). Empty answers never match.
    """
    padded = f" {normalized_passage} "
    return any(a and f" {a} " in padded for a in normalized_answers)


def exact_match_score(prediction: str, ground_truths: Sequence[str]) -> float:
    """SQuAD EM: 1.0 if the normalized prediction equals a normalized gold answer, else 0.0."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in ground_truths))


def f1_score(prediction: str, ground_truths: Sequence[str]) -> float:
    """SQuAD token F1 (bag of normalized tokens), maximum over the gold answers; in [0, 1]."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in ground_truths:
        g = normalize_answer(gold).split()
        common = collections.Counter(pred) & collections.Counter(g)
        same = sum(common.values())
        if same == 0:
            continue
        precision, recall = same / len(pred), same / len(g)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


# --------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------
@dataclass
class QAData:
    """A QA retrieval set: passages, questions, gold passages and answer strings.

    Attributes:
        name: dataset name.
        doc_ids: passage ids, in index row order.
        doc_texts: texts to encode (``title + " " + text``, as :func:`st_magnitude.data.load_beir` builds them).
        passages: passage bodies used for answer matching and the reader (``text`` without the title, as DPR
            matches answers in the passage text).
        query_ids, questions: question ids and texts.
        gold: question id -> set of gold passage ids.
        answers: question id -> gold answer strings (duplicates kept, as annotated).
    """

    name: str
    doc_ids: list[str]
    doc_texts: list[str]
    passages: list[str]
    query_ids: list[str]
    questions: list[str]
    gold: dict[str, set[str]]
    answers: dict[str, list[str]]

    def subsample(self, max_questions: int | None, seed: int = 0) -> QAData:
        """Keep a seeded random sample of ``max_questions`` questions (all passages are kept)."""
        if max_questions is None or max_questions >= len(self.query_ids):
            return self
        rng = np.random.default_rng(seed)
        keep = np.sort(rng.choice(len(self.query_ids), size=max_questions, replace=False))
        return QAData(
            self.name,
            self.doc_ids,
            self.doc_texts,
            self.passages,
            [self.query_ids[i] for i in keep],
            [self.questions[i] for i in keep],
            self.gold,
            self.answers,
        )


def load_qa(name: str | os.PathLike[str], split: str = "test", data_dir: str | os.PathLike[str] | None = None) -> QAData:
    """Load a BEIR-layout QA folder with ``answers.jsonl`` (``{"_id": question id, "answers": [...]}``).

    Passages, questions and gold passages come from :func:`st_magnitude.data.load_beir` (validated there);
    answers from ``answers.jsonl``; the passage bodies for answer matching from ``corpus.jsonl``'s ``text``.

    Raises:
        DataValidationError: no ``answers.jsonl``, or a judged question without answers.
    """
    from st_magnitude.data import load_beir, resolve_dataset

    folder = resolve_dataset(name, data_dir)
    if folder is None:
        raise DataValidationError(f"{name!r}: rag-eval needs a local folder with answers.jsonl.")
    beir = load_beir(folder, split=split, ignore_identical_ids=False)
    answers_file = folder / "answers.jsonl"
    if not answers_file.is_file():
        raise DataValidationError(
            f"{answers_file} not found: rag-eval needs gold answer strings ({{'_id': question id, 'answers': [...]}} "
            "per line), e.g. the qa-squad-dev dataset."
        )
    answers: dict[str, list[str]] = {}
    with open(answers_file, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if line.strip():
                row = json.loads(line)
                answers[str(row["_id"])] = [str(a) for a in row.get("answers", [])]
    bodies: dict[str, str] = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                bodies[str(row["_id"])] = str(row.get("text", ""))
    query_ids = list(beir.queries)
    missing = [q for q in query_ids if not answers.get(q)]
    if missing:
        raise DataValidationError(f"{answers_file}: {len(missing)} judged questions have no answers (e.g. {missing[0]!r}).")
    doc_ids = list(beir.corpus)
    return QAData(
        name=folder.name,
        doc_ids=doc_ids,
        doc_texts=[beir.corpus[d] for d in doc_ids],
        passages=[bodies.get(d, beir.corpus[d]) for d in doc_ids],
        query_ids=query_ids,
        questions=[beir.queries[q] for q in query_ids],
        gold=beir.relevant_docs,
        answers=answers,
    )


# --------------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------------
def retrieval_metrics(
    ranked: np.ndarray,
    data: QAData,
    ks: Sequence[int] = (1, 5, 20),
    normalized_passages: Sequence[str] | None = None,
) -> dict[str, float]:
    """Answer-recall@k, gold-recall@k (for each k) and NDCG@10 from ranked passage rows.

    Args:
        ranked: ``(len(data.query_ids), K)`` int row numbers into ``data.doc_ids``, best first (``-1`` = none),
            K < max(ks, 10) is padded with ``-1`` (a corpus smaller than k).
        data: the QA set (questions in the same order as ``ranked``).
        ks: cut-offs.
        normalized_passages: :func:`normalize_answer` of ``data.passages`` (computed if omitted).

    Returns:
        ``{"answer_recall@k": ..., "gold_recall@k": ..., "ndcg@10": ..., "questions": n}``; fractions in [0, 1].
    """
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    if normalized_passages is None:
        normalized_passages = [normalize_answer(p) for p in data.passages]
    kmax = max(max(ks), 10)
    ranked = np.asarray(ranked)
    if ranked.shape[1] < kmax:  # fewer passages than k: the missing ranks are empty
        ranked = np.hstack([ranked, -np.ones((ranked.shape[0], kmax - ranked.shape[1]), dtype=ranked.dtype)])
    hits_answer = {k: 0 for k in ks}
    hits_gold = {k: 0 for k in ks}
    ndcg = 0.0
    for row, qid in zip(ranked, data.query_ids):
        answers = [normalize_answer(a) for a in data.answers[qid]]
        gold = data.gold.get(qid, set())
        first_answer = next(
            (r for r, doc in enumerate(row[:kmax]) if doc >= 0 and has_answer(normalized_passages[doc], answers)), None
        )
        gold_flags = [int(doc >= 0 and data.doc_ids[doc] in gold) for doc in row[:kmax]]
        first_gold = gold_flags.index(1) if 1 in gold_flags else None
        for k in ks:
            hits_answer[k] += first_answer is not None and first_answer < k
            hits_gold[k] += first_gold is not None and first_gold < k
        ideal = InformationRetrievalEvaluator.compute_dcg_at_k([1] * min(len(gold), 10), 10)
        if ideal > 0:
            ndcg += InformationRetrievalEvaluator.compute_dcg_at_k(gold_flags[:10], 10) / ideal
    n = len(data.query_ids)
    out: dict[str, float] = {}
    for k in ks:
        out[f"answer_recall@{k}"] = hits_answer[k] / n
    for k in ks:
        out[f"gold_recall@{k}"] = hits_gold[k] / n
    out["ndcg@10"] = ndcg / n
    out["questions"] = n
    return out


# --------------------------------------------------------------------------------------------------------
# Encoding once, applying each head
# --------------------------------------------------------------------------------------------------------
def _own_head(model: SentenceTransformer) -> MagnitudeHead:
    from sentence_transformers.base.modules import Normalize

    from st_magnitude.heads import Cosine, find_head

    head = find_head(model)
    if head is not None:
        return head
    if len(model) > 0 and isinstance(model[len(model) - 1], Normalize):
        return Cosine()
    raise ValueError(
        "The model has neither a magnitude head nor a trailing Normalize; pass heads (e.g. --heads cosine,qnorm) "
        "so rag-eval knows how to score."
    )


def encode_with_heads(
    model: SentenceTransformer,
    heads: Sequence[MagnitudeHead],
    questions: Sequence[str],
    passages: Sequence[str],
    batch_size: int = 64,
    show_progress_bar: bool = True,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Encode once without the final head/Normalize, then apply each head per role.

    Returns:
        head label (``type(head).__name__``, suffixed with γ for LearnableNorm) -> ``(query_emb (nq, dim),
        doc_emb (nd, dim))`` float32, exactly what ``encode_query``/``encode_document`` give with that head
        attached. The model is restored before returning.
    """
    import torch
    from sentence_transformers.base.modules import Normalize

    from st_magnitude.heads import MagnitudeHead

    removed = []
    while len(model) > 0 and isinstance(model[len(model) - 1], (Normalize, MagnitudeHead)):
        removed.append(model[len(model) - 1])
        del model[len(model) - 1]
    try:
        q_raw = model.encode_query(list(questions), batch_size=batch_size, convert_to_tensor=True,
                                   show_progress_bar=show_progress_bar).float().cpu()
        d_raw = model.encode_document(list(passages), batch_size=batch_size, convert_to_tensor=True,
                                      show_progress_bar=show_progress_bar).float().cpu()
    finally:
        for module in reversed(removed):
            model.append(module)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with torch.no_grad():
        for head in heads:
            label = type(head).__name__
            if label == "LearnableNorm":
                label += f"(γq={head.gamma_query:.3g},γd={head.gamma_document:.3g})"
            head = head.cpu().eval()
            q = head({"sentence_embedding": q_raw.clone()}, task="query")["sentence_embedding"]
            d = head({"sentence_embedding": d_raw.clone()}, task="document")["sentence_embedding"]
            out[label] = (q.numpy().astype(np.float32), d.numpy().astype(np.float32))
    return out


def evaluate_rag(
    model: SentenceTransformer,
    data: QAData,
    heads: Sequence[MagnitudeHead | str] | None = None,
    ks: Sequence[int] = (1, 5, 20),
    index_kind: str = "flat",
    batch_size: int = 64,
    show_progress_bar: bool = True,
    return_rankings: bool = False,
) -> dict[str, Any]:
    """Retrieve through :func:`st_magnitude.index.build_index` per head and compute :func:`retrieval_metrics`.

    Args:
        model: the retriever (its own head is used when ``heads`` is None).
        data: a :class:`QAData`.
        heads: heads (objects or names) to compare on the same pooled embeddings.
        ks: answer/gold recall cut-offs.
        index_kind: ``flat`` (exact), ``hnsw`` or ``ivf`` (MIPS-to-L2 reduction for magnitude heads).
        return_rankings: also return the ``(scores, ids)`` arrays per head under ``"rankings"``.

    Returns:
        ``{"heads": {label: metrics}, "index": {label: description}, "seconds": {...}}`` (+ ``"rankings"``).
    """
    from st_magnitude.heads import make_head
    from st_magnitude.index import build_index, search

    head_objs = [make_head(h) if isinstance(h, str) else h for h in (heads or [_own_head(model)])]
    t0 = time.perf_counter()
    embeddings = encode_with_heads(model, head_objs, data.questions, data.doc_texts, batch_size, show_progress_bar)
    t_encode = time.perf_counter() - t0
    normalized = [normalize_answer(p) for p in data.passages]
    kmax = max(max(ks), 10)
    result: dict[str, Any] = {"heads": {}, "index": {}, "seconds": {"encode": round(t_encode, 2)}}
    rankings = {}
    for (label, (q, d)), head in zip(embeddings.items(), head_objs):
        index = build_index(d, head=head, kind=index_kind, doc_ids=data.doc_ids)
        scores, ids = search(index, q, kmax)
        result["heads"][label] = retrieval_metrics(ids, data, ks, normalized)
        result["index"][label] = index.describe()
        rankings[label] = (scores, ids)
    result["seconds"]["total"] = round(time.perf_counter() - t0, 2)
    if return_rankings:
        result["rankings"] = rankings
    return result


# --------------------------------------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------------------------------------
def build_prompt(question: str, passages: Sequence[str]) -> str:
    """The reader prompt: numbered passages, then the question, then ``Answer:``."""
    context = "\n".join(f"[{i + 1}] {p.strip()}" for i, p in enumerate(passages))
    return (
        "Answer the question with a short span from the passages.\n\n"
        f"Passages:\n{context}\n\nQuestion: {question.strip()}\nAnswer:"
    )


def load_generator(model: Any, tokenizer: Any = None, max_new_tokens: int = 16) -> Callable[[list[str]], list[str]]:
    """A callable prompts -> answers (greedy decoding, first line of the generated text).

    ``model`` is a name/path or a loaded ``transformers`` model. Encoder-decoder models (``config.is_encoder_decoder``)
    run ``generate`` directly; decoder-only models go through ``pipeline("text-generation",
    return_full_text=False)``. Offline, only local paths (or models built in-process) work.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    if isinstance(model, (str, os.PathLike)):
        config = AutoConfig.from_pretrained(str(model))
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(model))
        cls = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
        model = cls.from_pretrained(str(model))
    if tokenizer is None:
        raise ValueError("load_generator: pass the tokenizer with an in-memory model.")
    model.eval()

    def first_line(text: str) -> str:
        text = text.strip()
        return text.splitlines()[0].strip() if text else ""

    if getattr(model.config, "is_encoder_decoder", False):
        import torch

        def generate(prompts: list[str]) -> list[str]:
            with torch.no_grad():
                enc = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True)
                out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
            return [first_line(t) for t in tokenizer.batch_decode(out, skip_special_tokens=True)]

        return generate

    pipe = pipeline("text-generation", model=model, tokenizer=tokenizer, device="cpu")

    def generate(prompts: list[str]) -> list[str]:
        outputs = pipe(prompts, max_new_tokens=max_new_tokens, do_sample=False, return_full_text=False)
        return [first_line(o[0]["generated_text"]) for o in outputs]

    return generate


def run_reader(
    generate: Callable[[list[str]], list[str]],
    data: QAData,
    ranked: np.ndarray,
    reader_k: int = 3,
    max_questions: int | None = None,
) -> dict[str, Any]:
    """Answer each question from its top ``reader_k`` passages; SQuAD EM/F1 against the gold answers.

    Args:
        generate: prompts -> answers (see :func:`load_generator`).
        data: the QA set; ``ranked`` rows follow ``data.query_ids``.
        ranked: ``(nq, K)`` passage rows, best first.
        reader_k: passages per prompt.
        max_questions: read only the first n questions (the reader is slow on CPU).

    Returns:
        ``{"exact_match", "f1"`` (means in [0, 1]), ``"questions"``, ``"predictions"`` (question id -> text)}.
    """
    n = len(data.query_ids) if max_questions is None else min(max_questions, len(data.query_ids))
    prompts = [
        build_prompt(data.questions[i], [data.passages[j] for j in ranked[i, :reader_k] if j >= 0]) for i in range(n)
    ]
    preds = generate(prompts)
    em = [exact_match_score(p, data.answers[data.query_ids[i]]) for i, p in enumerate(preds)]
    f1 = [f1_score(p, data.answers[data.query_ids[i]]) for i, p in enumerate(preds)]
    return {
        "exact_match": float(np.mean(em)) if em else 0.0,
        "f1": float(np.mean(f1)) if f1 else 0.0,
        "questions": n,
        "predictions": {data.query_ids[i]: p for i, p in enumerate(preds)},
    }


# --------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------
def _parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k takes comma-separated integers, e.g. 1,5,20; got {text!r}") from None
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError("--k values must be >= 1")
    return ks


def _markdown(result: dict[str, Any], ks: Sequence[int], command: str) -> str:
    cols = [f"answer_recall@{k}" for k in ks] + [f"gold_recall@{k}" for k in ks] + ["ndcg@10"]
    lines = [
        f"# rag-eval: {result['dataset']} ({result['questions']} questions, {result['passages']} passages)",
        "",
        f"Model: `{result['model']}`; index: `{result['index_kind']}`; max_seq_length {result['max_seq_length']}.",
        "",
        "| head | " + " | ".join(cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for label, metrics in result["heads"].items():
        lines.append(f"| {label} | " + " | ".join(f"{metrics[c]:.4f}" for c in cols) + " |")
    if result.get("reader"):
        lines += ["", "| head | reader | questions | EM | F1 |", "|---|---|---:|---:|---:|"]
        for label, r in result["reader"].items():
            lines.append(f"| {label} | `{result['generator']}` | {r['questions']} | {r['exact_match']:.4f} | {r['f1']:.4f} |")
    lines += [
        "",
        "answer_recall@k: a top-k passage contains a gold answer after SQuAD normalization (lenient: short answers "
        "occur in non-gold passages); gold_recall@k: the gold paragraph is in the top k; NDCG@10: binary, one gold "
        "paragraph.",
        "",
        f"Command: `{command}`",
        "",
    ]
    return "\n".join(lines)


def _run_cli(args: argparse.Namespace) -> int:
    import sys

    from st_magnitude.models import load_model

    ks = args.k
    data = load_qa(args.dataset, split=args.split, data_dir=args.data_dir).subsample(args.max_questions, args.seed)
    model = load_model(args.model)
    if args.max_seq_length:
        model.max_seq_length = args.max_seq_length
    heads = [h.strip() for h in args.heads.split(",") if h.strip()] if args.heads else None
    result = evaluate_rag(model, data, heads=heads, ks=ks, index_kind=args.index, batch_size=args.batch_size,
                          show_progress_bar=not args.quiet, return_rankings=bool(args.generator))
    rankings = result.pop("rankings", {})
    result.update(
        dataset=data.name,
        model=str(args.model) if args.model else "all-MiniLM-L6-v2 (packaged default)",
        index_kind=args.index,
        ks=ks,
        questions=len(data.query_ids),
        passages=len(data.doc_ids),
        max_seq_length=getattr(model, "max_seq_length", None),
    )
    if args.generator:
        generate = load_generator(args.generator, max_new_tokens=args.max_new_tokens)
        result["generator"] = str(args.generator)
        result["reader"] = {}
        for label, (_, ids) in rankings.items():
            reader = run_reader(generate, data, ids, reader_k=args.reader_k, max_questions=args.reader_max_questions)
            preds = reader.pop("predictions")
            result["reader"][label] = reader
            if args.output:
                out = Path(args.output)
                out.mkdir(parents=True, exist_ok=True)
                (out / f"predictions_{re.sub(r'[^A-Za-z0-9]+', '_', label)}.json").write_text(json.dumps(preds, indent=1))
    command = "st-magnitude " + " ".join(sys.argv[1:]) if sys.argv and "st-magnitude" in sys.argv[0] else "st-magnitude rag-eval ..."
    result["command"] = command
    md = _markdown(result, ks, command)
    print(md)
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "rag_eval.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
        (out / "rag_eval.md").write_text(md, encoding="utf-8")
        _plot(result, ks, out / "rag_eval.png")
    return 0


def _plot(result: dict[str, Any], ks: Sequence[int], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # plotting is optional
        return
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label, m in result["heads"].items():
        ax.plot(ks, [m[f"answer_recall@{k}"] for k in ks], marker="o", label=f"{label} answer-recall")
        ax.plot(ks, [m[f"gold_recall@{k}"] for k in ks], marker="s", linestyle="--", label=f"{label} gold-recall")
    ax.set_xscale("log")
    ax.set_xticks(list(ks), [str(k) for k in ks])
    ax.set_xlabel("k")
    ax.set_ylabel("recall@k")
    ax.set_title(f"rag-eval: {result['dataset']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``st-magnitude rag-eval`` (see the module docstring)."""
    p = subparsers.add_parser(
        "rag-eval",
        help="answer-recall@k, gold-passage recall@k and NDCG@10 for RAG retrieval, per head",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--model", default=None, help="model path or name (default: packaged all-MiniLM-L6-v2)")
    p.add_argument("--dataset", default="qa-squad-dev", help="QA folder with answers.jsonl (default qa-squad-dev)")
    p.add_argument("--data-dir", default=None, help="data directory (default $ST_MAGNITUDE_DATA or ../shared/data)")
    p.add_argument("--split", default="test")
    p.add_argument("--k", type=_parse_ks, default=[1, 5, 20], help="cut-offs, comma-separated (default 1,5,20)")
    p.add_argument("--heads", default=None, help="heads to compare on the same encoder, e.g. cosine,qnorm "
                   "(default: the model's own head)")
    p.add_argument("--index", choices=["flat", "hnsw", "ivf"], default="flat", help="index kind (default flat = exact)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-seq-length", type=int, default=None, help="truncate texts (e.g. 128 on CPU)")
    p.add_argument("--max-questions", type=int, default=None, help="evaluate a seeded sample of questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--generator", default=None, help="optional reader: local transformers model path")
    p.add_argument("--reader-k", type=int, default=3, help="passages given to the reader (default 3)")
    p.add_argument("--reader-max-questions", type=int, default=100, help="questions read (default 100)")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--output", default=None, help="folder for rag_eval.json/.md/.png")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_run_cli)
