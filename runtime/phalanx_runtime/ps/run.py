"""One rank of a parameter-server job (``spec.parallelism.parameterServer``): build the model
(every rank, same seed: the servers take their shards of it, the workers compute with it), plan
the shards, then serve (servers) or train (workers) over RPC. Server 0 gathers the workers'
per-step records at the end and returns the job's ``TrainResult`` (losses: the mean over workers;
grad norms: sync the global norm, async worker 0's own; step times and bytes: per worker)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from phalanx_common.contract import DEFAULT_TERMINATION_LOG, ENV_PROGRESS_PORT, ENV_TERMINATION_LOG
from phalanx_runtime.components.data import DataLoader, make_source
from phalanx_runtime.components.loss import cross_entropy
from phalanx_runtime.components.progress import Progress, ProgressServer, write_final
from phalanx_runtime.config import RuntimeConfig
from phalanx_runtime.ps import server as srv
from phalanx_runtime.ps.optim import OptimConfig
from phalanx_runtime.ps.roles import Role, init_rpc, role_from_env, server_name
from phalanx_runtime.ps.shardckpt import ShardCheckpoint
from phalanx_runtime.ps.sharding import make_plan
from phalanx_runtime.ps.worker import PSWorker
from phalanx_runtime.trainer import TrainResult, checkpoint_dir

log = logging.getLogger("phalanx_runtime")


def build_model(cfg: RuntimeConfig, role: Role):
    """(model, loss_fn, vocab size) on CPU, identical on every rank."""
    spec = cfg.spec
    torch.manual_seed(spec.training.seed)
    if spec.model.entrypoint:
        from phalanx_runtime.models.entrypoint import ModelContext, build_entrypoint_model

        ctx = ModelContext(config=cfg, mesh=None, device=torch.device("cpu"), rank=role.rank,
                           world_size=role.world_size, local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                           seq_len=spec.data.seq_len, seed=spec.training.seed)
        model, loss_fn = build_entrypoint_model(spec.model.entrypoint, ctx)
        return model, loss_fn or cross_entropy, 256
    from phalanx_runtime.models.transformer import build_transformer

    shape = cfg.shape
    return build_transformer(shape, seed=spec.training.seed, device="cpu"), cross_entropy, shape.vocab_size


def shard_checkpoint(cfg: RuntimeConfig, role: Role) -> ShardCheckpoint | None:
    root = checkpoint_dir()
    if root is None:
        return None
    ck = cfg.spec.checkpoint
    return ShardCheckpoint(Path(root) / "ps", role.index, role.servers, ck.interval_steps, ck.keep_last,
                           cfg.spec.training.steps)


def run_parameter_server(cfg: RuntimeConfig) -> TrainResult:
    spec = cfg.spec
    ps = spec.parallelism.parameter_server
    role = role_from_env(ps.servers)
    model, loss_fn, vocab = build_model(cfg, role)
    plan = make_plan(model, ps.servers)
    if role.is_server:
        return _serve(cfg, role, model, plan)
    return _work(cfg, role, model, loss_fn, vocab, plan)


def _serve(cfg: RuntimeConfig, role: Role, model, plan) -> TrainResult:
    from torch.distributed import rpc

    spec, ps = cfg.spec, cfg.spec.parallelism.parameter_server
    server = srv.ShardServer(role.index, plan, model, OptimConfig.from_spec(spec), workers=role.workers,
                             mode=ps.mode, staleness=ps.staleness, ckpt=shard_checkpoint(cfg, role),
                             resume=spec.checkpoint.resume)
    del model
    srv.install(server)
    http = _progress(cfg, role, server)
    init_rpc(role)
    if role.index == 0:
        log.info("parameter server: %d servers, %d workers, mode %s, start step %d, %d dense / %d row-sharded tensors",
                 role.servers, role.workers, ps.mode, server.start_step, len(plan.dense_owner), len(plan.row_sharded))
    rpc.shutdown()  # graceful: returns when every worker is done
    srv.install(None)
    if server.progress is not None:
        server.progress.update(phase="Succeeded")
        write_final(server.progress, os.environ.get(ENV_TERMINATION_LOG, DEFAULT_TERMINATION_LOG))
    if http is not None:
        http.close()
    return job_result(spec, role, server.start_step, server.reports)


def _progress(cfg: RuntimeConfig, role: Role, server: srv.ShardServer):
    """Server 0 (global rank 0) reports progress as the Trainer does: worker 0 sends each step's
    loss; served at ``$PHALANX_PROGRESS_PORT`` when set (the operator's hang detector reads it)."""
    if role.rank != 0:
        return None
    server.progress = Progress(cfg.spec.training.steps, role.world_size, cfg.name)
    server.progress.update(phase="Running", step=server.start_step)
    port = os.environ.get(ENV_PROGRESS_PORT)
    return ProgressServer(server.progress, int(port)) if port else None


def _work(cfg: RuntimeConfig, role: Role, model, loss_fn, vocab: int, plan) -> TrainResult:
    from torch.distributed import rpc

    spec, tr = cfg.spec, cfg.spec.training
    init_rpc(role)
    start = rpc.rpc_sync(server_name(0), srv.rpc_start_step)
    source = make_source(spec.data.source, seq_len=spec.data.seq_len, vocab_size=vocab, seed=tr.seed,
                         path=spec.data.path, dtype=spec.data.dtype)
    loader = DataLoader(source, global_batch=tr.global_batch_size, dp_rank=role.index, dp_size=role.workers,
                        seed=tr.seed)
    loader.step = start
    worker = PSWorker(role.index, plan, model, loss_fn, accum=loader.local_batch // tr.micro_batch_size,
                      grad_clip=tr.grad_clip, mode=spec.parallelism.parameter_server.mode)
    fut = None
    for step in range(start + 1, tr.steps + 1):
        rec = worker.step(step, *loader.next_batch())
        if role.index == 0:
            if fut is not None:
                fut.wait()
            fut = rpc.rpc_async(server_name(0), srv.rpc_progress, args=(step, rec["loss"], rec["step_time"]))
        if role.index == 0 and (step % tr.log_every == 0 or step == tr.steps):
            log.info("ps worker 0 step %d/%d loss %.5f %.3fs", step, tr.steps, rec["loss"], rec["step_time"])
    if fut is not None:
        fut.wait()
    rpc.rpc_sync(server_name(0), srv.rpc_report, args=(role.index, worker.records))
    rpc.shutdown()
    return job_result(spec, role, start, {role.index: worker.records})


def job_result(spec, role: Role, start: int, reports: dict[int, list[dict]]) -> TrainResult:
    r = TrainResult(steps=spec.training.steps, world_size=role.world_size, start_step=start,
                    tokens_per_step=spec.training.global_batch_size * spec.data.seq_len)
    if not reports:
        return r
    workers = sorted(reports)
    by_step = [[reports[w][i] for w in workers] for i in range(min(len(reports[w]) for w in workers))]
    r.losses = [sum(x["loss"] for x in recs) / len(recs) for recs in by_step]
    r.grad_norms = [recs[0]["grad_norm"] for recs in by_step]
    r.step_times = [recs[0]["step_time"] for recs in by_step]
    r.extra = {"workers": len(workers), "servers": role.servers,
               "bytes_per_step": [sum(x["bytes_sent"] + x["bytes_received"] for x in recs) for recs in by_step],
               "max_staleness": max((x["staleness"] for recs in by_step for x in recs), default=0),
               "staleness": [[x["staleness"] for x in recs] for recs in by_step]}
    return r
