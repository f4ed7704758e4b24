"""A plain PyTorch Lightning script, as a user writes one: a small regression LightningModule that
logs ``train_loss`` (on the progress bar) every step and ``val_loss`` on validation, trained with
DDP over gloo on CPU. Nothing in it knows about Phalanx. Under torchrun Lightning finds its
cluster in torchrun's env (TorchElasticEnvironment: RANK, WORLD_SIZE, MASTER_ADDR...), and the
Trainer's num_nodes × devices must match that world.

    torchrun --nnodes=2 --nproc-per-node=1 ... lightning_script.py --nodes 2 --max-steps 8
"""

from __future__ import annotations

import argparse
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar
from torch.utils.data import DataLoader, TensorDataset

DIM = 8


class Regressor(pl.LightningModule):
    def __init__(self, lr: float):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(DIM, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def dataset(samples: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, DIM, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True).sin())


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=int(os.environ.get("NNODES", "1")))
    p.add_argument("--devices", type=int, default=int(os.environ.get("NPROC_PER_NODE", "1")))
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=float(os.environ.get("LEARNING_RATE", "0.01")))
    # Lightning's default bar is Rich's when rich is installed (transformers brings it), else tqdm's
    p.add_argument("--progress-bar", choices=("default", "tqdm", "rich"), default="default")
    p.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR", "/tmp/lightning-out"))
    return p.parse_args()


def main(callbacks: list | None = None) -> None:
    args = parse_args()
    pl.seed_everything(0)
    bars = {"default": [], "tqdm": [TQDMProgressBar()], "rich": [RichProgressBar()]}[args.progress_bar]
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices, num_nodes=args.nodes, strategy="ddp",
                         max_steps=args.max_steps, val_check_interval=4, log_every_n_steps=1,
                         default_root_dir=args.output_dir, logger=False, enable_model_summary=False,
                         callbacks=bars + (callbacks or []))
    trainer.fit(Regressor(args.lr), DataLoader(dataset(512, 1), batch_size=8, shuffle=True),
                DataLoader(dataset(64, 2), batch_size=16))
    if trainer.is_global_zero:
        print(f"final train_loss={trainer.callback_metrics['train_loss']:.4f} "
              f"val_loss={trainer.callback_metrics['val_loss']:.4f}", flush=True)


if __name__ == "__main__":
    main()
