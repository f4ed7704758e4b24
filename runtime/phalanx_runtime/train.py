"""The training loop, top to bottom: distributed init → mesh → model (+ parallelisms) →
optimizer → data → metrics/progress → steps. One process per device; started by
``phalanx_runtime.launch`` through torchrun (``python -m phalanx_runtime.train``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F

from phalanx.constants import (
    DEFAULT_TERMINATION_LOG,
    ENV_CHECKPOINT_DIR,
    ENV_METRICS_PORT,
    ENV_PROGRESS_PORT,
    ENV_TERMINATION_LOG,
)
from phalanx_runtime.components.checkpoint import CheckpointConfig, Checkpointer
from phalanx_runtime.components.data import DataLoader, make_source
from phalanx_runtime.components.metrics import (
    MetricsLogger,
    device_peak_flops,
    metric_labels,
    metrics_log_path,
)
from phalanx_runtime.components.optimizer import build_lr_scheduler, build_optimizer
from phalanx_runtime.components.progress import Progress, ProgressServer, write_final
from phalanx_runtime.config import RuntimeConfig, check_layout, load_config
from phalanx_runtime.distributed.clip import clip_grad_norm_
from phalanx_runtime.distributed.mesh import build_mesh, device_for_rank
from phalanx_runtime.distributed.pipeline import build_pipeline
from phalanx_runtime.lifetime import (
    EXIT_PREEMPTED,
    StopWatchdog,
    die_with_parent,
    parent_pid_from_env,
    stop_grace,
)
from phalanx_runtime.models.entrypoint import ModelContext
from phalanx_runtime.models.registry import build_model_parts

log = logging.getLogger("phalanx_runtime")
ENV_BACKEND = "PHALANX_BACKEND"
ENV_RESULT_FILE = "PHALANX_RESULT_FILE"


@dataclass
class TrainResult:
    steps: int
    world_size: int
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    tokens_per_step: int = 0
    mfu: float = 0.0
    peak_memory_bytes: int = 0
    data_state: dict = field(default_factory=dict)
    start_step: int = 0  # resumed from this checkpoint step (0 = fresh start)
    preempted: bool = False  # stopped on SIGTERM after saving a checkpoint (exit EXIT_PREEMPTED)
    last_checkpoint: dict | None = None
    checkpoint_stall_s: list[float] = field(default_factory=list)  # training blocked per save
    checkpoint_save_s: list[float] = field(default_factory=list)  # start of save → committed

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")

    @property
    def tokens_per_s(self) -> float:
        # Steady state: skip the first step (shape inference, allocator warm-up) when we can.
        times = self.step_times[1:] if len(self.step_times) > 1 else self.step_times
        return self.tokens_per_step * len(times) / sum(times) if times and sum(times) > 0 else 0.0

    def summary(self) -> dict:
        return {"final_loss": self.final_loss, "steps": self.steps, "tokens_per_s": self.tokens_per_s,
                "world_size": self.world_size}


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


# --------------------------------------------------------------------------------------------
# Process group


def init_distributed() -> tuple[int, int, int, bool]:
    """(rank, world size, local rank, created_here). Uses torchrun's env; a lone process
    (tests, single-device runs) gets an in-memory store."""
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), False
    backend = os.environ.get(ENV_BACKEND) or ("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    if "WORLD_SIZE" not in os.environ or "MASTER_ADDR" not in os.environ:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        return 0, 1, 0, True
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), True


@contextlib.contextmanager
def grad_sync(parts, enabled: bool):
    """Skip gradient reduction on all but the last microbatch of an accumulation."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    with contextlib.ExitStack() as stack:
        for p in parts:
            if isinstance(p, DistributedDataParallel) and not enabled:
                stack.enter_context(p.no_sync())
            elif isinstance(p, FSDPModule):
                p.set_requires_gradient_sync(enabled)
        yield


# --------------------------------------------------------------------------------------------
# Preemption: SIGTERM sets a flag; the loop agrees on it across ranks at the next step
# boundary, saves a checkpoint and exits EXIT_PREEMPTED (143, retryable). A rank that cannot get
# there (blocked in a collective or the rendezvous on a rank that is hung or gone) is ended by a
# watchdog after $PHALANX_STOP_GRACE_SECONDS, with the reason in its log (lifetime.StopWatchdog).

_stop = threading.Event()
NO_CHECKPOINT_REASON = ("no checkpoint was saved: the ranks save one together at a step boundary, and this rank "
                        "never reached it (blocked in a collective or the rendezvous on a rank that is hung or gone)")


def _on_sigterm(signum, frame):  # noqa: ARG001
    _stop.set()


@contextlib.contextmanager
def sigterm_flag():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _stop.clear()
    prev = signal.signal(signal.SIGTERM, _on_sigterm)
    watchdog = StopWatchdog(stop_grace(), name=f"rank {os.environ.get('RANK', 0)}", reason=NO_CHECKPOINT_REASON)
    watchdog.start()
    try:
        yield
    finally:
        watchdog.stop()
        signal.signal(signal.SIGTERM, prev)


def checkpoint_dir(cfg: RuntimeConfig) -> str | None:
    """``$PHALANX_CHECKPOINT_DIR`` (the operator sets ``<mountPath>/<namespace>/<job>``; local mode a
    temporary or ``--checkpoint-dir`` directory). None: this run does not checkpoint."""
    return os.environ.get(ENV_CHECKPOINT_DIR) or None


# --------------------------------------------------------------------------------------------
# The loop


def train(cfg: RuntimeConfig, *, progress_port: int | None = None, metrics_port: int | None = None) -> TrainResult:
    with sigterm_flag():
        return _train(cfg, progress_port=progress_port, metrics_port=metrics_port)


def _train(cfg: RuntimeConfig, *, progress_port: int | None = None, metrics_port: int | None = None) -> TrainResult:
    spec, par, tr = cfg.spec, cfg.spec.parallelism, cfg.spec.training

    # 1. Process group, device, layout checks (the launcher checked too; entrypoints may not).
    rank, world, local_rank, created = init_distributed()
    device = device_for_rank(local_rank)
    gloo = device.type == "cpu"
    errors = check_layout(spec, cuda_available=device.type == "cuda", checkpointing=checkpoint_dir(cfg) is not None)
    if errors:
        raise SystemExit("invalid layout:\n  " + "\n  ".join(errors))
    if tr.precision == "bf16" and device.type != "cuda" and rank == 0:
        log.warning("training.precision bf16 needs a GPU; this CPU run computes in fp32")
    torch.manual_seed(tr.seed)

    # 2. Mesh: pp → dp_replicate → dp_shard → tp.
    layout = cfg.layout
    pmesh = build_mesh(layout, device.type)
    dp_rank, dp_size = pmesh.dp_rank, layout.dp

    # 3. Model, split and parallelised (PP → TP → AC → FSDP/DDP).
    ctx = ModelContext(config=cfg, mesh=pmesh, device=device, rank=rank, world_size=world,
                       local_rank=local_rank, seq_len=spec.data.seq_len, seed=tr.seed)
    model = build_model_parts(cfg, pmesh, device, ctx, gloo=gloo)
    loss_fn = model.loss_fn or cross_entropy
    pipeline = None
    if par.pipeline > 1:
        pipeline = build_pipeline(model.parts, model.stage_ids, model.n_stages, device=device,
                                  group=pmesh.group("pp"), schedule=par.pipeline_schedule,
                                  microbatches=par.microbatches, loss_fn=loss_fn)
    params = list(model.parameters())

    # 4. Optimizer and LR schedule.
    optimizer = build_optimizer(params, lr=tr.lr, weight_decay=tr.weight_decay, zero=par.zero,
                                dp_group=pmesh.group("dp"), device=device)
    ls = tr.lr_schedule
    scheduler = build_lr_scheduler(optimizer, total_steps=tr.steps, warmup_steps=ls.warmup_steps,
                                   decay=ls.decay, min_lr_ratio=ls.min_lr_ratio)

    # 5. Data, sharded by data-parallel rank.
    vocab = model.shape.vocab_size if model.shape else 256
    source = make_source(spec.data.source, seq_len=spec.data.seq_len, vocab_size=vocab, seed=tr.seed,
                         path=spec.data.path, dtype=spec.data.dtype)
    loader = DataLoader(source, global_batch=tr.global_batch_size, dp_rank=dp_rank, dp_size=dp_size, seed=tr.seed)
    local_batch = loader.local_batch
    accum = 1 if pipeline else local_batch // tr.micro_batch_size

    # 6. Checkpoints (components/checkpoint.py, DCP): resume model parts, optimizer, scheduler,
    #    loader position and RNG from the newest committed checkpoint.
    progress = Progress(tr.steps, world, cfg.name)
    ckpt = None
    ckpt_dir = checkpoint_dir(cfg)
    if ckpt_dir:
        ckpt = Checkpointer(CheckpointConfig.from_spec(spec.checkpoint, ckpt_dir), parts=model.parts,
                            optimizer=optimizer, scheduler=scheduler, loader=loader, progress=progress,
                            layout=f"(pp, dp_replicate, dp_shard, tp) = {layout.shape}, zero {par.zero}",
                            dp_rank=dp_rank, dp_size=dp_size)
    start_step = ckpt.resume() if ckpt is not None else 0

    # 7. Metrics (Prometheus per pod) and progress (node-rank 0).
    tokens_per_step = tr.global_batch_size * spec.data.seq_len
    precision = "bf16" if (tr.precision == "bf16" and device.type == "cuda") else "fp32"
    peak, peak_src = device_peak_flops(device, precision)
    if metrics_port is None and os.environ.get(ENV_METRICS_PORT) and local_rank == 0:
        metrics_port = int(os.environ[ENV_METRICS_PORT])
    metrics = MetricsLogger(flops_per_token=model.shape.flops_per_token(spec.data.seq_len) if model.shape else None,
                            peak_flops=peak, world_size=world, tokens_per_step=tokens_per_step, device=device,
                            prometheus_port=metrics_port if local_rank == 0 else None,
                            labels=metric_labels(cfg.namespace, cfg.name, rank),
                            log_path=metrics_log_path(ckpt_dir) if rank == 0 else None)
    server = None
    if progress_port is None and os.environ.get(ENV_PROGRESS_PORT) and rank == 0:
        progress_port = int(os.environ[ENV_PROGRESS_PORT])
    if rank == 0 and progress_port:
        server = ProgressServer(progress, progress_port)
    if rank == 0:
        log.info("job %s: world %d layout %s model %s peak %.3g FLOP/s (%s)", cfg.name, world, layout.shape,
                 model.shape, peak, peak_src)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if precision == "bf16" and par.zero < 2
                else contextlib.nullcontext())
    pp_group = pmesh.group("pp") if par.pipeline > 1 else None
    is_last_stage = pipeline is None or pipeline.has_last
    result = TrainResult(steps=tr.steps, world_size=world, tokens_per_step=tokens_per_step, start_step=start_step)
    progress.update(phase="Running", step=start_step)

    # 8. Steps.
    for step in range(start_step + 1, tr.steps + 1):
        t0 = time.perf_counter()
        inputs, labels = loader.next_batch()
        inputs, labels = inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True)

        if pipeline is not None:
            with autocast:
                loss = pipeline.step(inputs, labels)
        else:
            loss = torch.zeros((), device=device)
            for i, (x, y) in enumerate(zip(inputs.chunk(accum), labels.chunk(accum), strict=True)):
                with grad_sync(model.parts, enabled=i == accum - 1), autocast:
                    mb_loss = loss_fn(model.parts[0](x), y) / accum
                mb_loss.backward()
                loss += mb_loss.detach()

        gnorm = clip_grad_norm_(params, tr.grad_clip, pp_group=pp_group)
        if ckpt is not None:
            ckpt.before_update()  # an async checkpoint's staging copy is complete
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        # Global mean loss: last-stage ranks hold their dp shard's loss (tp ranks repeat it). The
        # second element counts ranks that got SIGTERM: every rank stops at the same step.
        lsum = (loss.detach().float() if (is_last_stage and loss is not None) else torch.zeros((), device=device))
        lsum = torch.cat([lsum.reshape(1).to(device), torch.full((1,), float(_stop.is_set()), device=device)])
        dist.all_reduce(lsum, op=dist.ReduceOp.SUM)
        global_loss = float(lsum[0]) / (dp_size * layout.tp)
        stop = float(lsum[1]) > 0
        step_time = time.perf_counter() - t0

        m = metrics.record(step=step, loss=global_loss, grad_norm=float(gnorm),
                           lr=scheduler.get_last_lr()[0], step_time=step_time)
        result.losses.append(global_loss)
        result.grad_norms.append(float(gnorm))
        result.step_times.append(step_time)
        result.mfu, result.peak_memory_bytes = m.mfu, m.peak_memory_bytes
        progress.update(step=step, loss=global_loss, tokensPerSecond=m.tokens_per_s, mfu=m.mfu,
                        stepTimeSeconds=step_time)
        if rank == 0 and (step % tr.log_every == 0 or step == tr.steps):
            log.info("step %d/%d loss %.5f gnorm %.4f lr %.3g %.3fs %.0f tok/s mfu %.2f%% mem %.0fMiB",
                     step, tr.steps, global_loss, m.grad_norm, m.lr, step_time, m.tokens_per_s, 100 * m.mfu,
                     m.peak_memory_bytes / 2**20)
        if ckpt is not None:
            ckpt.poll()
            if stop:
                if rank == 0:
                    log.warning("SIGTERM: saving a checkpoint at step %d and exiting %d", step, EXIT_PREEMPTED)
                ckpt.save(step, force_sync=True)
                result.preempted = True
                break
            if ckpt.should_save(step, tr.steps):
                ckpt.save(step, force_sync=step == tr.steps)
        elif stop:
            result.preempted = True
            break

    if ckpt is not None:
        ckpt.close()
        if spec.checkpoint.export_consolidated and not result.preempted:
            ckpt.export_consolidated()
        if os.environ.get("PHALANX_DEBUG_FULL_STATE"):
            ckpt.dump_full_state(os.environ["PHALANX_DEBUG_FULL_STATE"])
        result.last_checkpoint = ckpt.last
        result.checkpoint_stall_s, result.checkpoint_save_s = ckpt.stall_seconds, ckpt.save_seconds
    result.data_state = loader.state_dict()
    progress.update(phase="Preempted" if result.preempted else "Succeeded")
    if rank == 0:
        write_final(progress, os.environ.get(ENV_TERMINATION_LOG, DEFAULT_TERMINATION_LOG))
    if server is not None:
        server.close()
    if created:
        dist.barrier()
        dist.destroy_process_group()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m phalanx_runtime.train")
    ap.add_argument("--config", default=None, help="runtime config JSON (default: $PHALANX_CONFIG)")
    args = ap.parse_args(argv)
    # A worker never outlives the launcher (or test harness) that started it: if that is killed
    # outright, nobody else would stop this process, and it would wait in a collective forever.
    # In direct mode the launcher runs this in its own process, already armed: leave it be.
    parent = parent_pid_from_env()
    if parent is not None:
        die_with_parent(signal.SIGKILL, parent)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    cfg = load_config(args.config)
    result = train(cfg)
    if int(os.environ.get("RANK", 0)) == 0 and os.environ.get(ENV_RESULT_FILE):
        with open(os.environ[ENV_RESULT_FILE], "w") as f:
            json.dump({**result.summary(), "losses": result.losses, "grad_norms": result.grad_norms,
                       "step_times": result.step_times, "mfu": result.mfu, "start_step": result.start_step,
                       "preempted": result.preempted, "last_checkpoint": result.last_checkpoint,
                       "checkpoint_stall_s": result.checkpoint_stall_s,
                       "checkpoint_save_s": result.checkpoint_save_s}, f)
    return EXIT_PREEMPTED if result.preempted else 0


if __name__ == "__main__":
    raise SystemExit(main())
