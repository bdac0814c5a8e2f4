"""Magnitude heads: hand-computed scores, γ limits, roles, attach_head, save/load."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from st_magnitude import Cosine, DNorm, Dot, LearnableNorm, QNorm, attach_head, find_head, make_head
from st_magnitude.errors import HeadConfigError, MissingTaskError, UnknownRoleError
from st_magnitude.heads import gamma_learning_rate_mapping, resolve_role

Q = torch.tensor([[3.0, 4.0]])  # ‖q‖ = 5
D = torch.tensor([[0.0, 2.0], [1.0, 0.0]])  # ‖d‖ = 2, 1


def score(head, q=Q, d=D) -> torch.Tensor:
    qe = head({"sentence_embedding": q.clone()}, task="query")["sentence_embedding"]
    de = head({"sentence_embedding": d.clone()}, task="document")["sentence_embedding"]
    return qe @ de.T


@pytest.mark.parametrize(
    "head, expected",
    [
        (Cosine(), [[0.8, 0.6]]),  # q̂·d̂
        (Dot(), [[8.0, 3.0]]),  # q·d
        (QNorm(), [[1.6, 0.6]]),  # q̂·d = (0.6, 0.8)·d
        (DNorm(), [[4.0, 3.0]]),  # q·d̂
        (LearnableNorm(0.5, 0.5), [[8.0 / math.sqrt(10), 3.0 / math.sqrt(5)]]),  # q/√5 · d/√‖d‖
    ],
    ids=["cosine", "dot", "qnorm", "dnorm", "learnable-0.5"],
)
def test_hand_computed_scores(head, expected) -> None:
    assert torch.allclose(score(head), torch.tensor(expected), atol=1e-6)


def test_qnorm_and_dnorm_rank_differently() -> None:
    # QNorm prefers the long document (1.6 > 0.6); with Q2 = (4, 0.5) DNorm prefers the second.
    q2 = torch.tensor([[4.0, 0.5]])
    assert score(QNorm(), q2).argmax().item() == 1 or score(QNorm(), q2)[0, 0] < score(QNorm(), q2)[0, 1]
    assert score(Cosine(), q2).argmax().item() == 1
    assert score(QNorm(), Q).argmax().item() == 0


@pytest.mark.parametrize(
    "learnable, fixed",
    [((1.0, 1.0), Cosine()), ((0.0, 0.0), Dot()), ((1.0, 0.0), QNorm()), ((0.0, 1.0), DNorm())],
    ids=["cosine", "dot", "qnorm", "dnorm"],
)
def test_learnable_limits_reproduce_fixed_heads(learnable, fixed) -> None:
    torch.manual_seed(0)
    q, d = torch.randn(4, 8) * 3, torch.randn(5, 8) * 2
    assert torch.allclose(score(LearnableNorm(*learnable), q, d), score(fixed, q, d), atol=1e-6)


def test_symmetry_and_similarity_properties() -> None:
    assert Cosine().is_symmetric and not Cosine().keeps_magnitude and Cosine().similarity_fn_name == "cosine"
    assert Dot().is_symmetric and Dot().similarity_fn_name == "dot"
    assert not QNorm().is_symmetric and QNorm().similarity_fn_name == "dot"
    assert not DNorm().is_symmetric
    assert LearnableNorm(0.3, 0.3).is_symmetric and not LearnableNorm(0.3, 0.4).is_symmetric
    assert (QNorm().gamma_query, QNorm().gamma_document) == (1.0, 0.0)


def test_roles_and_synonyms() -> None:
    assert resolve_role("passage") == "document" and resolve_role("corpus") == "document"
    assert resolve_role("Query") == "query" and resolve_role(None) is None
    with pytest.raises(UnknownRoleError, match="'sts'"):
        resolve_role("sts")
    # features["task"] (stamped by the trainer's collator) is read when no keyword is given
    out = QNorm()({"sentence_embedding": Q.clone(), "task": "query"})["sentence_embedding"]
    assert torch.allclose(out, torch.tensor([[0.6, 0.8]]))


def test_asymmetric_head_without_role_raises_and_symmetric_works() -> None:
    for head in (QNorm(), DNorm(), LearnableNorm(1.0, 0.2)):
        with pytest.raises(MissingTaskError) as info:
            head({"sentence_embedding": Q.clone()})
        message = str(info.value)
        assert "encode_query" in message and "router_mapping" in message and "STS" in message
    out = Dot(query_scale=4.0, document_scale=1.0)({"sentence_embedding": Q.clone()})["sentence_embedding"]
    assert torch.allclose(out, Q * 2.0)  # no role: geometric mean of the per-role scales


def test_invalid_config_raises() -> None:
    with pytest.raises(HeadConfigError, match=r"\[0, 1\]"):
        LearnableNorm(gamma_query=1.2)
    with pytest.raises(HeadConfigError, match="number"):
        LearnableNorm(gamma_query="1")
    with pytest.raises(HeadConfigError, match="> 0"):
        QNorm(document_scale=0.0)
    with pytest.raises(ValueError, match="Unknown head"):
        make_head("cos")


def test_gamma_can_leave_one_and_stays_in_unit_interval() -> None:
    head = LearnableNorm()
    opt = torch.optim.SGD(head.parameters(), lr=0.5)
    # A loss that wants γ_q lower passes through the projected clamp at γ = 1.
    (head.gamma("query") * 1.0).backward()
    opt.step()
    assert math.isclose(head.gamma_query, 0.5, abs_tol=1e-6)
    # A loss that wants γ_d higher than 1 is blocked: γ_d stays exactly 1.
    opt.zero_grad()
    (-head.gamma("document")).backward()
    opt.step()
    assert head.gamma_document == 1.0
    assert gamma_learning_rate_mapping(0.01) == {LearnableNorm.PARAMETER_PATTERN: 0.01}


def test_attach_head_on_model_with_normalize(tiny_model) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize

    tiny_model.append(Normalize())
    raw = SentenceTransformer(modules=[tiny_model[0], tiny_model[1]], device="cpu")
    texts = ["the cat is a dog", "protein gene cell"]
    pooled = raw.encode(texts, convert_to_tensor=True)
    attach_head(tiny_model, QNorm())
    assert len(tiny_model) == 3 and isinstance(find_head(tiny_model), QNorm)
    assert tiny_model.similarity_fn_name == "dot"
    q = tiny_model.encode_query(texts, convert_to_tensor=True)
    d = tiny_model.encode_document(texts, convert_to_tensor=True)
    assert torch.allclose(q.norm(dim=-1), torch.ones(2), atol=1e-6)
    assert torch.allclose(d, pooled, atol=1e-6)  # document magnitude kept exactly
    with pytest.raises(MissingTaskError):
        tiny_model.encode(texts)
    # Re-attaching replaces the head rather than stacking a second one.
    attach_head(tiny_model, Cosine())
    assert len(tiny_model) == 3 and tiny_model.similarity_fn_name == "cosine"
    assert np.allclose(np.linalg.norm(tiny_model.encode(texts), axis=1), 1.0, atol=1e-6)


def test_save_load_fresh_process_is_bit_exact(tiny_model, tmp_path: Path) -> None:
    head = LearnableNorm(gamma_query=0.8125, gamma_document=0.25)
    attach_head(tiny_model, head)
    tiny_model.save(str(tmp_path / "model"))
    texts = ["the cat is a dog", "magnitude norm vector"]
    q = tiny_model.encode_query(texts)
    d = tiny_model.encode_document(texts)
    script = textwrap.dedent(
        f"""
        import json, sys
        from st_magnitude.models import load_model
        m = load_model({str(tmp_path / 'model')!r})
        h = m[-1]
        print(json.dumps({{"q": m.encode_query({texts!r}).tolist(), "d": m.encode_document({texts!r}).tolist(),
                          "sim": m.similarity_fn_name, "type": type(h).__name__,
                          "gq": h.gamma_query, "gd": h.gamma_document}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded["type"] == "LearnableNorm" and loaded["sim"] == "dot"
    assert (loaded["gq"], loaded["gd"]) == (0.8125, 0.25)
    assert np.array_equal(np.asarray(loaded["q"], dtype=np.float32), q)
    assert np.array_equal(np.asarray(loaded["d"], dtype=np.float32), d)


def test_numpy_and_tensor_scalars_are_accepted_as_gamma() -> None:
    import numpy as np

    head = LearnableNorm(gamma_query=np.float32(0.5), gamma_document=torch.tensor(0.25))
    assert (head.gamma_query, head.gamma_document) == (0.5, 0.25)
    assert type(head.get_config_dict()["gamma_query"]) is float  # JSON-serializable on save
    with pytest.raises(HeadConfigError, match="number in"):
        LearnableNorm(gamma_query=np.bool_(True))
    with pytest.raises(HeadConfigError, match="number in"):
        LearnableNorm(gamma_query=torch.tensor([0.1, 0.2]))
