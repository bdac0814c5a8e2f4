"""One training step of MagnitudeInfoNCELoss through SentenceTransformerTrainer, alone or under torchrun.

Used by tests/test_ddp.py:

    python tests/ddp_worker.py --model-dir TINY --out ref.pt --batch-size 8                        # 1 process
    torchrun --nproc_per_node=2 tests/ddp_worker.py --model-dir TINY --out ddp.pt --batch-size 4  # DDP, gloo

The dataset has exactly 8 (anchor, positive, negative) rows, so the first optimizer step sees the whole set
in both runs: one batch of 8, or two per-process batches of 4 whose embeddings the loss gathers
(``gather_across_devices=True``). Dropout is off so the two runs compute the same function. The worker
records, per process: the loss its forward returned (a mean over its local queries), the gradients right
before the optimizer step (after DDP's all-reduce), and the anchors it saw. Each rank writes ``<out>.rank<r>``.
"""

from __future__ import annotations

import argparse
import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROWS = [
    ("magnitude of a vector", "the norm of a vector is its magnitude", "the cat sat in the house"),
    ("heart disease diet", "a diet for the heart reduces disease risk", "music from the river city"),
    ("vitamin study result", "the study found an effect of vitamin on health", "a car by the tree"),
    ("free speech law", "the law should protect free speech", "the moon and the sun"),
    ("cancer gene protein", "a protein of the gene is linked to cancer", "a dog and a book"),
    ("school policy debate", "the debate on school policy and government", "water and fire"),
    ("cosine retrieval model", "a retrieval model with cosine search", "patients eat food"),
    ("cell test data", "data from a cell test", "people argue because of the right"),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-size", type=int, required=True, help="per-process batch size")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps (gradients are kept from the first)")
    parser.add_argument("--ddp-mode", default="static", choices=["static", "no-unused", "default"])
    args = parser.parse_args()

    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import TrainerCallback

    from st_magnitude.heads import LearnableNorm, attach_head
    from st_magnitude.losses import MagnitudeInfoNCELoss

    torch.manual_seed(0)
    transformer = Transformer(
        args.model_dir,
        max_seq_length=32,
        config_kwargs={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    )
    model = SentenceTransformer(
        modules=[transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")], device="cpu"
    )
    # Asymmetric, trainable γ: the γ gradients are compared too.
    attach_head(model, LearnableNorm(gamma_query=0.5, gamma_document=0.9))
    loss = MagnitudeInfoNCELoss(model, temperature=0.05, gather_across_devices=True)

    record: dict[str, object] = {"losses": [], "anchors": []}

    def on_loss(module, inputs, output):  # the loss each process computes on its local queries
        record["losses"].append(output.detach().clone())

    loss.register_forward_hook(on_loss)
    tokenizer = transformer.tokenizer

    def on_model_forward(module, inputs):  # which anchors this process saw
        features = inputs[0]
        if features.get("task") == "query":
            record["anchors"].extend(tokenizer.batch_decode(features["input_ids"], skip_special_tokens=True))

    model.register_forward_pre_hook(on_model_forward)

    class GradCapture(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            if "grads" in record:
                return
            record["grads"] = {
                name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None
            }

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    ddp_kwargs = {
        "static": {"ddp_static_graph": True},
        "no-unused": {"ddp_find_unused_parameters": False},
        "default": {},
    }[args.ddp_mode]
    dataset = Dataset.from_dict(
        {"anchor": [r[0] for r in ROWS], "positive": [r[1] for r in ROWS], "negative": [r[2] for r in ROWS]}
    )
    training_args = SentenceTransformerTrainingArguments(
        output_dir=os.path.join(os.path.dirname(os.path.abspath(args.out)), "trainer_out"),
        per_device_train_batch_size=args.batch_size,
        max_steps=args.steps,
        learning_rate=1e-3,
        max_grad_norm=0.0,  # no clipping: compare raw gradients
        use_cpu=True,
        ddp_backend="gloo" if distributed else None,
        **ddp_kwargs,
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
        data_seed=0,
        router_mapping={"anchor": "query", "positive": "document", "negative": "document"},
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=training_args, train_dataset=dataset, loss=loss, callbacks=[GradCapture()]
    )
    trainer.train()
    rank = int(os.environ.get("RANK", "0"))
    record["world_size"] = int(os.environ.get("WORLD_SIZE", "1"))
    record["wrapped"] = type(loss.model).__name__  # DistributedDataParallel under torchrun
    torch.save(record, f"{args.out}.rank{rank}")


if __name__ == "__main__":
    main()
