"""``st-magnitude`` command line: a thin skin over the Python API, one subcommand per entry point.

Each subcommand lives in the module that implements it: the module defines
``register_cli(subparsers: argparse._SubParsersAction) -> None``, which adds its parser and sets
``func=<callable taking the parsed args, returning an exit code>``. Only the module of the subcommand being run
is imported (:data:`SUBCOMMANDS`), so ``st-magnitude --help`` answers in well under a second.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from st_magnitude.errors import StMagnitudeError

__all__ = ["main", "build_parser", "SUBCOMMAND_MODULES"]

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "ablation": ("st_magnitude.ablation", "fine-tune one model per head and compare retrieval (the main job)"),
    "evaluate": ("st_magnitude.mteb", "run mteb tasks (local folders or standard names) with the symmetry guard"),
    "analyze": ("st_magnitude.analysis", "document/query norm diagnostics (Cohen's d, histograms, length correlation, τ_eff)"),
    "recommend": ("st_magnitude.fisher", "before training: cosine, QNorm or DNorm? (zero-shot document-norm Cohen's d + Fisher κ)"),
    "rag-eval": ("st_magnitude.rag", "answer-recall@k, gold-passage recall@k and NDCG@10 for RAG retrieval, per head"),
    "push": ("st_magnitude.hub", "upload a saved magnitude model to the Hugging Face Hub with a correct model card"),
}
"""Subcommand -> (module defining ``register_cli``, one-line help). Only the module of the subcommand being run
is imported, so ``st-magnitude --help`` does not import torch, sentence-transformers or mteb."""

SUBCOMMAND_MODULES: tuple[str, ...] = tuple(module for module, _ in SUBCOMMANDS.values())


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; ``command``'s module is imported to register its full parser (None = every one)."""
    parser = argparse.ArgumentParser(
        prog="st-magnitude",
        description="Train, evaluate and analyse sentence-transformers retrievers that keep embedding magnitude "
        "(arXiv:2602.09229).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if command is None or command == name:
            module = importlib.import_module(module_name)
            module.register_cli(subparsers)
        else:
            subparsers.add_parser(name, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``st-magnitude`` console script; returns the process exit code.

    Package errors (:class:`~st_magnitude.errors.StMagnitudeError`) are printed as one clear message with
    exit code 2 instead of a traceback (``-v`` shows the traceback too).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in SUBCOMMANDS else "")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except StMagnitudeError as exc:
        if args.verbose:
            raise
        print(f"st-magnitude {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
