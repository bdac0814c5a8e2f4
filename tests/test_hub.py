"""Save/load round trips, head-config validation, the model card, and push_to_hub up to the upload.

Reloads happen in fresh Python processes (subprocess), so nothing is shared with the saving process but the
folder on disk. The Hub is never contacted: ``HfApi`` is replaced by a mock that records the exact calls.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

from st_magnitude.errors import HeadConfigError
from st_magnitude.heads import Cosine, DNorm, Dot, LearnableNorm, QNorm, attach_head
from st_magnitude.hub import (
    LOADER_MODULE,
    MAGNITUDE_SECTION_TITLE,
    push_to_hub,
    render_model_card,
    save_magnitude_model,
)

QUERIES = ["what is the magnitude of a vector", "heart disease diet"]
DOCUMENTS = ["the norm of a vector is its magnitude", "a diet for the heart", "cat and dog in the house", ""]

HEAD_FACTORIES = {
    "cosine": lambda: Cosine(),
    "dot": lambda: Dot(),
    "qnorm": lambda: QNorm(),
    "dnorm": lambda: DNorm(document_scale=2.5),
    "learnable": lambda: LearnableNorm(gamma_query=0.3, gamma_document=0.8, query_scale=1.7),
}

# Blocks `import st_magnitude` as if the package were not installed (a real ModuleNotFoundError, name set).
_BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "st_magnitude" or name.startswith("st_magnitude."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _Block())
    """
)


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", HF_MODULES_CACHE=str(tmp_path / "hf_modules"))
    return env


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True, timeout=600, check=False
    )


def _with_head(tiny_model, name: str):
    return attach_head(tiny_model, HEAD_FACTORIES[name]())


# --------------------------------------------------------------------------------------------------------
# Save -> load in a fresh process: bit-exact embeddings, same similarity function, same γ
# --------------------------------------------------------------------------------------------------------
def test_reload_in_fresh_process_is_bit_exact(tiny_bert_dir, tmp_path):
    """Every head, saved with save_magnitude_model (two also with ST's save_pretrained, two with the loader shim), reloads
    in a new process with identical float32 embeddings, the same similarity_fn_name and the same γ values."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    expected = {}
    jobs = []  # (folder, loader) pairs
    for name in HEAD_FACTORIES:
        transformer = Transformer(str(tiny_bert_dir), max_seq_length=64)
        model = SentenceTransformer(
            modules=[transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")], device="cpu"
        )
        _with_head(model, name)
        head = model[len(model) - 1]
        q = model.encode_query(QUERIES, convert_to_numpy=True)
        d = model.encode_document(DOCUMENTS, convert_to_numpy=True)
        # Every head through save_magnitude_model; ST's own save_pretrained and the loader shim on two heads each.
        ways = ["magnitude"] + (["st_save"] if name in ("qnorm", "learnable") else []) + (
            ["shim"] if name in ("dnorm", "learnable") else []
        )
        for how in ways:
            folder = tmp_path / f"{name}-{how}"
            if how == "st_save":
                model.save_pretrained(str(folder))
            else:
                save_magnitude_model(model, folder, loader_shim=how == "shim")
            expected[str(folder)] = (q, d, model.similarity_fn_name, head.gamma_query, head.gamma_document)
            # The shim folder references code in the folder: load_model does not auto-trust it, so pass the flag.
            jobs.append((str(folder), "st" if how == "shim" else "load_model"))

    out = tmp_path / "reloaded"
    code = textwrap.dedent(
        f"""
        import json, sys, numpy as np
        from sentence_transformers import SentenceTransformer
        from st_magnitude.models import load_model
        from st_magnitude.heads import find_head
        out = {str(out)!r}
        result = {{}}
        for i, (folder, how) in enumerate({jobs!r}):
            model = load_model(folder) if how == "load_model" else SentenceTransformer(folder, trust_remote_code=True, device="cpu")
            head = find_head(model)
            np.save(f"{{out}}-{{i}}-q.npy", model.encode_query({QUERIES!r}, convert_to_numpy=True))
            np.save(f"{{out}}-{{i}}-d.npy", model.encode_document({DOCUMENTS!r}, convert_to_numpy=True))
            result[folder] = [model.similarity_fn_name, head.gamma_query, head.gamma_document,
                              type(head).__module__ + "." + type(head).__name__]
        print("RESULT" + json.dumps(result))
        """
    )
    proc = _run(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    for i, (folder, _) in enumerate(jobs):
        q, d, sim, gq, gd = expected[folder]
        assert np.array_equal(np.load(f"{out}-{i}-q.npy"), q), folder
        assert np.array_equal(np.load(f"{out}-{i}-d.npy"), d), folder
        assert result[folder][:3] == [sim, gq, gd], folder
        assert result[folder][3].startswith("st_magnitude.heads."), folder  # the shim hands back the real class
    # Spot-check the expected values themselves, not only their equality.
    learn = tmp_path / "learnable-magnitude"
    assert result[str(learn)][:3] == ["dot", pytest.approx(0.3, abs=1e-7), pytest.approx(0.8, abs=1e-7)]
    assert result[str(tmp_path / "cosine-magnitude")][:3] == ["cosine", 1.0, 1.0]
    assert result[str(tmp_path / "qnorm-st_save")][:3] == ["dot", 1.0, 0.0]
    # The empty document under Cosine is the zero-safe normalization of a non-zero pooled [CLS]/[SEP] vector.
    q, d, *_ = expected[str(tmp_path / "cosine-magnitude")]
    np.testing.assert_allclose(np.linalg.norm(d, axis=1), 1.0, atol=1e-6)


def test_missing_package_message(tiny_model, tmp_path):
    """Without st-magnitude installed: ST's own message vs. the loader shim's message (see docs/publishing.md)."""
    model = _with_head(tiny_model, "qnorm")
    plain, shim = tmp_path / "plain", tmp_path / "shim"
    save_magnitude_model(model, plain)
    save_magnitude_model(model, shim, loader_shim=True)
    code = _BLOCKER + textwrap.dedent(
        f"""
        from sentence_transformers import SentenceTransformer
        for folder, trust in (({str(plain)!r}, False), ({str(plain)!r}, True), ({str(shim)!r}, True)):
            try:
                SentenceTransformer(folder, trust_remote_code=trust, device="cpu")
                print("LOADED")
            except Exception as exc:
                print("ERR", type(exc).__name__, str(exc).replace(chr(10), " "))
        """
    )
    proc = _run(code, tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("ERR", "LOADED"))]
    assert len(lines) == 3, proc.stdout + proc.stderr[-2000:]
    # 1. ST refuses any non-ST class without trust_remote_code (before trying to import it).
    assert lines[0].startswith("ERR ValueError") and "trust_remote_code=True" in lines[0]
    assert "st_magnitude.heads.QNorm" in lines[0]
    # 2. With the flag, plain folder: ST's bare import error (names the module, not how to install it).
    assert lines[1] == "ERR ModuleNotFoundError No module named 'st_magnitude'"
    # 3. With the loader shim: our message, naming the pip package and the head.
    assert lines[2].startswith("ERR ImportError This model ends with a magnitude head (QNorm)")
    assert "pip install st-magnitude" in lines[2]


# --------------------------------------------------------------------------------------------------------
# Hand-edited / corrupted head configs
# --------------------------------------------------------------------------------------------------------
def _saved_learnable(tiny_model, tmp_path) -> Path:
    model = attach_head(tiny_model, LearnableNorm(gamma_query=0.25, gamma_document=0.75))
    folder = tmp_path / "saved"
    save_magnitude_model(model, folder)
    return folder


def _edit_head_config(folder: Path, edit) -> None:
    config_file = folder / "2_LearnableNorm" / "config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps(edit(config)))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: {**c, "gamma_query": 1.5}, r"gamma_query must lie in \[0, 1\].*got 1\.5"),
        (lambda c: {**c, "gamma_document": -0.1}, r"gamma_document must lie in \[0, 1\]"),
        (lambda c: {**c, "gamma_query": float("nan")}, r"gamma_query must lie in \[0, 1\]"),
        (lambda c: {**c, "gamma_query": "0.5"}, r"gamma_query must be a number in \[0, 1\], got '0.5' \(str\)"),
        (lambda c: {**c, "gamma_query": True}, r"gamma_query must be a number"),
        (lambda c: {**c, "trainable": "yes"}, r"trainable must be true or false"),
        (lambda c: {**c, "query_scale": 0}, r"query_scale must be a finite number > 0"),
        (lambda c: {k: v for k, v in c.items() if k != "gamma_document"}, r"missing required keys \['gamma_document'\]"),
        (lambda c: [c], r"head config must be a JSON object, got list"),
    ],
    ids=["gamma>1", "gamma<0", "gamma-nan", "gamma-str", "gamma-bool", "trainable-str", "scale-0", "missing-key", "not-object"],
)
def test_corrupted_head_config_fails_on_load(tiny_model, tmp_path, edit, message):
    from st_magnitude.models import load_model

    folder = _saved_learnable(tiny_model, tmp_path)
    _edit_head_config(folder, edit)
    with pytest.raises(HeadConfigError, match=message) as info:
        load_model(folder)
    assert "2_LearnableNorm" in str(info.value)  # the message names the file's folder


def test_unknown_head_config_key_warns_and_loads(tiny_model, tmp_path):
    from st_magnitude.models import load_model

    folder = _saved_learnable(tiny_model, tmp_path)
    _edit_head_config(folder, lambda c: {**c, "gamma_schedule": "cosine"})
    with pytest.warns(UserWarning, match=r"ignoring unknown LearnableNorm config keys \['gamma_schedule'\]"):
        model = load_model(folder)
    head = model[len(model) - 1]
    assert (head.gamma_query, head.gamma_document) == (0.25, 0.75)


def test_from_config_direct():
    head = LearnableNorm.from_config({"gamma_query": 0, "gamma_document": 1, "trainable": False})
    assert (head.gamma_query, head.gamma_document, head.trainable) == (0.0, 1.0, False)
    assert not head.raw_gamma_query.requires_grad
    with pytest.raises(HeadConfigError, match=r"<dict>: .*missing required keys \['gamma_query'\]"):
        LearnableNorm.from_config({"gamma_document": 1})
    with pytest.raises(HeadConfigError, match="query_scale"):
        QNorm.from_config({"query_scale": -1.0})


def test_missing_head_config_file_fails(tiny_model, tmp_path):
    from st_magnitude.models import load_model

    model = attach_head(tiny_model, QNorm(query_scale=2.0))
    folder = tmp_path / "saved"
    save_magnitude_model(model, folder)
    (folder / "2_QNorm" / "config.json").unlink()
    with pytest.raises(HeadConfigError, match="config"):
        load_model(folder)


# --------------------------------------------------------------------------------------------------------
# Model card
# --------------------------------------------------------------------------------------------------------
def test_st_plain_save_card_uses_roles_after_attach_head(tiny_model, tmp_path, caplog):
    """ST's default card runs model.encode(), which QNorm refuses; attach_head sets ST's ``ir_model`` flag so even a
    plain ``model.save`` writes an encode_query/encode_document snippet and logs no snippet error."""
    model = _with_head(tiny_model, "qnorm")
    with caplog.at_level("WARNING", logger="sentence_transformers"):
        model.save(str(tmp_path / "st"))
    card = (tmp_path / "st" / "README.md").read_text()
    assert "model.encode(sentences)" not in card
    assert "encode_query" in card and "encode_document" in card
    messages = [r.getMessage() for r in caplog.records]
    assert not any("Error while computing usage snippet output" in m for m in messages), messages


def test_card_for_qnorm(tiny_model, tmp_path):
    model = _with_head(tiny_model, "qnorm")
    folder = save_magnitude_model(model, tmp_path / "m", model_id="alice/minilm-qnorm")
    card = (folder / "README.md").read_text()
    # Usage snippet: roles, the loading flag, the install line, the real model id.
    assert 'model = SentenceTransformer("alice/minilm-qnorm", trust_remote_code=True)' in card
    assert "query_embeddings = model.encode_query(queries)" in card
    assert "document_embeddings = model.encode_document(documents)" in card
    assert "model.encode(sentences)" not in card
    assert "pip install -U sentence-transformers st-magnitude" in card
    # Head facts.
    assert MAGNITUDE_SECTION_TITLE in card and card.index(MAGNITUDE_SECTION_TITLE) < card.index("## Usage")
    assert "| Head | `QNorm` (`st_magnitude.heads.QNorm`) |" in card
    assert "| γ_query | 1 (unit-normalized) |" in card
    assert "| γ_document | 0 (magnitude kept (raw)) |" in card
    assert "| Similarity function | `dot`" in card
    assert "- **Similarity Function:** Dot Product" in card
    assert "**Symmetric tasks are refused.**" in card and "SymmetryViolationError" in card
    assert "| Symmetric (s(a, b) = s(b, a)) | **no** |" in card
    # YAML metadata.
    meta = card.split("---", 2)[1]
    assert "- st-magnitude" in meta and "- asymmetric-retrieval" in meta
    # The similarities printed in the snippet are the model's own dot products (computed here independently).
    examples = re.findall(r"^    ['\"](.*)['\"],$", card.split("queries = [", 1)[1].split("query_embeddings", 1)[0], re.M)
    assert len(examples) == 4
    q = model.encode_query(examples[:1], convert_to_tensor=True)
    d = model.encode_document(examples[1:], convert_to_tensor=True)
    expected = (q @ d.T).squeeze(0)
    printed = [float(x) for x in re.search(r"# tensor\(\[\[(.*)\]\]\)", card).group(1).split(",")]
    np.testing.assert_allclose(printed, expected.numpy(), atol=6e-5)
    assert (folder / "README.md").stat().st_size == len(card.encode())


def test_card_for_learnable_and_symmetric_heads(tiny_model, tiny_bert_dir):
    model = _with_head(tiny_model, "learnable")  # γ_q = 0.3, γ_d = 0.8, query_scale 1.7
    card = render_model_card(model)
    assert "| Head | `LearnableNorm` (`st_magnitude.heads.LearnableNorm`) |" in card
    assert "| γ_query | 0.3 (magnitude partly kept: output norm = ‖x‖^0.7) |" in card
    assert "| γ_document | 0.8 (magnitude partly kept: output norm = ‖x‖^0.2) |" in card
    assert "| Scales | query × 1.7, document × 1 |" in card
    assert "| γ learned | yes" in card
    assert 'SentenceTransformer("sentence_transformers_model_id", trust_remote_code=True)' in card

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = Transformer(str(tiny_bert_dir), max_seq_length=64)
    cosine = attach_head(
        SentenceTransformer(modules=[transformer, Pooling(32, pooling_mode="mean")], device="cpu"), Cosine()
    )
    card = render_model_card(cosine)
    assert "| Similarity function | `cosine` |" in card
    assert "| Symmetric (s(a, b) = s(b, a)) | yes |" in card
    assert "may also be used for symmetric tasks" in card and "refused" not in card
    assert "- asymmetric-retrieval" not in card.split("---", 2)[1]


def test_card_requires_a_head(tiny_model, tmp_path):
    with pytest.raises(ValueError, match=r"not a magnitude head.*attach_head"):
        save_magnitude_model(tiny_model, tmp_path / "x")


def test_loaded_model_resaves_with_card(tiny_model, tmp_path):
    """A loaded model re-saved by ST keeps our card (ST reuses README.md of an untrained loaded model)."""
    from st_magnitude.models import load_model

    folder = save_magnitude_model(_with_head(tiny_model, "dnorm"), tmp_path / "a", model_id="bob/x")
    load_model(folder).save(str(tmp_path / "b"))
    assert (tmp_path / "b" / "README.md").read_text() == (folder / "README.md").read_text()


# --------------------------------------------------------------------------------------------------------
# push_to_hub / st-magnitude push, with a mocked huggingface_hub API
# --------------------------------------------------------------------------------------------------------
class _FakeHub:
    """Stands in for huggingface_hub.HfApi inside sentence_transformers.base.model; records the upload."""

    def __init__(self) -> None:
        self.api = mock.MagicMock(name="HfApi()")
        self.cls = mock.MagicMock(name="HfApi", return_value=self.api)
        self.uploaded: dict[str, bytes] = {}
        self.api.create_repo.side_effect = lambda repo_id, **kw: mock.Mock(repo_id=repo_id)
        self.api.upload_folder.side_effect = self._upload

    def _upload(self, repo_id, folder_path, **kwargs):
        root = Path(folder_path)
        self.uploaded = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
        return mock.Mock(commit_url=f"https://huggingface.co/{repo_id}/commit/abc123", pr_url=None)


def test_push_to_hub_exact_calls(tiny_model):
    model = _with_head(tiny_model, "qnorm")
    hub = _FakeHub()
    with mock.patch("sentence_transformers.base.model.HfApi", hub.cls):
        url = push_to_hub(model, "alice/minilm-qnorm", private=True, token="hf_test")
    assert url == "https://huggingface.co/alice/minilm-qnorm/commit/abc123"
    hub.cls.assert_called_once_with(token="hf_test")
    hub.api.create_repo.assert_called_once_with(repo_id="alice/minilm-qnorm", private=True, repo_type=None, exist_ok=True)
    hub.api.upload_folder.assert_called_once()
    kwargs = hub.api.upload_folder.call_args.kwargs
    assert kwargs["repo_id"] == "alice/minilm-qnorm"
    assert kwargs["commit_message"] == "Add new SentenceTransformer model"
    assert kwargs["create_pr"] is False and kwargs["revision"] is None
    assert not Path(kwargs["folder_path"]).exists()  # the temporary folder is cleaned up
    files = set(hub.uploaded)
    assert {"README.md", "modules.json", "config_sentence_transformers.json", "model.safetensors",
            "2_QNorm/config.json", f"{LOADER_MODULE}.py", "1_Pooling/config.json"} <= files
    card = hub.uploaded["README.md"].decode()
    assert 'SentenceTransformer("alice/minilm-qnorm", trust_remote_code=True)' in card
    assert "encode_query" in card and f"`{LOADER_MODULE}.py`" in card
    modules = json.loads(hub.uploaded["modules.json"])
    assert modules[2]["type"] == f"{LOADER_MODULE}.QNorm"
    assert json.loads(hub.uploaded["config_sentence_transformers.json"])["similarity_fn_name"] == "dot"


def test_cli_push(tiny_model, tmp_path, capsys):
    from st_magnitude.cli import main

    folder = save_magnitude_model(_with_head(tiny_model, "learnable"), tmp_path / "m")
    hub = _FakeHub()
    with mock.patch("sentence_transformers.base.model.HfApi", hub.cls):
        rc = main(["push", "--model", str(folder), "--repo-id", "carol/learned", "--private", "--no-loader-shim"])
    assert rc == 0
    hub.api.create_repo.assert_called_once_with(repo_id="carol/learned", private=True, repo_type=None, exist_ok=True)
    assert f"{LOADER_MODULE}.py" not in hub.uploaded
    assert json.loads(hub.uploaded["modules.json"])[2]["type"] == "st_magnitude.heads.LearnableNorm"
    assert json.loads(hub.uploaded["2_LearnableNorm/config.json"])["gamma_query"] == pytest.approx(0.3, abs=1e-7)
    # The uploaded weights are the saved ones, byte for byte.
    assert hub.uploaded["model.safetensors"] == (folder / "model.safetensors").read_bytes()
    out = capsys.readouterr().out
    assert "LearnableNorm(γ_q=0.3, γ_d=0.8)" in out and "similarity=dot" in out and "commit/abc123" in out

    hub = _FakeHub()
    with mock.patch("sentence_transformers.base.model.HfApi", hub.cls):
        assert main(["push", "--model", str(folder), "--repo-id", "carol/public"]) == 0
    hub.api.create_repo.assert_called_once_with(repo_id="carol/public", private=None, repo_type=None, exist_ok=True)
