"""The servers' optimizer: torch.optim itself on the shard tensors, so the numerics are torch's.

Embedding shards get dense gradients on the server (the pushed rows scattered into zeros) so that
Adam's moments and weight decay treat untouched rows exactly as a single process would. The
learning rate of step ``t`` is the runtime's schedule (``lr_lambda(t - 1)``, what ``LambdaLR``
gives the t-th ``optimizer.step()``), set on every group before the step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from phalanx_runtime.components.optimizer import lr_lambda

OPTIMIZERS = ("adamw", "adam", "sgd")


@dataclass(frozen=True)
class OptimConfig:
    kind: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    momentum: float = 0.0
    total_steps: int = 1
    warmup_steps: int = 0
    decay: str = "constant"
    min_lr_ratio: float = 0.1

    @classmethod
    def from_spec(cls, spec) -> OptimConfig:
        tr = spec.training
        ls = tr.lr_schedule
        return cls(kind="adamw", lr=tr.lr, weight_decay=tr.weight_decay, total_steps=tr.steps,
                   warmup_steps=ls.warmup_steps, decay=ls.decay, min_lr_ratio=ls.min_lr_ratio)

    def lr_at(self, step: int) -> float:
        """LR of optimizer step ``step`` (1-based)."""
        return self.lr * lr_lambda(step - 1, total_steps=self.total_steps, warmup_steps=self.warmup_steps,
                                   decay=self.decay, min_lr_ratio=self.min_lr_ratio)


def build_server_optimizer(params: list[torch.Tensor], cfg: OptimConfig) -> torch.optim.Optimizer:
    """Weight decay on matrices only (the runtime's ``param_groups``)."""
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [g for g in ({"params": decay, "weight_decay": cfg.weight_decay},
                          {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    if cfg.kind == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, foreach=True)
    if cfg.kind == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, foreach=True)
    if cfg.kind == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, foreach=True)
    raise ValueError(f"parameter server optimizer {cfg.kind!r}: one of {', '.join(OPTIMIZERS)}")


@torch.no_grad()
def apply_step(opt: torch.optim.Optimizer, cfg: OptimConfig, step: int, *, scale: float = 1.0) -> None:
    """One optimizer step with the gradients already in ``.grad`` (multiplied by ``scale``: the
    averaging and clipping factor), then the gradients are dropped."""
    lr = cfg.lr_at(step)
    for g in opt.param_groups:
        g["lr"] = lr
        if scale != 1.0:
            for p in g["params"]:
                if p.grad is not None:
                    p.grad.mul_(scale)
    opt.step()
    opt.zero_grad(set_to_none=True)
