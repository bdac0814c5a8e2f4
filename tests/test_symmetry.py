"""The task symmetry guard: head symmetry, task-type classification, SymmetryViolationError."""

from __future__ import annotations

import warnings

import pytest

from st_magnitude.errors import SymmetryViolationError
from st_magnitude.heads import Cosine, DNorm, Dot, LearnableNorm, QNorm, attach_head
from st_magnitude.symmetry import (
    ASYMMETRIC_TASK_TYPES,
    SYMMETRIC_TASK_TYPES,
    check_task,
    is_symmetric,
    task_type_symmetry,
)

warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad")


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (Cosine(), True),
        (Dot(), True),
        (QNorm(), False),
        (DNorm(), False),
        (LearnableNorm(0.5, 0.5), True),
        (LearnableNorm(1.0, 0.0), False),
        (LearnableNorm(0.3, 0.3000001), True),  # |Δγ| = 1e-7 <= 1e-6
        (LearnableNorm(0.3, 0.31), False),
        (Cosine(query_scale=2.0, document_scale=0.5), True),  # scales do not break symmetry
    ],
)
def test_is_symmetric_heads(head, expected: bool) -> None:
    assert is_symmetric(head) is expected


def test_is_symmetric_tolerance_argument() -> None:
    head = LearnableNorm(0.3, 0.31)
    assert is_symmetric(head, tolerance=0.02) is True
    assert is_symmetric(head, tolerance=0.005) is False
    with pytest.raises(ValueError):
        is_symmetric(head, tolerance=-1.0)


def test_is_symmetric_models(tiny_model) -> None:
    assert is_symmetric(tiny_model) is True  # no head: plain pooled embeddings
    attach_head(tiny_model, QNorm())
    assert is_symmetric(tiny_model) is False
    attach_head(tiny_model, Dot())
    assert is_symmetric(tiny_model) is True
    with pytest.raises(TypeError):
        is_symmetric(42)


@pytest.mark.parametrize(
    ("task_type", "expected"),
    [
        ("Retrieval", "asymmetric"),
        ("Reranking", "asymmetric"),
        ("InstructionRetrieval", "asymmetric"),
        ("RAG", "asymmetric"),
        ("STS", "symmetric"),
        ("Clustering", "symmetric"),
        ("PairClassification", "symmetric"),
        ("BitextMining", "symmetric"),
        ("Summarization", "symmetric"),
        ("Classification", "symmetric"),
        ("SomethingNew", "symmetric"),  # unknown: the safe side
    ],
)
def test_task_type_symmetry(task_type: str, expected: str) -> None:
    assert task_type_symmetry(task_type) == expected


def test_type_tables_are_disjoint_and_reasoned() -> None:
    assert not set(ASYMMETRIC_TASK_TYPES) & set(SYMMETRIC_TASK_TYPES)
    core = ["Retrieval", "Reranking", "InstructionRetrieval", "RAG", "STS", "Clustering", "PairClassification",
            "BitextMining", "Summarization", "Classification"]
    tables = {**ASYMMETRIC_TASK_TYPES, **SYMMETRIC_TASK_TYPES}
    assert all(len(tables[t]) > 40 for t in core)


def test_guard_refuses_asymmetric_head_on_symmetric_task() -> None:
    with pytest.raises(SymmetryViolationError) as info:
        check_task(DNorm(), "STSBenchmark", "STS")
    message = str(info.value)
    for needle in ("STSBenchmark", "STS", "DNorm", "s(a, b)", "Cosine()", "symmetric_fallback='cosine'"):
        assert needle in message
    assert info.value.task_name == "STSBenchmark"
    assert info.value.task_type == "STS"
    # also a ValueError, so generic handlers keep working
    assert isinstance(info.value, ValueError)


def test_guard_decisions() -> None:
    retrieval = check_task(QNorm(), "SciFact", "Retrieval")
    assert (retrieval.task_symmetric, retrieval.head_symmetric, retrieval.fallback) == (False, False, None)
    sts_sym = check_task(Dot(), "STSBenchmark", "STS")
    assert sts_sym.fallback is None and sts_sym.head_symmetric is True
    fallback = check_task(QNorm(), "STSBenchmark", "STS", symmetric_fallback="cosine")
    assert fallback.uses_fallback and fallback.fallback == "cosine"
    assert fallback.to_dict()["head"] == "QNorm(γ_q=1, γ_d=0)"
    # the fallback is only recorded where it is needed
    assert check_task(Cosine(), "STSBenchmark", "STS", symmetric_fallback="cosine").fallback is None
    with pytest.raises(ValueError, match="symmetric_fallback"):
        check_task(QNorm(), "STSBenchmark", "STS", symmetric_fallback="dot")
