"""A plain Hugging Face ``Trainer`` script, as a user writes one: a tiny Llama made from a config
(no hub download, no tokenizer), random token ids as data, evaluation every few steps, checkpoints.
Nothing in it knows about Phalanx; torchrun starts it (its env: RANK, WORLD_SIZE, MASTER_ADDR...).

    torchrun --nproc-per-node=1 hf_trainer.py --output-dir /tmp/out --max-steps 6
"""

from __future__ import annotations

import argparse
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

VOCAB, SEQ = 128, 16


class RandomTokens(torch.utils.data.Dataset):
    """Fixed random token ids; the labels are the inputs (causal LM: the model shifts them)."""

    def __init__(self, samples: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (samples, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR", "/tmp/hf-out"))
    p.add_argument("--max-steps", type=int, default=int(os.environ.get("MAX_STEPS", "6")))
    p.add_argument("--learning-rate", type=float, default=float(os.environ.get("LEARNING_RATE", "1e-3")))
    p.add_argument("--eval-steps", type=int, default=3)
    p.add_argument("--save-steps", type=int, default=3)
    return p.parse_args()


def build_trainer(args: argparse.Namespace, callbacks: list | None = None) -> Trainer:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=SEQ)
    training = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps, learning_rate=args.learning_rate,
        per_device_train_batch_size=4, per_device_eval_batch_size=4, logging_steps=1,
        eval_strategy="steps", eval_steps=args.eval_steps, save_steps=args.save_steps,
        report_to="none", use_cpu=True, ddp_backend="gloo", dataloader_num_workers=0, seed=0)
    return Trainer(model=LlamaForCausalLM(config), args=training, train_dataset=RandomTokens(256, seed=1),
                   eval_dataset=RandomTokens(16, seed=2), callbacks=callbacks)


def main(callbacks: list | None = None) -> None:
    trainer = build_trainer(parse_args(), callbacks)
    trainer.train()
    metrics = trainer.evaluate()
    if trainer.is_world_process_zero():
        print(f"final eval_loss={metrics['eval_loss']:.4f}", flush=True)


if __name__ == "__main__":
    main()
