"""``st-magnitude`` command line: a thin skin over the Python API, one subcommand per entry point.

Each subcommand lives in the module that implements it: the module defines
``register_cli(subparsers: argparse._SubParsersAction) -> None``, which adds its parser and sets
``func=<callable taking the parsed args, returning an exit code>``. Heavy imports (torch, mteb, faiss)
happen inside those callables so ``st-magnitude --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
from collections.abc import Sequence

from st_magnitude.errors import StMagnitudeError

__all__ = ["main", "build_parser", "SUBCOMMAND_MODULES"]

SUBCOMMAND_MODULES: tuple[str, ...] = (
    "st_magnitude.ablation",  # ablation
    "st_magnitude.mteb",  # evaluate
    "st_magnitude.analysis",  # analyze
    "st_magnitude.fisher",  # recommend
    "st_magnitude.rag",  # rag-eval
    "st_magnitude.hub",  # push
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="st-magnitude",
        description="Train, evaluate and analyse sentence-transformers retrievers that keep embedding magnitude "
        "(arXiv:2602.09229).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        register = getattr(module, "register_cli", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``st-magnitude`` console script; returns the process exit code.

    Package errors (:class:`~st_magnitude.errors.StMagnitudeError`) are printed as one clear message with
    exit code 2 instead of a traceback (``-v`` shows the traceback too).
    """
    parser = build_parser()
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
