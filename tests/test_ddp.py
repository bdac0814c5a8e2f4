"""DDP equivalence: MagnitudeInfoNCELoss(gather_across_devices=True) under ``torchrun --nproc_per_node=2`` (gloo,
CPU) gives the same loss and gradients as one process on the concatenated batch.

Both runs go through SentenceTransformerTrainer (tests/ddp_worker.py): the single process with one batch of
8 (anchor, positive, negative) rows, the DDP run with two per-process batches of 4 whose embeddings the loss
gathers with gradients (ST's ``all_gather_with_grad``). Tolerances: the global loss (mean of the per-process
losses, each a mean over its own 4 queries) within 1e-6; every gradient after DDP's all-reduce within
``rtol=1e-4, atol=1e-5`` elementwise and within 1e-5 relative in global L2 norm (measured: ~7e-7 relative,
max |Δ| ~7e-6 on gradients of norm ~24; the loss matched to the last bit).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("ddp_worker.py")
REPO = WORKER.parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available")
def test_ddp_two_processes_match_one_process(tiny_bert_dir, tmp_path):
    common = ["--model-dir", str(tiny_bert_dir), "--steps", "2"]
    single = subprocess.Popen(
        [sys.executable, str(WORKER), *common, "--out", str(tmp_path / "single.pt"), "--batch-size", "8"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    ddp = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), *common,
         "--out", str(tmp_path / "ddp.pt"), "--batch-size", "4", "--ddp-mode", "static"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    out_single, _ = single.communicate(timeout=600)
    out_ddp, _ = ddp.communicate(timeout=600)
    assert single.returncode == 0, out_single[-4000:]
    assert ddp.returncode == 0, out_ddp[-4000:]

    ref = torch.load(tmp_path / "single.pt.rank0")
    ranks = [torch.load(tmp_path / f"ddp.pt.rank{r}") for r in (0, 1)]
    assert ref["world_size"] == 1 and all(r["world_size"] == 2 for r in ranks)
    assert all(r["wrapped"] == "DistributedDataParallel" for r in ranks)  # the trainer really wrapped the model

    # Step 1 saw every row exactly once, split 4 + 4 over the two processes.
    first = [sorted(r["anchors"][:4]) for r in ranks]
    assert sorted(first[0] + first[1]) == sorted(ref["anchors"][:8])
    assert len(set(first[0]) & set(first[1])) == 0

    # Loss: each process returns the mean over its local queries against all 16 gathered candidates.
    ddp_loss = (ranks[0]["losses"][0] + ranks[1]["losses"][0]) / 2
    assert float(ddp_loss) == pytest.approx(float(ref["losses"][0]), abs=1e-6)
    assert float(ranks[0]["losses"][0]) != pytest.approx(float(ranks[1]["losses"][0]), abs=1e-3)  # really different halves

    # Gradients after all-reduce: identical on both ranks, equal to the single process's.
    g0, g1, gref = ranks[0]["grads"], ranks[1]["grads"], ref["grads"]
    assert set(g0) == set(gref) and "2.raw_gamma_query" in gref and "2.raw_gamma_document" in gref
    for name in g0:
        assert torch.equal(g0[name], g1[name]), name
    torch.testing.assert_close(g0, gref, rtol=1e-4, atol=1e-5)
    flat = torch.cat([g0[k].flatten() for k in gref])
    flat_ref = torch.cat([gref[k].flatten() for k in gref])
    assert float((flat - flat_ref).norm() / flat_ref.norm()) < 1e-5
    assert float(flat_ref.norm()) > 1.0  # a real, non-vanishing gradient
    # γ gradients (LearnableNorm) are carried across processes too.
    assert float(g0["2.raw_gamma_document"]) == pytest.approx(float(gref["2.raw_gamma_document"]), rel=1e-5)
    assert abs(float(gref["2.raw_gamma_document"])) > 1e-3
