"""The main job: fine-tune one base model per head and compare retrieval (the paper's 2x2 + learnable table).

For every head: load the same base weights, :func:`~st_magnitude.heads.attach_head`, fine-tune with
:class:`~st_magnitude.losses.MagnitudeInfoNCELoss` through ST's ``SentenceTransformerTrainer`` (with
``router_mapping`` so each column gets its role, and γ's own learning rate for LearnableNorm), then evaluate
with ST's ``InformationRetrievalEvaluator`` (queries via ``encode_query``, documents via ``encode_document``,
dot-product scores) on every evaluation set. The untouched base model is evaluated too, as a reference row.

Outputs in ``output``: ``results.json``, ``results.md`` (table), ``ablation.png`` (bar chart) and, when
LearnableNorm is trained for at least ``logging_steps`` steps, ``gamma.png`` (γ trajectory).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from st_magnitude.heads import HEADS

logger = logging.getLogger(__name__)

__all__ = ["AblationConfig", "PRESETS", "run_ablation", "render_markdown", "register_cli"]


@dataclass
class AblationConfig:
    """Settings of one ablation run (every field is recorded in ``results.json``).

    Attributes:
        model: base model name or path (default: packaged all-MiniLM-L6-v2).
        train: training set name under the data dir (``train.jsonl[.gz]`` triplets or BEIR train qrels).
        eval: evaluation set names (BEIR folders).
        heads: head names, a subset of ``cosine, dot, qnorm, dnorm, learnable``.
        max_steps: optimizer steps per head.
        batch_size: training rows per step (in-batch negatives = batch_size - 1, plus hard negatives).
        seed: seed of data order, dropout and initialization.
        output: output folder.
        temperature: InfoNCE τ.
        learning_rate: encoder learning rate (AdamW, linear decay after warm-up).
        gamma_learning_rate: LearnableNorm γ learning rate (ST ``learning_rate_mapping``).
        warmup_ratio: fraction of steps of linear warm-up.
        max_seq_length: token limit for training and evaluation (longer texts are truncated).
        train_rows: use at most this many training rows (seeded sample; None = all).
        eval_split: qrels split for evaluation.
        eval_max_queries / eval_max_docs: evaluate on a seeded subsample (every judged document of the kept
            queries plus random others up to ``eval_max_docs``; see :func:`st_magnitude.data.subsample_beir`).
            None = the full set. Subsampled scores are higher than full-set scores and are marked in the table.
        eval_seed: seed of that evaluation subsample (None = ``seed``); fix it to compare seeds on the same queries.
        eval_batch_size: encoding batch size at evaluation.
        data_dir: data directory (None: ``$ST_MAGNITUDE_DATA`` or ``../shared/data``).
        query_prompt / document_prompt: text prepended to queries / documents (E5: ``"query: "``/``"passage: "``),
            used in training (ST ``prompts``), stored in the saved model, and used at evaluation.
        use_negatives: train on the file's hard-negative column when present.
        mine_negatives: if > 0, replace the file's negatives by this many hard negatives per row mined with the
            base model through ST's ``mine_hard_negatives`` (ranks 10-50, 5% relative margin).
        calibrate: ``"on"`` (default), ``"off"`` or ``"both"``: scale the raw side(s) of each magnitude-keeping
            head (Dot, QNorm, DNorm, LearnableNorm with γ < 1) to unit mean norm on 512 training rows before
            fine-tuning (:func:`st_magnitude.calibration.calibrate_head`); ``"both"`` runs each such head twice,
            reporting the calibrated run as ``<head>+cal``. Default ``"on"`` because it was measured to help QNorm
            and DNorm on every evaluation set (150 steps on train-nfcorpus, seed 42: DNorm NDCG@10 0.2743 → 0.3199
            nfcorpus, 0.5314 → 0.6208 scifact, 0.3139 → 0.4717 arguana; README "Measured here").
        include_base: evaluate the untouched base model as a reference row.
        save_models: keep each fine-tuned model under ``output/models/<head>``.
        logging_steps: steps between training log entries (loss, norms, τ_eff, γ).
    """

    model: str | None = None
    train: str = "train-nfcorpus"
    eval: list[str] = field(default_factory=lambda: ["beir-nfcorpus", "beir-scifact", "beir-arguana"])
    heads: list[str] = field(default_factory=lambda: list(HEADS))
    max_steps: int = 300
    batch_size: int = 32
    seed: int = 42
    output: str = "runs/ablation"
    temperature: float = 0.05
    learning_rate: float = 2e-5
    gamma_learning_rate: float = 1e-2
    warmup_ratio: float = 0.1
    max_seq_length: int = 128
    train_rows: int | None = None
    eval_split: str = "test"
    eval_max_queries: int | None = None
    eval_max_docs: int | None = None
    eval_seed: int | None = None
    eval_batch_size: int = 64
    data_dir: str | None = None
    query_prompt: str | None = None
    document_prompt: str | None = None
    use_negatives: bool = True
    mine_negatives: int = 0
    calibrate: str = "on"
    include_base: bool = True
    save_models: bool = False
    logging_steps: int = 10

    def validate(self) -> None:
        """Raise :class:`~st_magnitude.errors.ConfigurationError` (a ``ValueError``) naming the bad field."""
        from st_magnitude.errors import ConfigurationError

        if not self.heads:
            raise ConfigurationError(f"Give at least one head (--heads), from {sorted(HEADS)}.")
        unknown = [h for h in self.heads if h not in HEADS]
        if unknown:
            raise ConfigurationError(f"Unknown heads {unknown}; choose from {sorted(HEADS)}.")
        duplicated = sorted({h for h in self.heads if self.heads.count(h) > 1})
        if duplicated:
            raise ConfigurationError(f"Heads {duplicated} are listed twice; each head is one row of the table.")
        for name in ("max_steps", "batch_size", "max_seq_length", "mine_negatives", "seed", "logging_steps",
                     "train_rows", "eval_max_queries", "eval_max_docs", "eval_seed", "eval_batch_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigurationError(f"{name} must be an integer, got {value!r} ({type(value).__name__}).")
        if self.max_steps < 1 or self.batch_size < 2:
            raise ConfigurationError("max_steps must be >= 1 and batch_size >= 2 (InfoNCE needs in-batch negatives).")
        if not self.eval:
            raise ConfigurationError("Give at least one evaluation set (--eval).")
        if self.calibrate not in ("off", "on", "both"):
            raise ConfigurationError(f"calibrate must be 'off', 'on' or 'both', got {self.calibrate!r}.")
        for name in ("temperature", "learning_rate", "gamma_learning_rate"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}.")
        for name in ("train_rows", "eval_max_queries", "eval_max_docs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigurationError(f"{name} must be >= 1 (or unset for all), got {value}.")
        for name in ("seed", "eval_seed"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigurationError(f"{name} must be >= 0, got {value} (random.Random ignores the sign, so a "
                                         "negative seed would repeat the positive one's sample).")
        if self.eval_seed is not None and self.eval_max_queries is None and self.eval_max_docs is None:
            raise ConfigurationError("eval_seed only seeds the evaluation subsample; set --eval-max-queries or "
                                     "--eval-max-docs too, or drop --eval-seed (the full sets need no seed).")
        if self.mine_negatives < 0 or self.max_seq_length < 8:
            raise ConfigurationError("mine_negatives must be >= 0 and max_seq_length >= 8.")


PRESETS: dict[str, dict[str, Any]] = {
    # About 15 minutes on 2 CPU cores: 5 heads x 30 steps x 16 triplets; NFCorpus in-domain and SciFact
    # out-of-domain, each on 60 queries over a ~1,500-document subsample, at 128 tokens; plus the base row.
    "quick": {
        "max_steps": 30,
        "batch_size": 16,
        "eval": ["beir-nfcorpus", "beir-scifact"],
        "eval_max_queries": 60,
        "eval_max_docs": 1500,
        "max_seq_length": 128,
        "logging_steps": 10,
    },
    # The 150-step setting of README "Measured here" (about 1.5-2 h on 2 CPU cores): all five heads, 150 steps x
    # 16 rows, three full evaluation sets. (The README's 300-step table adds --max-steps 300; its uncalibrated
    # rows used --calibrate off.)
    "paper": {"max_steps": 150, "batch_size": 16, "eval": ["beir-nfcorpus", "beir-scifact", "beir-arguana"]},
}


def router_mapping_for(columns: list[str]) -> dict[str, str]:
    """``router_mapping`` for training columns: the first column is the query, every other one a document.

    Raises:
        ValueError: with fewer than two columns.
    """
    if len(columns) < 2:
        raise ValueError(f"Training data needs a query column and at least one document column, got {columns}.")
    return {column: ("query" if i == 0 else "document") for i, column in enumerate(columns)}


def _domain(name: str) -> str:
    base = Path(name).name.lower()
    for prefix in ("train-", "beir-", "mteb-"):
        if base.startswith(prefix):
            return base[len(prefix):]
    return base


def _load_base(config: AblationConfig):
    from st_magnitude.models import load_model

    model = load_model(config.model)
    positions = getattr(getattr(getattr(model[0], "auto_model", None), "config", None), "max_position_embeddings", None)
    model.max_seq_length = min(config.max_seq_length, positions) if positions else config.max_seq_length
    prompts = {}
    if config.query_prompt:
        prompts["query"] = config.query_prompt
    if config.document_prompt:
        prompts["document"] = config.document_prompt
    if prompts:
        model.prompts = {**model.prompts, **prompts}
    return model


def _train_one(model: Any, head_name: str, train_dataset: Any, config: AblationConfig, workdir: Path) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers

    from st_magnitude.heads import find_head, gamma_learning_rate_mapping
    from st_magnitude.losses import MagnitudeInfoNCELoss, MagnitudeLoggingCallback

    head = find_head(model)
    loss = MagnitudeInfoNCELoss(model, temperature=config.temperature)
    prompts = None
    if config.query_prompt or config.document_prompt:
        prompts = {
            column: (config.query_prompt if role == "query" else config.document_prompt) or ""
            for column, role in router_mapping_for(train_dataset.column_names).items()
        }
    args = SentenceTransformerTrainingArguments(
        output_dir=str(workdir),
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        warmup_steps=int(round(config.warmup_ratio * config.max_steps)),
        seed=config.seed,
        data_seed=config.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        router_mapping=router_mapping_for(train_dataset.column_names),
        learning_rate_mapping=gamma_learning_rate_mapping(config.gamma_learning_rate) if head_name == "learnable" else {},
        prompts=prompts,
        logging_steps=config.logging_steps,
        save_strategy="no",
        report_to="none",
        dataloader_drop_last=True,
        use_cpu=not _cuda(),
        disable_tqdm=False,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=train_dataset, loss=loss, callbacks=[MagnitudeLoggingCallback(loss)]
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    if trainer.state.global_step < config.max_steps:
        from st_magnitude.errors import ConfigurationError

        raise ConfigurationError(
            f"{head_name}: only {trainer.state.global_step} of {config.max_steps} steps ran (the no-duplicates batch "
            "sampler could not fill enough batches from this data); lower --batch-size or --max-steps. Refusing to "
            "report an under-trained model as trained."
        )
    log = [
        {k: v for k, v in entry.items() if k in ("step", "loss", "learning_rate", "query_norm", "pos_doc_norm",
                                                 "neg_doc_norm", "tau_eff", "gamma_query", "gamma_document")}
        for entry in trainer.state.log_history
        if "loss" in entry
    ]
    return {
        "seconds": round(seconds, 1),
        "steps": trainer.state.global_step,
        "final_gamma": {"query": head.gamma_query, "document": head.gamma_document},
        "log": log,
    }


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def run_ablation(config: AblationConfig) -> dict[str, Any]:
    """Run the ablation described by ``config`` and write its outputs; returns the results dict.

    Returns:
        ``{"config": {...}, "environment": {...}, "datasets": {...}, "results": {ROW: {DATASET: {metric: x}}},
        "train": {HEAD: {"seconds", "steps", "final_gamma", "log"}}}`` where ROW is ``base`` or a head name and
        metrics are ``ndcg@10``, ``recall@100``, ``mrr@10`` (plus ``recall@10``, ``map@100``), fractions in [0, 1].

    Raises:
        ValueError: invalid configuration. DataValidationError: missing or malformed data.
        MissingTaskError: never in normal use (router_mapping is always set).
    """
    import torch
    from transformers import set_seed

    from st_magnitude.data import load_beir, load_training_triplets, subsample_beir
    from st_magnitude.evaluation import evaluate_retrieval
    from st_magnitude.heads import attach_head, make_head

    config.validate()
    output = Path(config.output)
    output.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    train_dataset = load_training_triplets(
        config.train, data_dir=config.data_dir, max_rows=config.train_rows, with_negatives=config.use_negatives,
        seed=config.seed,
    )
    rows_before_mining = len(train_dataset)
    if config.mine_negatives > 0:
        from st_magnitude.data import mine_negatives

        train_dataset = mine_negatives(train_dataset, _load_base(config), num_negatives=config.mine_negatives)
    eval_sets = {name: load_beir(name, split=config.eval_split, data_dir=config.data_dir) for name in config.eval}
    if config.eval_max_queries is not None or config.eval_max_docs is not None:
        eval_sets = {
            name: subsample_beir(
                data, config.eval_max_queries, config.eval_max_docs,
                seed=config.seed if config.eval_seed is None else config.eval_seed,
            )
            for name, data in eval_sets.items()
        }
    if len(train_dataset) < config.batch_size:
        from st_magnitude.errors import ConfigurationError

        raise ConfigurationError(
            f"{config.train} has {len(train_dataset)} usable rows, fewer than one batch of {config.batch_size}: no "
            "training step could run. Lower --batch-size or use more rows."
        )
    train_domain = _domain(config.train)
    results: dict[str, Any] = {
        "config": dataclasses.asdict(config),
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "sentence_transformers": _version("sentence_transformers"),
            "threads": torch.get_num_threads(),
            "device": "cuda" if _cuda() else "cpu",
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        },
        "datasets": {
            "train": {"name": config.train, "rows": len(train_dataset), "rows_before_mining": rows_before_mining,
                      "columns": train_dataset.column_names},
            **{
                name: {**data.report, "in_domain": _domain(name) == train_domain}
                for name, data in eval_sets.items()
            },
        },
        "results": {},
        "train": {},
    }

    def evaluate(model: Any, row: str) -> None:
        results["results"][row] = {}
        for name, data in eval_sets.items():
            print(f"[ablation] evaluating {row} on {name} ({len(data.queries)} queries, {len(data.corpus)} documents)",
                  flush=True)
            t0 = time.perf_counter()
            metrics = evaluate_retrieval(model, data, batch_size=config.eval_batch_size, show_progress_bar=True)
            results["results"][row][name] = {k: round(v, 6) for k, v in metrics.items()}
            logger.info("%s on %s: ndcg@10=%.4f (%.0fs)", row, name, metrics["ndcg@10"], time.perf_counter() - t0)
            print(f"[ablation] {row:>9s} {name:<16s} ndcg@10={metrics['ndcg@10']:.4f} "
                  f"recall@100={metrics['recall@100']:.4f} mrr@10={metrics['mrr@10']:.4f}", flush=True)
        _write_outputs(results, output)

    set_seed(config.seed)
    if config.include_base:
        evaluate(_load_base(config), "base")
    runs: list[tuple[str, str, bool]] = []
    for head_name in config.heads:
        magnitude = make_head(head_name).keeps_magnitude
        if config.calibrate in ("off", "both") or not magnitude:
            runs.append((head_name, head_name, False))
        if config.calibrate in ("on", "both") and magnitude:
            runs.append((head_name if config.calibrate == "on" else f"{head_name}+cal", head_name, True))
    for position, (row, head_name, calibrated) in enumerate(runs, start=1):
        print(f"[ablation] training {row} ({position}/{len(runs)}): {config.max_steps} steps x {config.batch_size} "
              f"rows on {config.train}", flush=True)
        set_seed(config.seed)
        model = attach_head(_load_base(config), make_head(head_name))
        calibration = None
        if calibrated:
            from st_magnitude.calibration import calibrate_head

            calibration = calibrate_head(model, train_dataset, n=512, seed=config.seed)
            print(f"[ablation] calibrated {row}: query scale {calibration['query_scale']:.4g} "
                  f"({calibration['n_queries']} queries), document scale {calibration['document_scale']:.4g} "
                  f"({calibration['n_documents']} documents)", flush=True)
        with tempfile.TemporaryDirectory(prefix=f"ablation-{head_name}-") as workdir:
            results["train"][row] = _train_one(model, head_name, train_dataset, config, Path(workdir))
        results["train"][row]["calibration"] = calibration
        print(f"[ablation] trained {row} in {results['train'][row]['seconds']:.0f}s; "
              f"final γ = {results['train'][row]['final_gamma']}", flush=True)
        if config.save_models:
            target = output / "models" / row
            if target.exists():
                shutil.rmtree(target)
            model.save(str(target))
        evaluate(model, row)
        del model
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    _write_outputs(results, output)
    return results


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package.replace("_", "-"))
    except PackageNotFoundError:
        return "unknown"


def _write_outputs(results: dict[str, Any], output: Path) -> None:
    # Atomic: a reader (benchmarks/recipe_report.py on a running study) never sees a half-written results.json.
    partial = output / "results.json.partial"
    partial.write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    os.replace(partial, output / "results.json")
    (output / "results.md").write_text(render_markdown(results), encoding="utf-8")
    try:
        _plot(results, output)
    except Exception as exc:  # a plot must never lose the numbers
        logger.warning("could not draw the charts: %s", exc)


def render_markdown(results: dict[str, Any], metric: str = "ndcg@10") -> str:
    """Markdown table: rows = base + heads, columns = datasets (ID = in-domain, OOD = out-of-domain),
    cells = ``metric`` and the relative change versus the cosine row (when cosine was run)."""
    datasets = [name for name in results["config"]["eval"]]
    in_domain = {name: results["datasets"].get(name, {}).get("in_domain", False) for name in datasets}
    header = ["head", *(f"{name} ({'ID' if in_domain[name] else 'OOD'})" for name in datasets), "train s", "final γ_q / γ_d"]
    subsampled = [n for n in datasets if results["datasets"].get(n, {}).get("subsample")]
    lines = [
        f"{metric.upper()} after {results['config']['max_steps']} steps x {results['config']['batch_size']} rows on "
        f"`{results['config']['train']}` (τ = {results['config']['temperature']}, seed {results['config']['seed']}); "
        "relative change vs cosine in parentheses.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    if subsampled:
        sub = results["datasets"][subsampled[0]]["subsample"]
        sizes = ", ".join(f"{n}: {results['datasets'][n]['queries']} queries / {results['datasets'][n]['docs']} documents"
                          for n in subsampled)
        lines[1:1] = ["", f"Subsampled evaluation (seeded; every judged document of the kept queries, plus random "
                          f"others up to {sub['max_docs']}; {sizes}): scores are higher than on the full sets."]
    calibrated = {row: train["calibration"] for row, train in results["train"].items() if train.get("calibration")}
    if calibrated:
        detail = ", ".join(
            f"{row} ({cal.get('n_queries', 0)} queries / {cal.get('n_documents', 0)} documents)"
            for row, cal in calibrated.items()
        )
        lines[1:1] = ["", f"Norm-calibrated before training (raw side(s) scaled to unit mean norm on a sample of "
                          f"the training rows, `--calibrate`): {detail}."]
    cosine = results["results"].get("cosine")
    for row, per_dataset in results["results"].items():
        cells = [row]
        for name in datasets:
            value = per_dataset.get(name, {}).get(metric)
            if value is None:
                cells.append("–")
                continue
            cell = f"{value:.4f}"
            if cosine and row not in ("cosine",) and cosine.get(name, {}).get(metric):
                ref = cosine[name][metric]
                cell += f" ({(value - ref) / ref * 100:+.1f}%)"
            cells.append(cell)
        train = results["train"].get(row)
        cells.append(f"{train['seconds']:.0f}" if train else "–")
        cells.append(
            f"{train['final_gamma']['query']:.3f} / {train['final_gamma']['document']:.3f}" if train else "–"
        )
        lines.append("| " + " | ".join(cells) + " |")
    if "wall_seconds" in results:
        lines += ["", f"Wall time: {results['wall_seconds']:.0f} s. Command: `{results['environment']['command']}`"]
    return "\n".join(lines) + "\n"


def _plot(results: dict[str, Any], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = list(results["results"])
    datasets = results["config"]["eval"]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(3.0 + 1.6 * len(datasets), 3.6))
    width = 0.8 / len(rows)
    x = np.arange(len(datasets))
    for i, row in enumerate(rows):
        values = [results["results"][row].get(name, {}).get("ndcg@10", np.nan) for name in datasets]
        ax.bar(x + i * width - 0.4 + width / 2, values, width, label=row)
    ax.set_xticks(x, [f"{n}\n({'ID' if results['datasets'].get(n, {}).get('in_domain') else 'OOD'})" for n in datasets])
    ax.set_ylabel("NDCG@10")
    ax.set_title(f"{results['config']['max_steps']} steps on {results['config']['train']}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(output / "ablation.png", dpi=120)
    plt.close(fig)

    log = results["train"].get("learnable", {}).get("log", [])
    if log and "gamma_query" in log[0]:
        fig, ax = plt.subplots(figsize=(4.5, 3))
        steps = [e["step"] for e in log]
        ax.plot(steps, [e["gamma_query"] for e in log], label="γ_q (query)")
        ax.plot(steps, [e["gamma_document"] for e in log], label="γ_d (document)", linestyle="--")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("step")
        ax.set_ylabel("γ")
        ax.legend()
        fig.tight_layout()
        fig.savefig(output / "gamma.png", dpi=120)
        plt.close(fig)


# --- CLI ----------------------------------------------------------------------------------------------------
def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``st-magnitude ablation``."""
    p = subparsers.add_parser(
        "ablation",
        help="fine-tune one model per head and compare retrieval (the main job)",
        description="Fine-tune the same base model once per head (cosine, dot, qnorm, dnorm, learnable) and "
        "evaluate each on BEIR sets; writes results.json, results.md, ablation.png (and gamma.png for "
        "LearnableNorm) to --output.",
    )
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="named settings, explicit flags override them: quick = 30 steps x 16 rows, eval "
                   "beir-nfcorpus + beir-scifact subsampled to 60 queries / ~1,500 documents each (~15-25 min on "
                   "2 CPU cores; scores are higher than on full sets); paper = 150 steps x 16 rows, full "
                   "beir-nfcorpus, beir-scifact, beir-arguana (~1.5-2 h)")
    p.add_argument("--model", help="base model path or name (default: packaged all-MiniLM-L6-v2)")
    p.add_argument("--train", help="training set name (default train-nfcorpus)")
    p.add_argument("--eval", help="comma-separated evaluation sets (default beir-nfcorpus,beir-scifact,beir-arguana)")
    p.add_argument("--heads", help=f"comma-separated heads (default {','.join(HEADS)})")
    p.add_argument("--max-steps", type=int, help="training steps per head (default 300)")
    p.add_argument("--batch-size", type=int, help="rows per step; InfoNCE uses the other rows as in-batch negatives (default 32)")
    p.add_argument("--seed", type=int, help="seed for data order, sampling and init (default 42)")
    p.add_argument("--output", help="output folder (default runs/ablation)")
    p.add_argument("--temperature", type=float, help="InfoNCE τ (default 0.05)")
    p.add_argument("--lr", dest="learning_rate", type=float, help="encoder learning rate (default 2e-5)")
    p.add_argument("--gamma-lr", dest="gamma_learning_rate", type=float, help="LearnableNorm γ learning rate (default 1e-2)")
    p.add_argument("--max-seq-length", type=int, help="token limit (default 128)")
    p.add_argument("--train-rows", type=int, help="use at most this many training rows")
    p.add_argument("--eval-split", help="qrels split to evaluate (default test)")
    p.add_argument("--eval-max-queries", type=int, help="evaluate on at most this many queries (seeded)")
    p.add_argument("--eval-max-docs", type=int, help="subsample each corpus to about this many documents, judged ones kept")
    p.add_argument("--eval-seed", type=int,
                   help="seed of the evaluation subsample (default: --seed); fix it to compare seeds on the same queries")
    p.add_argument("--data-dir", help="data directory (default $ST_MAGNITUDE_DATA or ../shared/data)")
    p.add_argument("--query-prompt", help='prefix for queries, e.g. "query: " for E5')
    p.add_argument("--document-prompt", help='prefix for documents, e.g. "passage: " for E5')
    p.add_argument("--no-negatives", dest="use_negatives", action="store_false", default=None,
                   help="ignore the training file's hard-negative column")
    p.add_argument("--mine-negatives", type=int, help="mine this many hard negatives per row with the base model")
    p.add_argument("--calibrate", choices=["off", "on", "both"],
                   help="norm calibration of magnitude-keeping heads (dot, qnorm, dnorm; learnable starts at γ=1, "
                        "normalized, so it is not calibrated) before training (default on: measured to help QNorm "
                        "and DNorm on every set; 'both' adds calibrated runs as <head>+cal)")
    p.add_argument("--skip-base", dest="include_base", action="store_false", default=None,
                   help="do not evaluate the untouched base model")
    p.add_argument("--save-models", action="store_true", default=None, help="keep each fine-tuned model")
    p.set_defaults(func=_run_cli)


def config_from_args(args: argparse.Namespace) -> AblationConfig:
    """Merge defaults < preset < explicit flags into an :class:`AblationConfig`."""
    values: dict[str, Any] = {}
    if args.preset:
        values.update(PRESETS[args.preset])
    for f in dataclasses.fields(AblationConfig):
        value = getattr(args, f.name, None)
        if value is None:
            continue
        if f.name in ("eval", "heads"):
            value = [v.strip() for v in value.split(",") if v.strip()]
        values[f.name] = value
    return AblationConfig(**values)


def _run_cli(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    results = run_ablation(config)
    print()
    print(render_markdown(results))
    written = ["results.json", "results.md", "ablation.png"] + (["gamma.png"] if (Path(config.output) / "gamma.png").exists() else [])
    print(f"Wrote {', '.join(written)} to {config.output}")
    return 0
