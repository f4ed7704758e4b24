"""A user's DeepSpeed script, as a `framework: deepspeed` command job runs it under torchrun: the
DeepSpeed config is the one Phalanx rendered from the spec ($PHALANX_DEEPSPEED_CONFIG), the
optimizer is the script's own (torch AdamW). Trains a tiny MLP on deterministic data; rank 0
writes the per-step losses (mean over the global batch) to $OUT_DIR/losses.json.

``MODEL=builtin`` instead trains the built-in runtime's debug transformer (shape ``preset debug`` +
``$MODEL_OVERRIDES``) on its synthetic data, with its AdamW and LR schedule, all from the job's
spec in $PHALANX_CONFIG (seed, lr, weight decay, schedule, seqLen): the losses of a built-in job
with the same training spec (loss parity with the built-in runtime's ZeRO).

Also the single-process reference: ``reference(steps, global_batch, micro, lr, clip)`` trains the
same model on the same samples with plain torch (no DeepSpeed)."""

from __future__ import annotations

import json
import os
import sys

import torch

DIM, HIDDEN, SAMPLES, SEED = 16, 32, 4096, 0


def model() -> torch.nn.Module:
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(DIM, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, DIM, generator=g)
    return x, x.sum(1, keepdim=True).sin()


def optimizer(m: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.0)


def reference(steps: int, global_batch: int, micro: int, lr: float, clip: float) -> list[float]:
    m, (x, y) = model(), data()
    opt = optimizer(m, lr)
    accumulation, losses = global_batch // micro, []
    for step in range(steps):
        total = 0.0
        for k in range(accumulation):
            lo = step * global_batch + k * micro
            loss = torch.nn.functional.mse_loss(m(x[lo:lo + micro]), y[lo:lo + micro])
            (loss / accumulation).backward()
            total += loss.item()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
        opt.step()
        opt.zero_grad()
        losses.append(total / accumulation)
    return losses


def builtin_parts(spec, dp_rank: int, dp_size: int):
    """The built-in runtime's model, data, optimizer and LR schedule for ``spec`` (as trainer.py builds them)."""
    from phalanx_common.presets import resolve_shape
    from phalanx_runtime.components.data import DataLoader, make_source
    from phalanx_runtime.components.loss import cross_entropy
    from phalanx_runtime.components.optimizer import build_lr_scheduler, build_optimizer
    from phalanx_runtime.models.transformer.model import build_transformer

    tr = spec.training
    shape = resolve_shape("debug", json.loads(os.environ.get("MODEL_OVERRIDES", "{}")))
    torch.manual_seed(tr.seed)
    m = build_transformer(shape, seed=tr.seed, device="cpu")
    opt = build_optimizer(list(m.parameters()), lr=tr.lr, weight_decay=tr.weight_decay)
    ls = tr.lr_schedule
    sched = build_lr_scheduler(opt, total_steps=tr.steps, warmup_steps=ls.warmup_steps, decay=ls.decay,
                               min_lr_ratio=ls.min_lr_ratio)
    source = make_source(spec.data.source, seq_len=spec.data.seq_len, vocab_size=shape.vocab_size, seed=tr.seed)
    loader = DataLoader(source, global_batch=tr.global_batch_size, dp_rank=dp_rank, dp_size=dp_size, seed=tr.seed)
    return m, opt, sched, loader, cross_entropy


def main() -> None:
    import deepspeed
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if not cuda:
        # DeepSpeed's CPU accelerator JIT-compiles a shared-memory all-reduce (C++, ninja) at
        # init_distributed; gloo does the job here without a compiler.
        sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    with open(os.environ["PHALANX_DEEPSPEED_CONFIG"]) as f:
        cfg = json.load(f)
    rank, world = dist.get_rank(), dist.get_world_size()
    if os.environ.get("MODEL") == "builtin":
        return train_builtin(deepspeed, dist, cfg, rank, world)
    steps = int(os.environ.get("STEPS", "5"))
    lr = float(os.environ.get("LR", "0.01"))
    m = model()
    engine, _, _, _ = deepspeed.initialize(model=m, optimizer=optimizer(m, lr),
                                           config=os.environ["PHALANX_DEEPSPEED_CONFIG"])
    micro, accumulation = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    global_batch = cfg["train_batch_size"]
    assert global_batch == micro * accumulation * world, (global_batch, micro, accumulation, world)
    x, y = data()
    losses = []
    for step in range(steps):
        total = torch.zeros(())
        for k in range(accumulation):  # this rank's contiguous share of the global batch
            lo = step * global_batch + (rank * accumulation + k) * micro
            loss = torch.nn.functional.mse_loss(engine(x[lo:lo + micro]), y[lo:lo + micro])
            engine.backward(loss)
            engine.step()
            total += loss.detach()
        dist.all_reduce(total)
        losses.append(total.item() / (accumulation * world))
    finish(dist, engine, cfg, losses, rank, world, micro, accumulation)


def finish(dist, engine, cfg, losses, rank, world, micro, accumulation) -> None:
    if rank == 0:
        out = {"losses": losses, "world": world, "micro": micro, "accumulation": accumulation,
               "zero": engine.zero_optimization_stage(), "config": cfg}
        with open(os.path.join(os.environ["OUT_DIR"], "losses.json"), "w") as f:
            json.dump(out, f)
    # A clean end, as a DeepSpeed script should: release the engine (ZeRO-3's parameter hooks and
    # partitions), let every rank arrive, then tear the group down. A rank that destroyed its gloo
    # group while ZeRO-3 work was still in flight could std::terminate (seen once in CI).
    engine.destroy()
    dist.barrier()
    dist.destroy_process_group()


def train_builtin(deepspeed, dist, cfg, rank: int, world: int) -> None:
    from phalanx.api.types import TrainingJobSpec

    with open(os.environ["PHALANX_CONFIG"]) as f:
        spec = TrainingJobSpec.model_validate(json.load(f)["spec"])
    m, opt, sched, loader, loss_fn = builtin_parts(spec, rank, world)
    engine, _, _, _ = deepspeed.initialize(model=m, optimizer=opt, lr_scheduler=sched,
                                           config=os.environ["PHALANX_DEEPSPEED_CONFIG"])
    micro, accumulation = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    losses = []
    for _ in range(spec.training.steps):
        inputs, labels = loader.next_batch()  # this rank's local batch, split into microbatches
        total = torch.zeros(())
        for x, y in zip(inputs.chunk(accumulation), labels.chunk(accumulation), strict=True):
            loss = loss_fn(engine(x), y)
            engine.backward(loss)  # DeepSpeed scales by 1 / accumulation
            engine.step()  # optimizer + LR schedule at the accumulation boundary
            total += loss.detach()
        dist.all_reduce(total)
        losses.append(total.item() / (accumulation * world))
    finish(dist, engine, cfg, losses, rank, world, micro, accumulation)


if __name__ == "__main__":
    main()
