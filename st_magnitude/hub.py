"""Hub-ready saving, a correct model card, and ``push_to_hub`` for models with a magnitude head.

Sentence-transformers saves a magnitude head like any module (``modules.json`` records the class
``st_magnitude.heads.QNorm`` etc., ``<idx>_QNorm/config.json`` its γ values and scales,
``config_sentence_transformers.json`` the ``similarity_fn_name``). What ST gets wrong for these models is
the model card:

* its usage snippet calls ``model.encode(...)``, which an asymmetric head refuses
  (:class:`~st_magnitude.errors.MissingTaskError`); ST logs the failure and prints a snippet that would
  fail the same way for the reader;
* it does not say that ``pip install st-magnitude`` and ``trust_remote_code=True`` are needed to load the
  model (sentence-transformers >= 6 imports module classes outside its own namespace only with that flag);
* it says nothing about the head, its γ values, or that asymmetric heads are not for symmetric tasks.

:func:`write_model_card` fixes all three through ST's own hooks (``model_card_data.ir_model = True`` makes
ST's generator use and run ``encode_query``/``encode_document``; ``tags`` and ``task_name`` are card data
fields), then adds a "Magnitude head" section to ST's rendered card. :func:`save_magnitude_model` saves
and writes that card; :func:`push_to_hub` does both in a temporary folder and hands it to ST's
``SentenceTransformer.push_to_hub(local_model_path=...)``. ``st-magnitude push`` is the CLI for it.

Optionally (``loader_shim=True``, the default for :func:`push_to_hub`), the saved folder gets a 20-line
``st_magnitude_loader.py`` and ``modules.json`` points the head at ``st_magnitude_loader.<Class>``. ST then
loads the class through transformers' dynamic-module hook (allowed by the ``trust_remote_code=True`` the
model needs anyway); the file only re-exports the head classes from the *installed* st-magnitude and, when
the package is missing, raises an ``ImportError`` that says ``pip install st-magnitude`` instead of ST's
bare ``No module named 'st_magnitude'``. See ``docs/publishing.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from sentence_transformers import SentenceTransformer

from st_magnitude.heads import HEADS, MagnitudeHead, find_head

logger = logging.getLogger(__name__)

__all__ = [
    "CARD_TAGS",
    "LOADER_MODULE",
    "MAGNITUDE_SECTION_TITLE",
    "require_head",
    "prepare_model_card_data",
    "magnitude_card_section",
    "render_model_card",
    "write_model_card",
    "write_loader_shim",
    "save_magnitude_model",
    "push_to_hub",
    "register_cli",
]

CARD_TAGS: tuple[str, ...] = ("st-magnitude", "magnitude-embeddings", "asymmetric-retrieval")
"""Tags added to the card's YAML metadata (``asymmetric-retrieval`` only for asymmetric heads)."""

LOADER_MODULE = "st_magnitude_loader"
"""Name of the optional loader file written next to ``modules.json`` (see :func:`write_loader_shim`)."""

MAGNITUDE_SECTION_TITLE = "## Magnitude head (st-magnitude)"
"""Heading of the section :func:`write_model_card` inserts before ST's ``## Usage``."""

PAPER = "arXiv:2602.09229"
_PAPER_LINK = "[arXiv:2602.09229](https://arxiv.org/abs/2602.09229)"
_ST_PLACEHOLDER = "sentence_transformers_model_id"

_LOADER_TEMPLATE = '''"""Loader for the magnitude head of this model, written by st-magnitude ({version}).

sentence-transformers loads the head class named in modules.json ("{module}.<Class>") from this file
(only with trust_remote_code=True). The file runs no model code of its own: it re-exports the head
classes from the installed st-magnitude package, and says how to install it when it is missing.
"""

try:
    from st_magnitude.heads import Cosine, DNorm, Dot, LearnableNorm, QNorm
except ImportError as exc:
    missing = getattr(exc, "name", None) or ""
    if missing != "st_magnitude" and not missing.startswith("st_magnitude."):
        raise
    raise ImportError(
        "This model ends with a magnitude head ({heads}) from the st-magnitude package, which is not "
        "installed. Install it with `pip install st-magnitude` (pip install \\"st-magnitude>={version}\\"), "
        "then load the model again with SentenceTransformer(<model>, trust_remote_code=True)."
    ) from exc

__all__ = ["Cosine", "Dot", "QNorm", "DNorm", "LearnableNorm"]
'''


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("st-magnitude")
    except Exception:  # not installed as a distribution (source checkout)
        return "0.1.0"


def require_head(model: SentenceTransformer) -> MagnitudeHead:
    """Return ``model``'s magnitude head.

    Raises:
        ValueError: if the model's last module is not a :class:`~st_magnitude.heads.MagnitudeHead`, naming
            the fix (``attach_head``).
    """
    head = find_head(model)
    if head is None:
        last = type(list(model.children())[-1]).__name__ if len(model) else "nothing"
        raise ValueError(
            f"The model's last module is {last}, not a magnitude head, so there is no head to describe or save. "
            "Attach one first: st_magnitude.attach_head(model, QNorm()) (or Cosine/Dot/DNorm/LearnableNorm)."
        )
    return head


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def prepare_model_card_data(model: SentenceTransformer, model_id: str | None = None) -> None:
    """Set ST's model card data fields so ST's own generator produces a correct card. Modifies ``model``.

    * ``ir_model = True``: ST's generator then *runs* and *prints* ``encode_query``/``encode_document``
      (``SentenceTransformerModelCardData.run_usage_snippet``/``generate_usage_snippet``) instead of
      ``encode``, which an asymmetric head refuses;
    * ``task_name``: retrieval for asymmetric heads (ST's default lists STS and clustering, which they must
      not be used for); ``tags``: :data:`CARD_TAGS`;
    * ``model_id`` (if given as ``owner/name``): used in the snippet instead of ST's placeholder.

    Raises:
        ValueError: if the model has no magnitude head.
    """
    head = require_head(model)
    data = model.model_card_data
    data.ir_model = True
    tags = [t for t in CARD_TAGS if t != "asymmetric-retrieval" or not head.is_symmetric]
    for tag in tags:
        if tag not in data.tags:
            data.tags.append(tag)
    if head.is_symmetric:
        data.task_name = "semantic search, retrieval and symmetric tasks (semantic textual similarity, clustering)"
    else:
        data.task_name = (
            "asymmetric semantic search and retrieval (queries vs. documents); not for symmetric tasks such as "
            "semantic textual similarity or clustering"
        )
    if model_id is not None and model_id.count("/") == 1:
        data.set_model_id(model_id)


def magnitude_card_section(model: SentenceTransformer, loader_shim: bool = False) -> str:
    """The Markdown section describing the head: class, γ values, scales, similarity, symmetry, loading.

    Args:
        model: a model whose last module is a magnitude head.
        loader_shim: whether the saved folder holds ``st_magnitude_loader.py`` (mentioned in the text).

    Returns:
        Markdown text starting with :data:`MAGNITUDE_SECTION_TITLE`.

    Raises:
        ValueError: if the model has no magnitude head.
    """
    head = require_head(model)
    cls = type(head)
    gq, gd = head.gamma_query, head.gamma_document

    def role_text(gamma: float) -> str:
        if gamma >= 1.0:
            return "unit-normalized"
        if gamma <= 0.0:
            return "magnitude kept (raw)"
        return f"magnitude partly kept: output norm = ‖x‖^{_fmt(1 - gamma)}"

    rows = [
        ("Head", f"`{cls.__name__}` (`{cls.__module__}.{cls.__name__}`)"),
        ("γ_query", f"{_fmt(gq)} ({role_text(gq)})"),
        ("γ_document", f"{_fmt(gd)} ({role_text(gd)})"),
    ]
    if getattr(head, "trainable", None) is not None:
        rows.append(("γ learned", "yes (LearnableNorm); the values above are the trained ones" if head.trainable else "no (frozen)"))
    if head.query_scale != 1.0 or head.document_scale != 1.0:
        rows.append(("Scales", f"query × {_fmt(head.query_scale)}, document × {_fmt(head.document_scale)}"))
    rows += [
        (
            "Similarity function",
            f"`{model.similarity_fn_name}`"
            + (" (dot product of the head outputs; cosine would erase the kept magnitude)" if model.similarity_fn_name == "dot" else ""),
        ),
        ("Symmetric (s(a, b) = s(b, a))", "yes" if head.is_symmetric else "**no**"),
    ]
    table = "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    lines = [
        MAGNITUDE_SECTION_TITLE,
        "",
        f"This model ends with a magnitude head from [st-magnitude](https://pypi.org/project/st-magnitude/) "
        f"({_PAPER_LINK}): each embedding x becomes `scale_r * x / ‖x‖^γ_r` for its role r (query or document), "
        "and scores are plain dot products, `s(q, d) = (q / ‖q‖^γ_q) · (d / ‖d‖^γ_d)`.",
        "",
        table,
        "",
        "**Encode with roles.** Use `model.encode_query(...)` for queries and `model.encode_document(...)` for "
        "documents (or `model.encode(..., task=\"query\" | \"document\")`).",
    ]
    if head.is_symmetric:
        lines += [
            "",
            "**Symmetric tasks.** γ_query = γ_document, so the head treats both roles alike and s(a, b) = s(b, a): "
            "this model may also be used for symmetric tasks (semantic textual similarity, clustering, pair "
            "classification); encode both sides with the same method.",
        ]
    else:
        lines += [
            "A plain `model.encode(...)` without a role raises `MissingTaskError`: the head will not guess "
            "whether a text is a query or a document.",
            "",
            "**Symmetric tasks are refused.** γ_query ≠ γ_document, so s(a, b) ≠ s(b, a) in general. Under the "
            f"task symmetry principle ({PAPER}) this model is for asymmetric retrieval only (search, RAG, "
            "question answering); do not use it for semantic textual similarity, clustering, pair "
            "classification or bitext mining. st-magnitude's evaluators raise `SymmetryViolationError` on such "
            "tasks; use a `Cosine()` or `Dot()` head there.",
        ]
    lines += [
        "",
        "**Loading.** The head class lives in the `st-magnitude` package: `pip install st-magnitude`, then "
        "`SentenceTransformer(\"<model>\", trust_remote_code=True)` (sentence-transformers >= 6 imports module "
        "classes from outside its own package only with `trust_remote_code=True`), or "
        "`st_magnitude.models.load_model(\"<local folder>\")`.",
    ]
    if loader_shim:
        lines += [
            f"The repository holds `{LOADER_MODULE}.py`, which `modules.json` names as the head's module: it "
            "only re-exports the head classes from the installed st-magnitude package and, when that package is "
            "missing, raises an error saying `pip install st-magnitude`.",
        ]
    return "\n".join(lines) + "\n"


def render_model_card(model: SentenceTransformer, model_id: str | None = None, loader_shim: bool = False) -> str:
    """ST's generated model card, corrected for the magnitude head (see the module docstring).

    Uses ST's :func:`~sentence_transformers.base.model_card.generate_model_card` after
    :func:`prepare_model_card_data` (so the snippet calls and runs ``encode_query``/``encode_document``),
    then: adds ``trust_remote_code=True`` to the snippet's ``SentenceTransformer(...)`` call, adds
    ``st-magnitude`` to the install line, and inserts :func:`magnitude_card_section` before ``## Usage``.
    Modifies ``model.model_card_data`` (see :func:`prepare_model_card_data`).

    Returns:
        The card as Markdown with YAML front matter.

    Raises:
        ValueError: if the model has no magnitude head.
        RuntimeError: if ST's generator fails (its traceback chained).
    """
    from sentence_transformers.base.model_card import generate_model_card

    prepare_model_card_data(model, model_id=model_id)
    try:
        card = generate_model_card(model)
    except Exception as exc:
        raise RuntimeError(f"sentence-transformers could not generate the model card: {exc}") from exc
    if model.model_card_data.model_id:
        card = card.replace(f'"{_ST_PLACEHOLDER}"', f'"{model.model_card_data.model_id}"')
    card = re.sub(
        r"(model = SentenceTransformer\(\"[^\"]*\")\)",
        r"\1, trust_remote_code=True)  # the head's class comes from the st-magnitude package",
        card,
    )
    card = card.replace(
        "First install the Sentence Transformers library:\n\n```bash\npip install -U sentence-transformers\n```",
        "First install Sentence Transformers and st-magnitude (which defines the magnitude head):\n\n"
        "```bash\npip install -U sentence-transformers st-magnitude\n```",
    )
    section = magnitude_card_section(model, loader_shim=loader_shim)
    if "\n## Usage" in card:
        card = card.replace("\n## Usage", "\n" + section + "\n## Usage", 1)
    else:  # ST changed its template: append rather than lose the section
        card = card.rstrip("\n") + "\n\n" + section
    return card


def write_model_card(
    model: SentenceTransformer, path: str | os.PathLike[str], model_id: str | None = None, loader_shim: bool | None = None
) -> Path:
    """Write :func:`render_model_card` to ``path/README.md`` (overwriting ST's card) and return that path.

    Args:
        model: the model (with a magnitude head).
        path: the saved model folder.
        model_id: Hub id ``owner/name`` for the snippet (default: ``model.model_card_data.model_id``).
        loader_shim: mention the loader file; None = detect ``path/st_magnitude_loader.py``.
    """
    folder = Path(path)
    if loader_shim is None:
        loader_shim = (folder / f"{LOADER_MODULE}.py").is_file()
    model.model_card_data.save_dir = str(folder)
    readme = folder / "README.md"
    readme.write_text(render_model_card(model, model_id=model_id, loader_shim=loader_shim), encoding="utf-8")
    return readme


def write_loader_shim(path: str | os.PathLike[str]) -> Path:
    """Write ``st_magnitude_loader.py`` into a saved model folder and point ``modules.json`` at it.

    Every ``modules.json`` entry whose ``type`` is ``st_magnitude.heads.<Class>`` becomes
    ``st_magnitude_loader.<Class>``. Loading then goes through transformers' dynamic-module hook
    (``get_class_from_dynamic_module``, used by ST when ``trust_remote_code=True``), which imports the file;
    the file re-exports the classes of the installed st-magnitude, or raises ``ImportError`` naming
    ``pip install st-magnitude``. Without ``trust_remote_code=True`` ST refuses to load either way.
    Re-saving a loaded model writes ``st_magnitude.heads.<Class>`` again (the class's real module).

    Returns:
        Path of the written loader file.

    Raises:
        ValueError: if ``modules.json`` names no st-magnitude head.
    """
    folder = Path(path)
    modules_file = folder / "modules.json"
    modules = json.loads(modules_file.read_text(encoding="utf-8"))
    heads = []
    for entry in modules:
        module_path, _, class_name = entry["type"].rpartition(".")
        if module_path in ("st_magnitude.heads", LOADER_MODULE) and class_name in {c.__name__ for c in HEADS.values()}:
            entry["type"] = f"{LOADER_MODULE}.{class_name}"
            heads.append(class_name)
    if not heads:
        raise ValueError(f"{modules_file} names no st-magnitude head; save a model with a magnitude head first.")
    modules_file.write_text(json.dumps(modules, indent=2), encoding="utf-8")
    shim = folder / f"{LOADER_MODULE}.py"
    shim.write_text(
        _LOADER_TEMPLATE.format(version=_package_version(), module=LOADER_MODULE, heads=", ".join(heads)),
        encoding="utf-8",
    )
    return shim


def save_magnitude_model(
    model: SentenceTransformer,
    path: str | os.PathLike[str],
    model_id: str | None = None,
    loader_shim: bool = False,
    safe_serialization: bool = True,
) -> Path:
    """Save ``model`` with ST's ``save`` and write the corrected model card.

    The folder reloads with ``SentenceTransformer(path, trust_remote_code=True)`` or
    ``st_magnitude.models.load_model(path)``: same weights (bit-exact embeddings on CPU), same head and γ,
    same ``similarity_fn_name``.

    Args:
        model: a model whose last module is a magnitude head.
        path: output folder (created).
        model_id: Hub id ``owner/name`` for the card's snippet.
        loader_shim: also write :func:`write_loader_shim` (clear error without st-magnitude installed; the
            folder then needs an explicit ``trust_remote_code=True``, also through ``load_model``).
        safe_serialization: passed to ST's ``save``.

    Returns:
        The folder.

    Raises:
        ValueError: if the model has no magnitude head.
    """
    require_head(model)
    folder = Path(path)
    model.save(str(folder), create_model_card=False, safe_serialization=safe_serialization)
    if loader_shim:
        write_loader_shim(folder)
    write_model_card(model, folder, model_id=model_id, loader_shim=loader_shim)
    return folder


def push_to_hub(
    model: SentenceTransformer,
    repo_id: str,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    exist_ok: bool = True,
    loader_shim: bool = True,
    revision: str | None = None,
    create_pr: bool = False,
) -> str:
    """Save ``model`` with the corrected card in a temporary folder and upload it with ST's ``push_to_hub``.

    Wraps ``SentenceTransformer.push_to_hub(repo_id, local_model_path=<tmp>, ...)``, which creates the
    repository (``HfApi.create_repo(repo_id, private=private, exist_ok=...)``) and uploads the folder
    (``HfApi.upload_folder``). Passing the folder makes ST upload our card instead of generating its own.

    Args:
        model: a model whose last module is a magnitude head.
        repo_id: ``owner/name`` (or ``name`` for your own namespace).
        private: create the repository as private (None = the Hub's default, public).
        token: Hub token (None = the logged-in token).
        commit_message: commit message (None = ST's default).
        exist_ok: allow pushing to an existing repository (default True).
        loader_shim: write ``st_magnitude_loader.py`` (see :func:`write_loader_shim`); default True.
        revision, create_pr: passed to ST.

    Returns:
        The commit (or pull request) URL returned by the Hub.

    Raises:
        ValueError: if the model has no magnitude head or ``repo_id`` is empty.
    """
    require_head(model)
    if not repo_id or not repo_id.strip():
        raise ValueError("repo_id must be a Hub repository id such as 'your-name/model-name'.")
    with tempfile.TemporaryDirectory(prefix="st-magnitude-push-") as tmp:
        save_magnitude_model(model, tmp, model_id=repo_id, loader_shim=loader_shim)
        return model.push_to_hub(
            repo_id,
            token=token,
            private=private,
            commit_message=commit_message,
            local_model_path=tmp,
            exist_ok=exist_ok,
            revision=revision,
            create_pr=create_pr,
        )


# --- CLI ----------------------------------------------------------------------------------------------
def _cli_push(args: argparse.Namespace) -> int:
    from st_magnitude.models import load_model

    model = load_model(args.model, trust_remote_code=True) if args.trust_remote_code else load_model(args.model)
    head = require_head(model)
    url = push_to_hub(
        model,
        args.repo_id,
        private=args.private,
        token=args.token,
        commit_message=args.commit_message,
        loader_shim=not args.no_loader_shim,
    )
    print(f"pushed {args.model} ({head.describe()}, similarity={model.similarity_fn_name}) to {args.repo_id}: {url}")
    return 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``st-magnitude push --model PATH --repo-id ID [--private]``."""
    parser = subparsers.add_parser(
        "push",
        help="upload a saved magnitude model to the Hugging Face Hub with a correct model card",
        description="Load a saved model with a magnitude head, write a model card that uses encode_query/"
        "encode_document and states the head, γ values and similarity function, and upload it with "
        "sentence-transformers' push_to_hub.",
    )
    parser.add_argument("--model", required=True, help="saved model folder (with a magnitude head)")
    parser.add_argument("--repo-id", required=True, help="Hub repository, e.g. your-name/minilm-qnorm")
    parser.add_argument("--private", action="store_true", default=None, help="create the repository as private")
    parser.add_argument("--token", default=None, help="Hub token (default: the logged-in one)")
    parser.add_argument("--commit-message", default=None)
    parser.add_argument(
        "--no-loader-shim", action="store_true", help=f"do not add {LOADER_MODULE}.py (clear error when st-magnitude is missing)"
    )
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="needed only if the folder references code other than ST/st-magnitude"
    )
    parser.set_defaults(func=_cli_push)
